//! Batch throughput: end-to-end records/s, MB/s, CPU per record and peak RSS of a 1:1 copy
//! under every guarantee, against the no-transaction ceiling and the Java peers, on one
//! broker with the same input, in one run.
//!
//! `cargo bench --bench batch_throughput [-- --quick] [--peers] [--no-peers] [--reps N]`;
//! see docs/benchmarks.md for the method and the figures of a full run. Quick mode (what CI
//! runs) is one stable configuration — 4 partitions, 1,000,000 records, 3 repetitions — whose
//! ratios are compared with `benches/baseline.json` (`guard.rs`). For experiments the
//! matrix narrows with `--partitions 4 --subjects at-least-once,exactly-once --intervals 100
//! --records 300000` (each a comma-separated list or a number).
//!
//! # How
//! One input topic per partition count is filled before anything runs (`records` values of
//! [`VALUE_SIZE`] bytes). Every subject then copies the whole of it into its own new output
//! topic, which is verified (`kafka_eos_testkit::verify`) and deleted, each in a process of
//! its own (ours: `child.rs`), so that its CPU and peak RSS are its own. Subjects:
//!
//! - `ceiling`: plain rdkafka consume→produce, no transaction, no offset guarantee
//!   (`kafka_eos_cli::bench::Subject::Ceiling`);
//! - the pipeline under `at-least-once`, `exactly-once` (a producer per partition) and
//!   `exactly-once-per-consumer`, with `max_records_per_transaction` raised to 1,000,000 so
//!   that the commit interval alone decides the batch size;
//! - at 4 partitions, the pipeline under `at-least-once+state` and `exactly-once+state`: the
//!   same copy incrementing a count per input key in a state store (one changelog record
//!   per input record, the most a store writes), followed by a restore of every partition's
//!   store from its changelog, for the restore rate;
//! - the peers (full mode, or `--peers`): Kafka Streams with `exactly_once_v2` — of the
//!   broker's release (4.1.1) and of the newest (4.4.0), at the base interval — and Kafka's
//!   `TransactionalMessageCopier` on the 1-partition input;
//! - the physical reference, with the peers: Kafka's `ProducerPerformance`
//!   writing as many records of the same size to as many partitions (acks=all,
//!   `linger.ms=5`): what this broker accepts from one tuned producer. Every subject is also
//!   given as a fraction of it.
//!
//! Throughput and CPU are taken over the copy's window (from the partitions' assignment to
//! the last commit; see `kafka_eos_cli::bench`); each is also given as a ratio to the ceiling of the
//! same partition count in the same repetition. The broker's CPU over the same window is
//! measured too when it runs here (the local cluster, or `--broker-pid` with
//! `KAFKA_BOOTSTRAP`): it shares the cores with the subject, so what a mode costs the broker
//! slows the copy as well. Repetitions interleave the subjects, and
//! the tables show medians.

mod child;
#[path = "../common/mod.rs"]
mod common;
mod guard;
mod report;

use std::collections::BTreeMap;
use std::time::Instant;

use common::peers::Peers;
use common::{bar, broker, broker_pids, init_tracing, step, write_results, Args};
use kafka_eos::config::Properties;
use kafka_eos::Guarantee;
use kafka_eos_cli::bench::{delete_topics, unique_name, CopyResult, Input, Subject};
use report::{aggregate, plots, print_tables, summary};

/// Bytes per value.
const VALUE_SIZE: usize = 100;
/// The commit interval of the partition sweep (Kafka Streams' default under EOS, and ours).
const BASE_INTERVAL_MS: u64 = 100;
/// Input partitions of the commit-interval sweep.
const SWEEP_PARTITIONS: i32 = 4;
/// Transaction size of TransactionalMessageCopier (it has no time-based commit).
const COPIER_TXN_SIZE: u32 = 1_000;
/// Our pipelines' transaction bound: high enough that the commit interval alone decides
/// the batch size.
const MAX_RECORDS_PER_TRANSACTION: usize = 1_000_000;

const STREAMS: &str = "kafka-streams-eos-v2";
const STREAMS_TV0: &str = "kafka-streams-eos-v2-tv0";
/// Kafka Streams of the newest release, beside the broker's ([`STREAMS`]), on the same broker.
const STREAMS_NEWEST: &str = "kafka-streams-4.4.0-eos-v2";
const STREAMS_NEWEST_VERSION: &str = "4.4.0";
const COPIER: &str = "transactional-message-copier";
const PRODUCER_PERF: &str = "producer-performance";
/// Quick mode: one configuration, long enough windows to be stable, repeated.
const QUICK_PARTITIONS: i32 = 4;
const QUICK_RECORDS: u64 = 1_000_000;
const QUICK_REPS: usize = 3;

/// One configuration of the matrix.
#[derive(Clone, Debug)]
pub struct Config {
    pub partitions: i32,
    pub subject: String,
    pub interval_ms: Option<u64>,
}

fn main() {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some(child::FLAG) {
        init_tracing();
        child::run(&argv.next().unwrap_or_default());
    }
    let args = Args::parse();
    init_tracing();
    let started = Instant::now();
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    let (mut partition_counts, mut records): (Vec<i32>, u64) =
        if args.quick { (vec![QUICK_PARTITIONS], QUICK_RECORDS) } else { (vec![1, 4, 16, 64], 300_000) };
    if !args.partitions.is_empty() {
        partition_counts = args.partitions.clone();
    }
    records = args.records.unwrap_or(records);
    let sweep_intervals = [10u64, 1_000];
    // Kafka's tools (ProducerPerformance) and the peers proper (Kafka Streams, the copier)
    // in full mode or with --peers: the guard of quick mode compares with the ceiling only.
    let tools = if !args.with_peers() {
        None
    } else {
        match Peers::prepare() {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("the Java peers and ProducerPerformance are skipped: {e}");
                None
            }
        }
    };
    let peers = tools.as_ref().filter(|_| args.with_peers());
    let tv = peers.and_then(|p| p.transaction_version(&bootstrap));
    let newest = peers.and_then(|_| match Peers::prepare_version(STREAMS_NEWEST_VERSION) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("Kafka Streams {STREAMS_NEWEST_VERSION} is skipped: {e}");
            None
        }
    });

    // The matrix, in the order each repetition runs it.
    let mut configs = Vec::new();
    let ours = [Guarantee::AtLeastOnce, Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer];
    for &p in &partition_counts {
        if tools.is_some() {
            configs.push(Config { partitions: p, subject: PRODUCER_PERF.into(), interval_ms: None });
        }
        configs.push(Config { partitions: p, subject: Subject::Ceiling.name().into(), interval_ms: None });
        for g in ours {
            configs.push(Config {
                partitions: p,
                subject: Subject::Pipeline(g).name().into(),
                interval_ms: Some(BASE_INTERVAL_MS),
            });
        }
        if peers.is_some() {
            configs.push(Config { partitions: p, subject: STREAMS.into(), interval_ms: Some(BASE_INTERVAL_MS) });
            if newest.is_some() {
                let subject = STREAMS_NEWEST.into();
                configs.push(Config { partitions: p, subject, interval_ms: Some(BASE_INTERVAL_MS) });
            }
            if p == 1 {
                configs.push(Config { partitions: p, subject: COPIER.into(), interval_ms: None });
            }
        }
        if p == SWEEP_PARTITIONS && !args.quick {
            // The cost of state: the same copy writing one changelog record per input record;
            // and of a repartition hop: every record read, written and committed twice.
            let costs = [Guarantee::AtLeastOnce, Guarantee::ExactlyOncePerPartition].map(Subject::Stateful);
            for subject in costs.into_iter().chain([Subject::Repartition]) {
                let subject = subject.name().into();
                configs.push(Config { partitions: p, subject, interval_ms: Some(BASE_INTERVAL_MS) });
            }
            for &ms in &sweep_intervals {
                for g in ours {
                    configs.push(Config {
                        partitions: p,
                        subject: Subject::Pipeline(g).name().into(),
                        interval_ms: Some(ms),
                    });
                }
                if peers.is_some() {
                    configs.push(Config { partitions: p, subject: STREAMS.into(), interval_ms: Some(ms) });
                }
            }
        }
    }
    // A narrowed matrix for experiments (--subjects, --intervals).
    configs.retain(|c| {
        (args.subjects.is_empty() || args.subjects.contains(&c.subject))
            && (args.intervals.is_empty() || c.interval_ms.is_none_or(|ms| args.intervals.contains(&ms)))
    });
    // Its input is the sweep's partition count: only when that is in the run.
    let tv0_runs = peers.is_some()
        && tv.is_some_and(|v| v > 0)
        && partition_counts.contains(&SWEEP_PARTITIONS)
        && (args.subjects.is_empty() || args.subjects.iter().any(|s| s == STREAMS_TV0));
    let reps = if args.quick { args.reps.unwrap_or(QUICK_REPS).max(1) } else { args.reps() };
    println!(
        "batch_throughput ({} mode) on {bootstrap}: {records} records of {VALUE_SIZE} B per input, partitions {:?}, \
         {} configurations x {reps} repetitions{}",
        args.mode(),
        partition_counts,
        configs.len(),
        match tv {
            Some(v) => format!(", cluster transaction.version={v}"),
            None => String::new(),
        }
    );

    // Inputs: one per partition count, shared by every subject and repetition.
    let broker_pids = broker_pids(&cluster, &args);
    if broker_pids.is_empty() {
        println!("the broker's CPU is not measured (an external cluster; --broker-pid names a local one)");
    }
    let mut inputs = BTreeMap::new();
    for &p in &partition_counts {
        let topic = unique_name(&format!("tp-in-{p}"));
        let mut input = Input::create(&bootstrap, &topic, p, 1, records, VALUE_SIZE, Properties::default())
            .unwrap_or_else(|e| fail(&format!("producing the input {topic}: {e}")));
        input.broker_pids = broker_pids.clone();
        inputs.insert(p, input);
    }

    let total_runs = configs.len() * reps + if tv0_runs { reps } else { 0 };
    let bar = bar(total_runs as u64);
    let mut runs: Vec<(usize, Config, CopyResult)> = Vec::new();
    for rep in 0..reps {
        for c in &configs {
            step(
                &bar,
                format!(
                    "rep {}/{reps}: {} / {} partitions{}",
                    rep + 1,
                    c.subject,
                    c.partitions,
                    c.interval_ms.map(|m| format!(" / {m} ms")).unwrap_or_default()
                ),
            );
            let tools = if c.subject == STREAMS_NEWEST { newest.as_ref() } else { tools.as_ref() };
            let began = Instant::now();
            if let Some(r) = run_one(&inputs[&c.partitions], c, tools) {
                // What the run spent outside its measured window (start, drain, verification).
                eprintln!("    {:.1} s, of which the window {:.1} s", began.elapsed().as_secs_f64(), r.window.seconds);
                runs.push((rep, c.clone(), r));
            }
            bar.inc(1);
        }
    }
    // Kafka Streams again on the classic transaction protocol, the one librdkafka speaks.
    let mut tv_note = tv.map(|v| format!("transaction.version={v}"));
    if let (true, Some(p)) = (tv0_runs, peers) {
        match p.set_transaction_version(&bootstrap, 0) {
            Ok(()) => {
                let c = Config {
                    partitions: SWEEP_PARTITIONS,
                    subject: STREAMS_TV0.into(),
                    interval_ms: Some(BASE_INTERVAL_MS),
                };
                for rep in 0..reps {
                    step(&bar, format!("rep {}/{reps}: {STREAMS_TV0} / {SWEEP_PARTITIONS} partitions", rep + 1));
                    if let Some(r) = run_one(&inputs[&SWEEP_PARTITIONS], &c, tools.as_ref()) {
                        runs.push((rep, c.clone(), r));
                    }
                    bar.inc(1);
                }
                tv_note = Some(format!("transaction.version={} (and 0 for {STREAMS_TV0})", tv.unwrap_or(0)));
                if let Some(v) = tv {
                    let _ = p.set_transaction_version(&bootstrap, v);
                }
            }
            Err(e) => eprintln!("cannot downgrade transaction.version; {STREAMS_TV0} skipped: {e}"),
        }
    }
    bar.finish_and_clear();
    let all_topics: Vec<String> = inputs.values().map(|i| i.topic.clone()).collect();
    delete_topics(&bootstrap, &Properties::default(), &all_topics);

    let agg = aggregate(&runs);
    print_tables(&agg, reps);
    let summary = summary(&agg);
    plots(&args, &agg);
    // The guard's configuration is QUICK_PARTITIONS partitions: a quick run narrowed to
    // others (an experiment) has nothing to compare.
    let guarded = args.quick && agg.iter().any(|a| a.config.partitions == QUICK_PARTITIONS);
    if args.quick && !guarded {
        println!("\nregression guard: not run (no {QUICK_PARTITIONS}-partition copy in this run)");
    }
    let guard = guarded.then(|| guard::compare(&agg, records));
    let wall = started.elapsed().as_secs_f64();
    let json: Vec<serde_json::Value> = agg
        .iter()
        .map(|a| {
            serde_json::json!({
                "mode": args.mode(),
                "subject": a.config.subject,
                "partitions": a.config.partitions,
                "commit_interval_ms": a.config.interval_ms,
                "value_size_bytes": VALUE_SIZE,
                "input_records": records,
                "max_records_per_transaction": is_ours(&a.config.subject).then_some(MAX_RECORDS_PER_TRANSACTION),
                "copier_transaction_size": if a.config.subject == COPIER { Some(COPIER_TXN_SIZE) } else { None },
                "repetitions": a.runs.len(),
                "records_per_second_median": a.rps,
                "megabytes_per_second_median": a.mbps,
                "ratio_to_ceiling_median": a.ratio,
                "ratio_to_producer_performance_median": a.of_reference,
                "cpu_seconds_per_million_records_median": a.cpu,
                "broker_cpu_seconds_per_million_records_median": a.broker_cpu,
                "peak_rss_mib_median": a.rss,
                "peak_rss_added_mib_median": a.rss_added,
                "end_to_end_seconds_median": a.e2e,
                "verified_every_run": a.verified,
                "runs": a.runs,
            })
        })
        .collect();
    write_results(
        "batch_throughput",
        args.mode(),
        &bootstrap,
        serde_json::json!({
            "wall_seconds": wall,
            "repetitions": reps,
            "records_per_input": records,
            "value_size_bytes": VALUE_SIZE,
            "cluster_transaction_protocol": tv_note,
            "java_peers": peers.is_some(),
            "summary": summary,
            "guard": guard.as_ref().map(|g| g.json()),
        }),
        json,
    );
    println!("batch_throughput {} mode: {wall:.0} s wall, broker start included", args.mode());
    drop(cluster);
    if guard.is_some_and(|g| !g.passed()) {
        fail("a ratio fell below its baseline's tolerance (see the comparison above)");
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn is_ours(subject: &str) -> bool {
    Subject::from_name(subject).is_some_and(|s| s != Subject::Ceiling)
}

/// Runs one configuration once; a failure is reported and the configuration skipped
/// (a broken peer must not lose the rest of a long run).
fn run_one(input: &Input, c: &Config, peers: Option<&Peers>) -> Option<CopyResult> {
    let output = unique_name(&format!("tp-out-{}", c.partitions));
    let result = match c.subject.as_str() {
        STREAMS | STREAMS_TV0 | STREAMS_NEWEST => peers.expect("peers configured").streams(
            input,
            &output,
            "exactly_once_v2",
            c.interval_ms.unwrap_or(BASE_INTERVAL_MS),
            &c.subject,
        ),
        COPIER => peers.expect("peers configured").copier(input, &output, COPIER_TXN_SIZE, &c.subject),
        PRODUCER_PERF => peers.expect("tools configured").producer_perf(input, &output, &c.subject),
        name => child::copy_in_child(&child::Spec {
            bootstrap: input.bootstrap.clone(),
            input_topic: input.topic.clone(),
            partitions: input.partitions,
            records: input.records,
            value_size: input.value_size,
            broker_pids: input.broker_pids.clone(),
            output_topic: output.clone(),
            subject: name.to_string(),
            tuning_interval_ms: c.interval_ms.unwrap_or(BASE_INTERVAL_MS),
            max_records_per_transaction: MAX_RECORDS_PER_TRANSACTION,
            time_limit_secs: 120 + input.records / 1_000,
        }),
    };
    delete_topics(&input.bootstrap, &input.client_properties, &[output]);
    match result {
        Ok(r) if r.records_copied >= input.records => {
            if r.verified.is_some_and(|v| !v.ok) {
                eprintln!("VERIFY FAILED: {} at {} partitions: {:?}", c.subject, c.partitions, r.verified);
            }
            Some(r)
        }
        Ok(r) => {
            eprintln!(
                "{} at {} partitions copied only {} of {}",
                c.subject, c.partitions, r.records_copied, input.records
            );
            None
        }
        Err(e) => {
            eprintln!("{} at {} partitions failed: {e}", c.subject, c.partitions);
            None
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("batch_throughput failed: {msg}");
    std::process::exit(1)
}
