//! Commit latency: how long the commit step (`send_offsets_to_transaction` +
//! `commit_transaction`) and the whole transaction take, by transaction size, for both
//! exactly-once modes and for the naive rust-rdkafka loop a user would otherwise write.
//!
//! `cargo bench --bench commit_latency [-- --quick]`; see docs/benchmarks.md for the
//! method and the figures of a full run.
//!
//! # How
//! For each value size and transaction size `n`, one input topic (1 partition) receives
//! `(warm-up + T) * n` records before anything runs, so every batch is full. Each subject
//! copies it into its own output topic:
//!
//! - a kafka-eos pipeline with `max_records_per_transaction(n)` and a 10 s commit interval
//!   (batches close on the count, never on time), collecting each batch before its
//!   transaction (`process_while_collecting(false)`, so `total` excludes the records'
//!   arrival); its timings come from the
//!   `on_transaction` hook ([`TransactionEvent`]): `commit` and `total` of every committed
//!   event with `records == n`;
//! - the naive loop: a transactional `FutureProducer` and a `BaseConsumer`; per batch,
//!   `begin_transaction`, one `send_result` per record (futures dropped), then
//!   `send_offsets_to_transaction` and `commit_transaction` — which in rust-rdkafka 0.39
//!   first flushes, polling in 100 ms steps while anything is unacknowledged.
//!
//! The first [`WARMUP`] transactions of every subject are left out (connection set-up,
//! coordinator lookup); the rest go into HDR histograms (microsecond precision).
//!
//! `-- --broker-breakdown` runs only the 100-record cell, 1,000 transactions (200 with
//! `--quick`, CI's check that it still works), for our two
//! modes: first on a fresh broker as a control (with an A/B of the calls' watchdog), then
//! on a fresh broker that logs every request, each after a warm-up copy, and splits each
//! commit step of that second run into the broker's time and ours
//! (`kafka_eos_cli::bench::broker_log`).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::plot::{log_x_chart, Legend, Series};
use common::{bar, broker, broker_with, init_tracing, runtime, step, write_results, Args};
use hdrhistogram::Histogram;
use kafka_eos::config::Properties;
use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::Guarantee;
use kafka_eos_cli::bench::{
    broker_log, copy, delete_topics, fmt_opt, table, unique_name, CopyOptions, Input, Subject, Tuning,
};
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Transactions left out at the start of every subject's run.
const WARMUP: usize = 3;

/// The subjects, in table order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    Ours(Guarantee),
    Naive,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Ours(g) => g.as_str(),
            Who::Naive => "naive-rdkafka",
        }
    }
}

/// A commit-step CDF of one subject at one transaction size: `(ms, fraction)` points.
type Cdf = (Who, usize, Vec<(f64, f64)>);

/// Commit-step and whole-transaction latencies of one subject at one size, in µs.
struct Latencies {
    commit: Histogram<u64>,
    total: Histogram<u64>,
    /// Waiting for the outputs' acknowledgements (ours only: the naive loop's wait is
    /// inside its commit).
    await_acks: Histogram<u64>,
    seen: usize,
    /// Every commit step in ms, in commit order, warm-up included (for `--broker-breakdown`).
    in_order: Vec<f64>,
}

impl Latencies {
    fn new() -> Latencies {
        Latencies {
            commit: Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"),
            total: Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"),
            await_acks: Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"),
            seen: 0,
            in_order: Vec::new(),
        }
    }

    fn record(&mut self, commit: Duration, total: Duration, await_acks: Option<Duration>) {
        self.seen += 1;
        self.in_order.push(commit.as_secs_f64() * 1000.0);
        if self.seen > WARMUP {
            let us = |d: Duration| (d.as_micros() as u64).clamp(1, 600_000_000);
            let _ = self.commit.record(us(commit));
            let _ = self.total.record(us(total));
            if let Some(a) = await_acks {
                let _ = self.await_acks.record(us(a));
            }
        }
    }
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// One of our pipelines copying `input` into `output` in `n`-record transactions; the
/// latencies of its full transactions go into `lat`. `unguarded_calls`: without the
/// transactional calls' watchdog (benchmark-only, for its A/B).
fn run_ours(
    rt: &tokio::runtime::Runtime,
    input: &Input,
    output: &str,
    g: Guarantee,
    n: usize,
    lat: &Arc<Mutex<Latencies>>,
    unguarded_calls: bool,
) -> Result<(), String> {
    let sink = lat.clone();
    let opts = CopyOptions {
        tuning: Tuning {
            commit_interval: Duration::from_secs(10),
            max_records_per_transaction: n,
            // What a transaction costs by its size: begun once its batch is collected, so
            // that `total` is the transaction's own time (processing while collecting
            // would add the records' arrival to it; the commit step is the same).
            process_while_collecting: false,
            unguarded_calls,
            ..Tuning::default()
        },
        time_limit: Some(Duration::from_secs(300)),
        verify: false,
        hook: Some(Arc::new(move |e: &TransactionEvent| {
            if e.outcome == Outcome::Committed && e.records == n {
                sink.lock().unwrap_or_else(|p| p.into_inner()).record(e.commit, e.total, Some(e.await_acks));
            }
        })),
    };
    copy(rt.handle(), input, output, Subject::Pipeline(g), &opts).map(|_| ()).map_err(|e| e.to_string())
}

/// A copy whose figures are discarded: the broker's JIT and caches warm up before the
/// measured runs of `--broker-breakdown`, so that its first subject is not the slowest.
fn warm_up(rt: &tokio::runtime::Runtime, input: &Input, n: usize) {
    let lat = Arc::new(Mutex::new(Latencies::new()));
    if let Err(e) =
        run_ours(rt, input, &unique_name("lat-warm-up-out"), Guarantee::ExactlyOncePerPartition, n, &lat, false)
    {
        fail(&format!("warm-up: {e}"));
    }
}

/// `--broker-breakdown`'s control, run first on a fresh broker that does not log requests:
/// the cell's figures without the request log's cost, and an A/B of the transactional
/// calls' watchdog (`txn/watchdog.rs`: a hand-over to another thread per call) — each mode
/// with and without it, `reps` times (`--reps`), in alternating order, after a warm-up copy.
/// With `--split-cores` the A/B is the cores instead: shared, or split between the broker
/// and this process ([`split_cores`]).
fn control(rt: &tokio::runtime::Runtime, subjects: &[Who], (n, txns, reps): (usize, usize, usize), args: &Args) {
    let split = args.split_cores;
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    let broker_pids = common::broker_pids(&cluster, args);
    // Read before any split: the count follows this process's affinity.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let topic = unique_name("lat-control-in");
    let input = Input::create(&bootstrap, &topic, 1, 1, ((WARMUP + txns) * n) as u64, 100, Properties::default())
        .unwrap_or_else(|e| fail(&format!("producing the input {topic}: {e}")));
    warm_up(rt, &input, n);
    println!("control, a broker without the request log ({n} records x 100 B x {txns} transactions):");
    for rep in 0..reps {
        for &who in subjects {
            let Who::Ours(g) = who else { continue };
            let order = if rep == 0 { [false, true] } else { [true, false] };
            for second in order {
                // The A/B: the calls' watchdog off (`second`), or the cores split.
                let (unguarded, split_now) = (second && !split, second && split);
                if split {
                    split_cores(&broker_pids, split_now, cores);
                }
                let lat = Arc::new(Mutex::new(Latencies::new()));
                if let Err(e) = run_ours(rt, &input, &unique_name("lat-control-out"), g, n, &lat, unguarded) {
                    fail(&format!("control {}: {e}", who.name()));
                }
                let l = lat.lock().unwrap_or_else(|p| p.into_inner());
                let ab = match (split, second) {
                    (false, false) => "watchdog on ",
                    (false, true) => "watchdog off",
                    (true, false) => "cores shared",
                    (true, true) => "cores split ",
                };
                println!(
                    "  rep {} {:<26} {ab}  commit p50 {:>6.2} ms  p90 {:>6.2}  p99 {:>6.2}  max {:>6.2}",
                    rep + 1,
                    who.name(),
                    ms(&l.commit, 0.5),
                    ms(&l.commit, 0.9),
                    ms(&l.commit, 0.99),
                    l.commit.max() as f64 / 1000.0
                );
            }
        }
    }
    if split {
        split_cores(&broker_pids, false, cores);
    }
    drop(cluster);
}

/// Splits the machine's cores between the broker's threads (the first core) and this
/// process's (the others), or gives every thread every core again: `taskset` on every
/// thread of each process. Threads made later (the next pipeline's) inherit their
/// creator's set.
fn split_cores(broker_pids: &[u32], split: bool, cores: usize) {
    if cores < 2 || broker_pids.is_empty() {
        fail("--split-cores needs two cores and a local broker (unset KAFKA_BOOTSTRAP)");
    }
    let all = format!("0-{}", cores - 1);
    let (broker, ours) = if split { ("0".to_string(), format!("1-{}", cores - 1)) } else { (all.clone(), all) };
    let me = std::process::id();
    for (pid, list) in broker_pids.iter().map(|p| (*p, &broker)).chain([(me, &ours)]) {
        // A thread that exits while taskset walks the process fails the call: try again.
        let ok = (0..5).any(|_| {
            std::process::Command::new("taskset")
                .args(["-a", "-p", "-c", list.as_str(), &pid.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if !ok {
            fail(&format!("taskset -a -p -c {list} {pid} failed (util-linux's taskset, Linux only)"));
        }
    }
}

fn main() {
    let args = Args::parse();
    init_tracing();
    let started = Instant::now();
    let breakdown = args.broker_breakdown;
    // Quick (CI): enough to check that the breakdown still works, not to quote.
    let (breakdown_n, breakdown_txns) = (100, if args.quick { 200 } else { 1_000 });
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 2 });
    let breakdown_subjects =
        [Who::Ours(Guarantee::ExactlyOncePerPartition), Who::Ours(Guarantee::ExactlyOncePerConsumer)];
    if breakdown {
        if std::env::var_os("KAFKA_BOOTSTRAP").is_some() {
            fail("--broker-breakdown starts its own brokers and reads their logs: unset KAFKA_BOOTSTRAP");
        }
        control(&runtime(), &breakdown_subjects, (breakdown_n, breakdown_txns, reps), &args);
    }
    let cluster = if breakdown {
        let (logger, level) = broker_log::LOGGER;
        broker_with(ClusterConfig { log_levels: vec![(logger.into(), level.into())], ..ClusterConfig::default() })
    } else {
        broker()
    };
    // Local whenever `breakdown` (KAFKA_BOOTSTRAP refused above).
    let log_path = match &cluster {
        Cluster::Local(local) => local.node_ids().first().and_then(|n| local.log_path(*n)),
        Cluster::External { .. } => None,
    };
    let bootstrap = cluster.bootstrap_servers();
    let rt = runtime();

    let sizes: Vec<(usize, usize)> = match (breakdown, args.quick) {
        (true, _) => vec![(breakdown_n, breakdown_txns)],
        (false, true) => vec![(1, 20), (100, 20), (1_000, 8)],
        (false, false) => vec![(1, 150), (10, 150), (100, 150), (1_000, 60), (10_000, 15)],
    };
    let value_sizes: &[usize] = if breakdown { &[100] } else { &[100, 1024] };
    let subjects: &[Who] = if breakdown {
        &breakdown_subjects
    } else {
        &[Who::Ours(Guarantee::ExactlyOncePerPartition), Who::Ours(Guarantee::ExactlyOncePerConsumer), Who::Naive]
    };
    println!(
        "commit_latency ({} mode) on {bootstrap}: transaction sizes {:?}, values {:?} B",
        args.mode(),
        sizes.iter().map(|s| s.0).collect::<Vec<_>>(),
        value_sizes
    );

    let bar = bar((sizes.len() * value_sizes.len() * subjects.len()) as u64);
    let mut rows = Vec::new();
    let mut json = Vec::new();
    let mut cdfs: Vec<Cdf> = Vec::new();
    for &value_size in value_sizes {
        for &(n, txns) in &sizes {
            let records = ((WARMUP + txns) * n) as u64;
            let topic = unique_name(&format!("lat-in-{n}x{value_size}"));
            let input = Input::create(&bootstrap, &topic, 1, 1, records, value_size, Properties::default())
                .unwrap_or_else(|e| fail(&format!("producing the input {topic}: {e}")));
            let mut topics = vec![topic];
            if breakdown {
                warm_up(&rt, &input, n);
            }
            for &who in subjects {
                step(&bar, format!("{} / {n} records x {value_size} B x {txns} transactions", who.name()));
                let mut broker_log = log_path.as_deref().filter(|_| breakdown).map(broker_log::Cursor::at_end);
                let output = unique_name(&format!("lat-out-{n}"));
                topics.push(output.clone());
                let lat = Arc::new(Mutex::new(Latencies::new()));
                let run_started = Instant::now();
                let res = match who {
                    Who::Ours(g) => run_ours(&rt, &input, &output, g, n, &lat, false),
                    Who::Naive => naive(&input, &output, n, WARMUP + txns, &lat),
                };
                if let Err(e) = res {
                    fail(&format!("{} at {n} records: {e}", who.name()));
                }
                let l = lat.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(cursor) = broker_log.as_mut() {
                    match cursor.read_new() {
                        Ok(requests) => {
                            let steps = broker_log::longest(broker_log::commit_steps(&requests));
                            if steps.is_empty() {
                                fail("no commit step in the broker's request log: has its format changed?");
                            }
                            let failed = broker_log::failed_attempts(&requests);
                            broker_log::report(who.name(), &l.in_order, &steps, failed, WARMUP);
                        }
                        Err(e) => fail(&format!("reading the broker's log: {e}")),
                    }
                }
                let (c, t) = (&l.commit, &l.total);
                let txn_per_s = if t.mean() > 0.0 { 1e6 / t.mean() } else { 0.0 };
                rows.push(vec![
                    who.name().to_string(),
                    n.to_string(),
                    value_size.to_string(),
                    c.len().to_string(),
                    format!("{:.2}", ms(c, 0.5)),
                    format!("{:.2}", ms(c, 0.9)),
                    format!("{:.2}", ms(c, 0.99)),
                    format!("{:.2}", c.max() as f64 / 1000.0),
                    format!("{:.2}", ms(t, 0.5)),
                    format!("{:.2}", ms(t, 0.99)),
                    format!("{:.2}", t.max() as f64 / 1000.0),
                ]);
                json.push(serde_json::json!({
                    "mode": args.mode(),
                    "subject": who.name(),
                    "records_per_transaction": n,
                    "value_size_bytes": value_size,
                    "input_partitions": 1,
                    "transactions_measured": c.len(),
                    "warmup_transactions_excluded": WARMUP,
                    "commit_step_ms": {"p50": ms(c, 0.5), "p90": ms(c, 0.9), "p99": ms(c, 0.99), "max": c.max() as f64 / 1000.0, "mean": c.mean() / 1000.0},
                    "transaction_ms": {"p50": ms(t, 0.5), "p90": ms(t, 0.9), "p99": ms(t, 0.99), "max": t.max() as f64 / 1000.0, "mean": t.mean() / 1000.0},
                    "await_acks_ms": (!l.await_acks.is_empty()).then(|| serde_json::json!({"p50": ms(&l.await_acks, 0.5), "p99": ms(&l.await_acks, 0.99)})),
                    "transactions_per_second_back_to_back": txn_per_s,
                    "run_seconds": run_started.elapsed().as_secs_f64(),
                }));
                if value_size == 100 {
                    let points = c
                        .iter_quantiles(2)
                        .map(|v| (v.value_iterated_to() as f64 / 1000.0, v.quantile_iterated_to()))
                        .collect();
                    cdfs.push((who, n, points));
                }
                bar.inc(1);
            }
            delete_topics(&bootstrap, &Properties::default(), &topics);
        }
    }
    bar.finish_and_clear();

    println!(
        "\ncommit step = send_offsets_to_transaction + commit_transaction; transaction = begin .. commit done (ms)"
    );
    print!(
        "{}",
        table(
            &[
                "subject",
                "records/txn",
                "value B",
                "txns",
                "commit p50",
                "p90",
                "p99",
                "max",
                "txn p50",
                "txn p99",
                "txn max"
            ],
            &rows
        )
    );
    summary(&json);

    let dir = args.plot_dir();
    for &who in subjects {
        let series: Vec<Series> = cdfs
            .iter()
            .filter(|(w, _, _)| *w == who)
            .map(|(_, n, pts)| Series { name: format!("{n} records"), points: pts.clone(), markers: false })
            .collect();
        log_x_chart(
            &dir.join(format!("commit-latency-cdf-{}.svg", who.name())),
            &format!("Commit step latency CDF, {} (100 B values)", who.name()),
            "commit step (send offsets + commit), ms (log)",
            "fraction of transactions",
            &series,
            Legend::LowerRight,
        );
    }
    let wall = started.elapsed().as_secs_f64();
    write_results(
        "commit_latency",
        args.mode(),
        &bootstrap,
        serde_json::json!({"wall_seconds": wall, "warmup_transactions_excluded": WARMUP}),
        json,
    );
    println!("commit_latency {} mode: {wall:.0} s wall, broker start included", args.mode());
    drop(cluster);
}

/// The goal lines: commit p50/p99 at 100 records, ours against the naive loop.
fn summary(json: &[serde_json::Value]) {
    let get = |who: &str, v: usize, what: &str, q: &str| {
        json.iter()
            .find(|j| j["subject"] == who && j["records_per_transaction"] == 100 && j["value_size_bytes"] == v)
            .and_then(|j| j[what][q].as_f64())
    };
    println!("\n100-record transactions, 100 B values (goal: commit p50 <= 5 ms, p99 <= 25 ms):");
    for who in ["exactly-once-per-partition", "exactly-once-per-consumer", "naive-rdkafka"] {
        println!(
            "  {who:<26} commit p50 {:>7} ms  p99 {:>7} ms   transaction p50 {:>7} ms",
            fmt_opt(get(who, 100, "commit_step_ms", "p50"), 2),
            fmt_opt(get(who, 100, "commit_step_ms", "p99"), 2),
            fmt_opt(get(who, 100, "transaction_ms", "p50"), 2),
        );
    }
}

/// The naive loop: what a rust-rdkafka user writes from the API docs.
fn naive(input: &Input, output: &str, n: usize, txns: usize, lat: &Arc<Mutex<Latencies>>) -> Result<(), String> {
    input.create_topic(output, 1).map_err(|e| e.to_string())?;
    let group = unique_name("lat-naive");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &input.bootstrap)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("log_level", "3")
        .create()
        .map_err(|e| e.to_string())?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &input.bootstrap)
        .set("transactional.id", &group)
        .set("linger.ms", "5")
        .set("log_level", "3")
        .create()
        .map_err(|e| e.to_string())?;
    let t = Duration::from_secs(30);
    producer.init_transactions(t).map_err(|e| e.to_string())?;
    consumer.subscribe(&[&input.topic]).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(600);
    for _ in 0..txns {
        // Collect a batch (not timed, as the pipeline's collection is not).
        let mut batch = Vec::with_capacity(n);
        while batch.len() < n {
            if Instant::now() > deadline {
                return Err("timed out collecting input".into());
            }
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => batch.push(m.detach()),
                Some(Err(e)) => return Err(e.to_string()),
                None => {}
            }
        }
        let started = Instant::now();
        producer.begin_transaction().map_err(|e| e.to_string())?;
        for m in &batch {
            let origin = format!("{}/{}/{}", m.topic(), m.partition(), m.offset());
            let headers =
                OwnedHeaders::new().insert(Header { key: kafka_eos::record::ORIGIN_HEADER, value: Some(&origin) });
            let mut rec: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(output).partition(m.partition()).headers(headers);
            rec.key = m.key();
            rec.payload = m.payload();
            loop {
                match producer.send_result(rec) {
                    Ok(_delivery) => break,
                    Err((_, r)) => {
                        rec = r;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        }
        let commit_started = Instant::now();
        let last = batch.last().map(|m| m.offset()).unwrap_or(0);
        let mut offsets = TopicPartitionList::new();
        offsets.add_partition_offset(&input.topic, 0, Offset::Offset(last + 1)).map_err(|e| e.to_string())?;
        let meta = consumer.group_metadata().ok_or("no group metadata")?;
        producer.send_offsets_to_transaction(&offsets, &meta, t).map_err(|e| e.to_string())?;
        producer.commit_transaction(t).map_err(|e| e.to_string())?;
        let done = Instant::now();
        lat.lock().unwrap_or_else(|p| p.into_inner()).record(done - commit_started, done - started, None);
    }
    Ok(())
}

fn fail(msg: &str) -> ! {
    eprintln!("commit_latency failed: {msg}");
    std::process::exit(1)
}
