//! End-to-end latency under an open-loop load: how long after a record is produced its
//! copy becomes visible to a `read_committed` reader, record by record and second by
//! second, for each kafka-eos guarantee and Kafka Streams exactly_once_v2 on one broker.
//!
//! `cargo bench --bench latency [-- --quick] [--partitions 4] [--rate 1000]
//! [--duration-secs 60] [--warmup-secs 5] [--subjects exactly-once,kafka-streams-eos-v2]
//! [--intervals 100] [--broker-warmup-secs 60] [--fresh-broker] [--linear-y] [--plots DIR]`;
//! docs/benchmarks.md ("End-to-end latency") says what it reports.
//!
//! # How
//! The systems run one after another on the same broker, each on fresh input and output
//! topics, after an unreported warm-up load on the new broker (its first minute under load
//! is slower for everyone, so the first system would pay for it alone); `--fresh-broker`
//! gives each system a broker of its own instead. A system is a 1:1 copy written as the
//! README writes a pipeline (the default commit interval, per guarantee), or
//! `cli/java/CopyApp.java` (Kafka Streams, exactly_once_v2, its default 100 ms commit
//! interval). Once a system has its partitions, a reader of the
//! output starts, then a paced producer (`load.rs`) writes `rate` records/s for the run's
//! length without ever waiting for the system — an open loop, so a stall shows as latency
//! instead of slowing the input down. When every record is visible (or the drain time is
//! up) the system is stopped. Records sent in the first `warmup` seconds are not counted.
//!
//! In quick mode (CI's) the run is also the latency guard: the exactly-once copy's p90
//! against `benches/baseline.json`'s `latency` limits, and against Kafka Streams' p90 of
//! the same run (`kafka_eos_cli::bench::latency_guard`). A failed check runs every system
//! again on the same broker, and fails the bench if it fails again.
//!
//! `report.rs` prints the percentiles, the worst latency of each second and, for every
//! second whose worst record waited more than a second, the pipeline's transactions
//! (`on_transaction` hook) that were in flight while it waited; it writes the per-second
//! series to `target/latency/<run>.csv` and plots it.

#[path = "../common/mod.rs"]
mod common;
mod load;
mod report;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::peers::{self, Peers, StreamsApp};
use common::{broker, cpu_ticks, init_tracing, load_average, runtime, steal_percent, Args};
use kafka_eos::config::Properties;
use kafka_eos::observe::TransactionEvent;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, ShutdownHandle, Summary};
use kafka_eos_cli::bench::{delete_topics, unique_name};
use load::{Epoch, Reader, Schedule};
use report::{Run, Txn};

/// The Kafka Streams system's name.
pub const STREAMS: &str = "kafka-streams-eos-v2";
/// Kafka Streams' default commit interval under exactly-once, and ours.
const DEFAULT_COMMIT_MS: u64 = 100;
/// The per-partition copy through a repartition topic: the cost of one hop.
const REPARTITION: &str = "exactly-once+repartition";
/// Every system, in the order they run.
const SYSTEMS: [&str; 5] = ["exactly-once", "exactly-once-per-consumer", "at-least-once", REPARTITION, STREAMS];
/// `--quick`'s systems: the comparison, per-partition exactly-once against Streams.
const QUICK_SYSTEMS: [&str; 2] = ["exactly-once", STREAMS];
/// `--quick`'s unreported load on the new broker: without it the first system alone runs
/// on a broker whose request paths are not yet compiled, and the guard's figures swing
/// with that.
const QUICK_BROKER_WARMUP: u64 = 20;
/// How long a system may take to get its partitions.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long after the last send the reader waits for the last records to become visible.
const DRAIN: Duration = Duration::from_secs(30);

/// The run's shape, from the flags.
#[derive(Clone, Debug)]
pub struct Plan {
    pub schedule: Schedule,
    /// Seconds at the start that are not counted.
    pub warmup: u64,
    /// Every system's commit interval; `None`: its default (the README's pipeline sets none).
    pub commit_ms: Option<u64>,
    pub systems: Vec<String>,
    /// `target/latency/<name>.csv` and `.svg`.
    pub name: String,
    /// Seconds of unreported exactly-once load on each new broker before a system runs.
    pub broker_warmup: u64,
    /// Each system on a broker of its own.
    pub fresh_broker: bool,
}

impl Plan {
    fn from(args: &Args) -> Plan {
        if args.partitions.len() > 1 || args.intervals.len() > 1 {
            eprintln!("latency takes one partition count and one commit interval: run it once per value");
            std::process::exit(2);
        }
        let commit_ms = args.intervals.first().copied();
        let partitions = args.partitions.first().copied().unwrap_or(4);
        let rate = args.rate.unwrap_or(1_000);
        let seconds = args.duration_secs.unwrap_or(if args.quick { 20 } else { 60 });
        let warmup = args.warmup_secs.unwrap_or(5).min(seconds.saturating_sub(1));
        let systems: Vec<String> = match (&args.subjects[..], args.quick) {
            ([], true) => QUICK_SYSTEMS.map(String::from).to_vec(),
            ([], false) => SYSTEMS.map(String::from).to_vec(),
            (names, _) => names.to_vec(),
        };
        if let Some(bad) = systems.iter().find(|s| !SYSTEMS.contains(&s.as_str())) {
            eprintln!("unknown system {bad}; the systems are {}", SYSTEMS.join(", "));
            std::process::exit(2);
        }
        let broker_warmup = args.broker_warmup_secs.unwrap_or(if args.quick { QUICK_BROKER_WARMUP } else { 60 });
        let interval = commit_ms.map_or(String::new(), |ms| format!("-{ms}ms"));
        let fresh = if args.fresh_broker { "-fresh" } else { "" };
        let cold = if broker_warmup == 0 && !args.quick { "-cold" } else { "" };
        let name = format!(
            "{}p{partitions}-{rate}rps-{seconds}s{interval}{fresh}{cold}",
            if args.quick { "quick-" } else { "" }
        );
        Plan {
            schedule: Schedule { rate, seconds, partitions },
            warmup,
            commit_ms,
            systems,
            name,
            broker_warmup,
            fresh_broker: args.fresh_broker,
        }
    }
}

fn main() {
    let args = Args::parse();
    init_tracing();
    let plan = Plan::from(&args);
    let peers = if plan.systems.iter().any(|s| s == STREAMS) {
        Peers::prepare().map_err(|e| println!("{STREAMS} is skipped (it needs a JDK 17+ and Maven): {e}")).ok()
    } else {
        None
    };
    let rt = runtime();
    let s = plan.schedule;
    println!(
        "latency ({} mode): {} records/s for {} s per system ({} records), {} partitions, the first {} s not \
         counted, commit interval {} ms; {}, warmed by {} s of unreported load; systems: {}",
        args.mode(),
        s.rate,
        s.seconds,
        s.records(),
        s.partitions,
        plan.warmup,
        plan.commit_ms.unwrap_or(DEFAULT_COMMIT_MS),
        if plan.fresh_broker { "a new broker per system" } else { "one broker" },
        plan.broker_warmup,
        plan.systems.join(", ")
    );
    let mut shared = None;
    let mut attempt = run_systems(&rt, &plan, peers.as_ref(), &mut shared);
    let mut guard = args.quick.then(|| report::guard(&attempt.runs, &plan));
    if guard.as_ref().is_some_and(|checks| checks.iter().any(|c| !c.passed)) {
        // A busy or starved machine fails one attempt now and then; a regression fails both.
        // The broker is kept: a young broker is slower, and the first system pays for it.
        report::finish(&attempt.runs, &plan, &args, &attempt.bootstrap, guard.as_deref());
        println!("\nthe latency guard failed: a second attempt on the same broker decides");
        attempt = run_systems(&rt, &plan, peers.as_ref(), &mut shared);
        guard = Some(report::guard(&attempt.runs, &plan));
    }
    drop(shared);
    report::finish(&attempt.runs, &plan, &args, &attempt.bootstrap, guard.as_deref());
    let mut failures = attempt.failures;
    if guard.is_some_and(|checks| checks.iter().any(|c| !c.passed)) {
        failures.push("the latency guard failed (above)".into());
    }
    if !failures.is_empty() {
        eprintln!("latency: {} system(s) failed:\n  {}", failures.len(), failures.join("\n  "));
        std::process::exit(1);
    }
}

/// The runs of one attempt at the plan, and the systems that failed.
struct Attempt {
    runs: Vec<Run>,
    failures: Vec<String>,
    bootstrap: String,
}

/// Every system of the plan, one after another, on the `shared` broker (a new warmed one if
/// there is none), or on a new one each with `--fresh-broker`.
fn run_systems(
    rt: &tokio::runtime::Runtime,
    plan: &Plan,
    peers: Option<&Peers>,
    shared: &mut Option<kafka_eos_testkit::broker::Cluster>,
) -> Attempt {
    let mut attempt = Attempt { runs: Vec::new(), failures: Vec::new(), bootstrap: String::new() };
    for system in &plan.systems {
        if system == STREAMS && peers.is_none() {
            continue;
        }
        if plan.fresh_broker {
            *shared = None; // stops the previous system's broker
        }
        let cluster = shared.get_or_insert_with(|| warmed_broker(rt, plan));
        let bootstrap = cluster.bootstrap_servers();
        println!("\n== {system} (on {bootstrap})");
        match run_system(rt, &bootstrap, peers, system, plan) {
            Ok(run) => {
                report::print_run(&run, plan);
                attempt.runs.push(run);
            }
            Err(e) => {
                println!("{system} failed: {e}");
                attempt.failures.push(format!("{system}: {e}"));
            }
        }
        attempt.bootstrap = bootstrap;
    }
    attempt
}

/// A warm-up round's slowest input acknowledgement in its last seconds above which the
/// broker is warmed again: a young broker short of CPU acknowledges its input slowly, and
/// the first system measured would pay for that alone.
const WARM_ACK: Duration = Duration::from_millis(250);
/// The most warm-up rounds on one broker.
const WARM_ROUNDS: u32 = 3;

/// A new broker, after `plan.broker_warmup` seconds of exactly-once per partition (the mode
/// with the most coordinator traffic) at the run's rate on it, reported but not counted,
/// repeated while the broker still acknowledges its input slowly.
fn warmed_broker(rt: &tokio::runtime::Runtime, plan: &Plan) -> kafka_eos_testkit::broker::Cluster {
    let cluster = broker();
    if plan.broker_warmup == 0 {
        return cluster;
    }
    let warm = Plan { schedule: Schedule { seconds: plan.broker_warmup, ..plan.schedule }, warmup: 0, ..plan.clone() };
    let bootstrap = cluster.bootstrap_servers();
    for round in 1..=WARM_ROUNDS {
        println!(
            "\n== broker warm-up on {bootstrap}, round {round}: {} s of exactly-once, not counted",
            warm.schedule.seconds
        );
        match run_system(rt, &bootstrap, None, "exactly-once", &warm) {
            Ok(run) => {
                report::print_run(&run, &warm);
                let tail = run.sent.worst_ack_by_second.iter().rev().take(5).max().copied().unwrap_or(0);
                let tail = Duration::from_micros(tail.into());
                if tail <= WARM_ACK {
                    break;
                }
                println!(
                    "  the input's slowest acknowledgement in the last 5 s was {tail:?}: the broker is not warm yet"
                );
            }
            Err(e) => {
                println!("the warm-up failed: {e}");
                break;
            }
        }
    }
    cluster
}

/// One system's run on fresh topics: start it, load it, drain, stop it.
fn run_system(
    rt: &tokio::runtime::Runtime,
    bootstrap: &str,
    peers: Option<&Peers>,
    system: &str,
    plan: &Plan,
) -> Result<Run, String> {
    let (load_before, ticks_before) = (load_average(), cpu_ticks());
    let (input, output) = (unique_name("latency-in"), unique_name("latency-out"));
    let admin = kafka_eos_testkit::admin::Client::new(bootstrap);
    for topic in [&input, &output] {
        admin.create_topic(topic, plan.schedule.partitions, 1).map_err(|e| format!("creating {topic}: {e}"))?;
    }
    let txns = Arc::new(Mutex::new(Vec::new()));
    let running = match (system, peers) {
        (STREAMS, Some(peers)) => Running::streams(peers, bootstrap, &input, &output, plan.commit_ms)?,
        _ => {
            let (guarantee, hop) = match system {
                REPARTITION => (Guarantee::ExactlyOncePerPartition, true),
                _ => (system.parse().map_err(|e| format!("{system}: {e:?}"))?, false),
            };
            Running::pipeline(rt, bootstrap, &input, &output, (guarantee, hop), plan.commit_ms, txns.clone())?
        }
    };
    let result = load(running, rt, bootstrap, &output, plan);
    delete_topics(bootstrap, &Properties::default(), &[input, output]);
    let (epoch, sent, seen) = result?;
    let txns = std::mem::take(&mut *txns.lock().unwrap_or_else(|p| p.into_inner()));
    let transactions = (system != STREAMS).then_some(txns);
    Ok(Run {
        system: system.to_string(),
        epoch,
        sent,
        seen,
        transactions,
        load_before,
        load_after: load_average(),
        steal_percent: steal_percent(ticks_before, cpu_ticks()),
    })
}

/// Waits for `running` to have its partitions, runs the load against it, and stops it.
fn load(
    running: Running,
    rt: &tokio::runtime::Runtime,
    bootstrap: &str,
    output: &str,
    plan: &Plan,
) -> Result<(Epoch, load::Sent, load::Seen), String> {
    let ready_by = Instant::now() + READY_TIMEOUT;
    while !running.ready() {
        if Instant::now() > ready_by || running.ended() {
            running.stop(rt);
            return Err(format!("it stopped, or had no partitions after {READY_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let epoch = Epoch::now();
    let reader = match Reader::start(bootstrap, output, plan.schedule, epoch) {
        Ok(reader) => reader,
        Err(e) => {
            running.stop(rt);
            return Err(e);
        }
    };
    let sent = load::produce(bootstrap, &running.input, plan.schedule, epoch)
        .and_then(|p| p.join().map_err(|_| "the producer panicked".to_string())?);
    if let Ok(sent) = &sent {
        let drained_by = Instant::now() + DRAIN;
        while reader.distinct() < sent.records - sent.failed && Instant::now() < drained_by && !running.ended() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    running.stop(rt);
    let seen = reader.finish()?;
    Ok((epoch, sent?, seen))
}

/// A system copying `input`, running.
struct Running {
    input: String,
    system: System,
}

enum System {
    Pipeline { handle: ShutdownHandle, task: tokio::task::JoinHandle<kafka_eos::Result<Summary>> },
    Streams { app: StreamsApp, ready: Arc<AtomicBool> },
}

impl Running {
    /// The copy of the README's first example, without the state and the error policy:
    /// every record to the output partition of its input partition, key and value
    /// unchanged, the default commit interval unless `commit_ms`; every transaction
    /// recorded into `txns`. With `hop`, each input record goes to a repartition topic by
    /// its key first, and its copy is sent from there.
    fn pipeline(
        rt: &tokio::runtime::Runtime,
        bootstrap: &str,
        input: &str,
        output: &str,
        (guarantee, hop): (Guarantee, bool),
        commit_ms: Option<u64>,
        txns: Arc<Mutex<Vec<Txn>>>,
    ) -> Result<Running, String> {
        let mut builder = Pipeline::builder()
            .bootstrap_servers(bootstrap)
            .application_id(unique_name("latency"))
            .input_topic(input)
            .guarantee(guarantee)
            .on_transaction(move |e: &TransactionEvent| {
                txns.lock().unwrap_or_else(|p| p.into_inner()).push(Txn::of(e, load::wall_ns()));
            });
        if let Some(interval) = commit_ms.map(Duration::from_millis) {
            builder = builder.commit_interval(interval);
            // Validation wants a transaction timeout above a long interval.
            if guarantee.is_transactional() && interval >= Duration::from_secs(5) {
                builder = builder.transaction_timeout(interval * 3);
            }
        }
        let hop = hop.then(|| builder.repartition("hop"));
        let out = builder.output_topic(output);
        let pipeline = builder
            .processor(move |ctx, r| {
                let mut o = match &hop {
                    Some(hop) if r.topic != *hop => OutputRecord::to(hop),
                    _ => OutputRecord::to(&out).partition(r.partition),
                };
                o.key = r.key.clone();
                o.value = r.value.clone();
                ctx.emit(o);
                Ok(())
            })
            .handle_signals(false)
            .build()
            .map_err(|e| format!("building the pipeline: {e}"))?;
        let handle = pipeline.shutdown_handle();
        let task = rt.spawn(pipeline.run());
        Ok(Running { input: input.to_string(), system: System::Pipeline { handle, task } })
    }

    /// `CopyApp` under exactly_once_v2, at Streams' default commit interval unless `commit_ms`.
    fn streams(
        peers: &Peers,
        bootstrap: &str,
        input: &str,
        output: &str,
        commit_ms: Option<u64>,
    ) -> Result<Running, String> {
        let commit_ms = commit_ms.unwrap_or(DEFAULT_COMMIT_MS);
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        let app = peers.start_streams(bootstrap, input, output, "exactly_once_v2", commit_ms, move || {
            flag.store(true, Ordering::Relaxed)
        })?;
        Ok(Running { input: input.to_string(), system: System::Streams { app, ready } })
    }

    /// Whether it has its partitions: the pipeline's first assignment callback has
    /// started, or Kafka Streams reported `RUNNING`.
    fn ready(&self) -> bool {
        match &self.system {
            System::Pipeline { handle, .. } => handle.summary().rebalances > 0,
            System::Streams { ready, .. } => ready.load(Ordering::Relaxed),
        }
    }

    /// Whether it stopped on its own (failed).
    fn ended(&self) -> bool {
        match &self.system {
            System::Pipeline { task, .. } => task.is_finished(),
            System::Streams { .. } => false,
        }
    }

    fn stop(self, rt: &tokio::runtime::Runtime) {
        match self.system {
            System::Pipeline { handle, task } => {
                handle.shutdown();
                match rt.block_on(task) {
                    Ok(Ok(s)) => println!(
                        "  pipeline: {} transactions committed, {} aborted, {} rebalances",
                        s.transactions_committed, s.transactions_aborted, s.rebalances
                    ),
                    Ok(Err(e)) => println!("  pipeline failed: {e}"),
                    Err(e) => println!("  pipeline task: {e}"),
                }
            }
            System::Streams { mut app, .. } => {
                peers::stop(&mut app.child);
                let _ = std::fs::remove_dir_all(&app.state);
            }
        }
    }
}
