//! Batch throughput: end-to-end records/s, MB/s, CPU per record and peak RSS of a 1:1 copy
//! under every guarantee, against the no-transaction ceiling and the Java peers, on one
//! broker with the same input, in one run.
//!
//! `cargo bench --bench batch_throughput [-- --quick] [--peers] [--no-peers] [--reps N]`;
//! see docs/benchmarks.md for the method and the figures of a full run. For experiments the
//! matrix narrows with `--partitions 4 --subjects at-least-once,exactly-once --intervals 100
//! --records 300000` (each a comma-separated list or a number).
//!
//! # How
//! One input topic per partition count is filled before anything runs (`records` values of
//! [`VALUE_SIZE`] bytes). Every subject then copies the whole of it into its own new output
//! topic, which is verified (`kafka_eos_testkit::verify`) and deleted. Subjects:
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
//! - the peers (full mode, or `--peers`): Kafka Streams with `exactly_once_v2`, and Kafka's
//!   `TransactionalMessageCopier` on the 1-partition input.
//!
//! Throughput and CPU are taken over the copy's window (from the partitions' assignment to
//! the last commit; see `kafka_eos_cli::bench`); each is also given as a ratio to the ceiling of the
//! same partition count in the same repetition. The broker's CPU over the same window is
//! measured too when it runs here (the local cluster, or `--broker-pid` with
//! `KAFKA_BOOTSTRAP`): it shares the cores with the subject, so what a mode costs the broker
//! slows the copy as well. Repetitions interleave the subjects, and
//! the tables show medians.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::peers::Peers;
use common::plot::{log_x_chart, Legend, Series};
use common::{bar, broker, broker_pids, init_tracing, runtime, step, write_results, Args};
use kafka_eos::config::Properties;
use kafka_eos::Guarantee;
use kafka_eos_cli::bench::{
    copy, delete_topics, fmt_opt, median, table, unique_name, CopyOptions, CopyResult, Input, Subject, Tuning,
};

/// Bytes per value.
const VALUE_SIZE: usize = 100;
/// The commit interval of the partition sweep (Kafka Streams' default under EOS, and ours).
const BASE_INTERVAL_MS: u64 = 100;
/// Input partitions of the commit-interval sweep.
const SWEEP_PARTITIONS: i32 = 4;
/// Transaction size of TransactionalMessageCopier (it has no time-based commit).
const COPIER_TXN_SIZE: u32 = 1_000;

const STREAMS: &str = "kafka-streams-eos-v2";
const STREAMS_TV0: &str = "kafka-streams-eos-v2-tv0";
const COPIER: &str = "transactional-message-copier";

/// One configuration of the matrix.
#[derive(Clone, Debug)]
struct Config {
    partitions: i32,
    subject: String,
    interval_ms: Option<u64>,
}

fn main() {
    let args = Args::parse();
    init_tracing();
    let started = Instant::now();
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    let rt = runtime();
    let (mut partition_counts, mut records): (Vec<i32>, u64) =
        if args.quick { (vec![1, 4], 50_000) } else { (vec![1, 4, 16, 64], 300_000) };
    if !args.partitions.is_empty() {
        partition_counts = args.partitions.clone();
    }
    records = args.records.unwrap_or(records);
    let sweep_intervals = [10u64, 1_000];
    let peers = if args.with_peers() {
        match Peers::prepare() {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("the Java peers are skipped: {e}");
                None
            }
        }
    } else {
        None
    };
    let tv = peers.as_ref().and_then(|p| p.transaction_version(&bootstrap));

    // The matrix, in the order each repetition runs it.
    let mut configs = Vec::new();
    let ours = [Guarantee::AtLeastOnce, Guarantee::ExactlyOnce, Guarantee::ExactlyOncePerConsumer];
    for &p in &partition_counts {
        configs.push(Config { partitions: p, subject: Subject::Ceiling.name().into(), interval_ms: None });
        for g in ours {
            configs.push(Config { partitions: p, subject: g.as_str().into(), interval_ms: Some(BASE_INTERVAL_MS) });
        }
        if peers.is_some() {
            configs.push(Config { partitions: p, subject: STREAMS.into(), interval_ms: Some(BASE_INTERVAL_MS) });
            if p == 1 {
                configs.push(Config { partitions: p, subject: COPIER.into(), interval_ms: None });
            }
        }
        if p == SWEEP_PARTITIONS {
            // The cost of state: the same copy writing one changelog record per input record.
            for g in [Guarantee::AtLeastOnce, Guarantee::ExactlyOnce] {
                let subject = Subject::Stateful(g).name().into();
                configs.push(Config { partitions: p, subject, interval_ms: Some(BASE_INTERVAL_MS) });
            }
            for &ms in &sweep_intervals {
                for g in ours {
                    configs.push(Config { partitions: p, subject: g.as_str().into(), interval_ms: Some(ms) });
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
    let tv0_runs = peers.is_some()
        && tv.is_some_and(|v| v > 0)
        && (args.subjects.is_empty() || args.subjects.iter().any(|s| s == STREAMS_TV0));
    let reps = args.reps();
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
            if let Some(r) = run_one(&rt, &inputs[&c.partitions], c, peers.as_ref()) {
                runs.push((rep, c.clone(), r));
            }
            bar.inc(1);
        }
    }
    // Kafka Streams again on the classic transaction protocol, the one librdkafka speaks.
    let mut tv_note = tv.map(|v| format!("transaction.version={v}"));
    if let (true, Some(p)) = (tv0_runs, peers.as_ref()) {
        match p.set_transaction_version(&bootstrap, 0) {
            Ok(()) => {
                let c = Config {
                    partitions: SWEEP_PARTITIONS,
                    subject: STREAMS_TV0.into(),
                    interval_ms: Some(BASE_INTERVAL_MS),
                };
                for rep in 0..reps {
                    step(&bar, format!("rep {}/{reps}: {STREAMS_TV0} / {SWEEP_PARTITIONS} partitions", rep + 1));
                    if let Some(r) = run_one(&rt, &inputs[&SWEEP_PARTITIONS], &c, peers.as_ref()) {
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
                "max_records_per_transaction": if is_ours(&a.config.subject) { Some(1_000_000) } else { None },
                "copier_transaction_size": if a.config.subject == COPIER { Some(COPIER_TXN_SIZE) } else { None },
                "repetitions": a.runs.len(),
                "records_per_second_median": a.rps,
                "megabytes_per_second_median": a.mbps,
                "ratio_to_ceiling_median": a.ratio,
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
        }),
        json,
    );
    println!("batch_throughput {} mode: {wall:.0} s wall, broker start included", args.mode());
    drop(cluster);
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn is_ours(subject: &str) -> bool {
    Subject::from_name(subject).is_some_and(|s| s != Subject::Ceiling)
}

/// Runs one configuration once; a failure is reported and the configuration skipped
/// (a broken peer must not lose the rest of a long run).
fn run_one(rt: &tokio::runtime::Runtime, input: &Input, c: &Config, peers: Option<&Peers>) -> Option<CopyResult> {
    let output = unique_name(&format!("tp-out-{}", c.partitions));
    let result = match c.subject.as_str() {
        STREAMS | STREAMS_TV0 => peers.expect("peers configured").streams(
            input,
            &output,
            "exactly_once_v2",
            c.interval_ms.unwrap_or(BASE_INTERVAL_MS),
            &c.subject,
        ),
        COPIER => peers.expect("peers configured").copier(input, &output, COPIER_TXN_SIZE, &c.subject),
        name => {
            let subject = Subject::from_name(name).expect("a subject name");
            let opts = CopyOptions {
                tuning: Tuning {
                    commit_interval: Duration::from_millis(c.interval_ms.unwrap_or(BASE_INTERVAL_MS)),
                    max_records_per_transaction: 1_000_000,
                },
                time_limit: Some(Duration::from_secs(120 + input.records / 1_000)),
                verify: true,
                hook: None,
            };
            copy(rt.handle(), input, &output, subject, &opts).map_err(|e| e.to_string())
        }
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

/// The medians of one configuration over its repetitions.
struct Agg {
    config: Config,
    runs: Vec<CopyResult>,
    rps: f64,
    mbps: f64,
    ratio: f64,
    cpu: f64,
    /// The broker's CPU seconds per million records (NaN: not measured).
    broker_cpu: f64,
    rss: f64,
    rss_added: f64,
    e2e: f64,
    verified: bool,
}

fn aggregate(runs: &[(usize, Config, CopyResult)]) -> Vec<Agg> {
    // The ceiling of each (repetition, partitions), for the same-run ratios.
    let ceiling: BTreeMap<(usize, i32), f64> = runs
        .iter()
        .filter(|(_, c, _)| c.subject == Subject::Ceiling.name())
        .map(|(rep, c, r)| ((*rep, c.partitions), r.records_per_second))
        .collect();
    let mut groups: Vec<Agg> = Vec::new();
    for (_, c, r) in runs {
        let i = match groups.iter().position(|g| {
            g.config.subject == c.subject
                && g.config.partitions == c.partitions
                && g.config.interval_ms == c.interval_ms
        }) {
            Some(i) => i,
            None => {
                groups.push(Agg {
                    config: c.clone(),
                    runs: Vec::new(),
                    rps: 0.0,
                    mbps: 0.0,
                    ratio: f64::NAN,
                    cpu: f64::NAN,
                    broker_cpu: f64::NAN,
                    rss: f64::NAN,
                    rss_added: f64::NAN,
                    e2e: f64::NAN,
                    verified: true,
                });
                groups.len() - 1
            }
        };
        let g = &mut groups[i];
        g.runs.push(r.clone());
        g.verified &= r.verified.is_some_and(|v| v.ok);
    }
    for g in &mut groups {
        let rs = &g.runs;
        g.rps = median(&rs.iter().map(|r| r.records_per_second).collect::<Vec<_>>());
        g.mbps = median(&rs.iter().map(|r| r.megabytes_per_second).collect::<Vec<_>>());
        g.cpu = median(&rs.iter().filter_map(|r| r.cpu_seconds_per_million_records).collect::<Vec<_>>());
        g.broker_cpu = median(&rs.iter().filter_map(|r| r.broker_cpu_seconds_per_million_records).collect::<Vec<_>>());
        g.rss = median(&rs.iter().filter_map(|r| r.peak_rss_bytes.map(mib)).collect::<Vec<_>>());
        g.rss_added = median(&rs.iter().filter_map(|r| r.peak_rss_above_baseline_bytes.map(mib)).collect::<Vec<_>>());
        g.e2e = median(&rs.iter().filter_map(|r| r.end_to_end_seconds).collect::<Vec<_>>());
    }
    // Ratios: median over repetitions of (this run / the ceiling of the same repetition).
    for g in &mut groups {
        let mut ratios = Vec::new();
        for (rep, c, r) in runs {
            if c.subject == g.config.subject
                && c.partitions == g.config.partitions
                && c.interval_ms == g.config.interval_ms
            {
                if let Some(v) = ceiling.get(&(*rep, c.partitions)).filter(|v| **v > 0.0) {
                    ratios.push(r.records_per_second / v);
                }
            }
        }
        g.ratio = median(&ratios);
    }
    groups
}

fn print_tables(agg: &[Agg], reps: usize) {
    let mut rows: Vec<&Agg> = agg.iter().collect();
    rows.sort_by_key(|a| (a.config.partitions, a.config.interval_ms.unwrap_or(0), order(&a.config.subject)));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|a| {
            vec![
                a.config.partitions.to_string(),
                a.config.interval_ms.map_or("-".into(), |m| m.to_string()),
                a.config.subject.clone(),
                format!("{:.0}", a.rps),
                format!("{:.2}", a.mbps),
                fmt_opt(Some(100.0 * a.ratio), 1),
                fmt_opt(Some(a.cpu), 2),
                fmt_opt(Some(a.broker_cpu), 2),
                fmt_opt(Some(a.rss), 0),
                fmt_opt(Some(a.rss_added), 0),
                fmt_opt(Some(a.e2e), 1),
                format!("{}/{}", a.runs.iter().filter(|r| r.verified.is_some_and(|v| v.ok)).count(), a.runs.len()),
            ]
        })
        .collect();
    println!("\nmedians of {reps} repetition(s); window = from partitions assigned to the last input record committed");
    print!(
        "{}",
        table(
            &[
                "partitions",
                "commit ms",
                "subject",
                "records/s",
                "MB/s",
                "% of ceiling",
                "CPU s/M rec",
                "broker CPU s/M",
                "peak RSS MiB",
                "added MiB",
                "end-to-end s",
                "verified"
            ],
            &cells
        )
    );
}

fn order(subject: &str) -> usize {
    [
        "ceiling",
        "at-least-once",
        "at-least-once+state",
        "exactly-once",
        "exactly-once+state",
        "exactly-once-per-consumer",
        STREAMS,
        STREAMS_TV0,
        COPIER,
    ]
    .iter()
    .position(|s| *s == subject)
    .unwrap_or(99)
}

fn find<'a>(agg: &'a [Agg], subject: &str, partitions: i32, interval_ms: Option<u64>) -> Option<&'a Agg> {
    agg.iter().find(|a| {
        a.config.subject == subject && a.config.partitions == partitions && a.config.interval_ms == interval_ms
    })
}

/// The goal lines, printed and returned for the JSON.
fn summary(agg: &[Agg]) -> serde_json::Value {
    let at = Some(BASE_INTERVAL_MS);
    let p = SWEEP_PARTITIONS;
    let rps = |s: &str, p: i32, i: Option<u64>| find(agg, s, p, i).map(|a| a.rps);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let eos_alo = ratio(rps("exactly-once", p, at), rps("at-least-once", p, at));
    let eos_pc_alo = ratio(rps("exactly-once-per-consumer", p, at), rps("at-least-once", p, at));
    let eos_ceiling = find(agg, "exactly-once", p, at).map(|a| a.ratio);
    let mut cpu = serde_json::Map::new();
    for s in ["ceiling", "at-least-once", "exactly-once", "exactly-once-per-consumer", STREAMS] {
        let interval = if s == "ceiling" { None } else { at };
        if let Some(a) = find(agg, s, p, interval) {
            let finite = |x: f64| x.is_finite().then_some(x);
            cpu.insert(s.into(), serde_json::json!({"ours": finite(a.cpu), "broker": finite(a.broker_cpu)}));
        }
    }
    println!(
        "\nat {p} partitions, {BASE_INTERVAL_MS} ms commit interval (goal: exactly-once >= 90 % of at-least-once):"
    );
    println!("  exactly-once / at-least-once:              {}", pct(eos_alo));
    println!("  exactly-once-per-consumer / at-least-once: {}", pct(eos_pc_alo));
    println!("  exactly-once / ceiling:                    {}", pct(eos_ceiling));
    for (s, v) in &cpu {
        let (ours, broker) = (fmt_opt(v["ours"].as_f64(), 2), fmt_opt(v["broker"].as_f64(), 2));
        println!("  CPU s per million records, {s:<26} subject {ours} + broker {broker}");
    }
    let alo_state = ratio(rps("at-least-once+state", p, at), rps("at-least-once", p, at));
    let eos_state = ratio(rps("exactly-once+state", p, at), rps("exactly-once", p, at));
    let restore: Vec<f64> = ["at-least-once+state", "exactly-once+state"]
        .iter()
        .filter_map(|s| find(agg, s, p, at))
        .flat_map(|a| a.runs.iter().filter_map(|r| r.restore.map(|x| x.records_per_second)))
        .collect();
    let restore_rate = (!restore.is_empty()).then(|| median(&restore));
    println!(
        "
the cost of state (one changelog record per input record), same {p} partitions and interval:"
    );
    println!("  exactly-once+state / exactly-once:         {}", pct(eos_state));
    println!("  at-least-once+state / at-least-once:       {}", pct(alo_state));
    println!(
        "  restore from the changelogs:               {} records/s (median of {} restores, one thread)",
        restore_rate.map_or("-".into(), |r| format!("{r:.0}")),
        restore.len()
    );
    let mut vs_streams = Vec::new();
    let partitions: Vec<i32> = {
        let mut v: Vec<i32> = agg.iter().map(|a| a.config.partitions).collect();
        v.sort();
        v.dedup();
        v
    };
    if agg.iter().any(|a| a.config.subject == STREAMS) {
        println!(
            "\nours / Kafka Streams EOS-v2 at {BASE_INTERVAL_MS} ms (goal: throughput >= 1 at lower CPU per record):"
        );
        for &p in &partitions {
            for ours in ["exactly-once", "exactly-once-per-consumer"] {
                let (Some(o), Some(s)) = (find(agg, ours, p, at), find(agg, STREAMS, p, at)) else { continue };
                let t = o.rps / s.rps;
                let c = o.cpu / s.cpu;
                println!("  {p:>2} partitions, {ours:<26} throughput x{t:.2}, CPU per record x{c:.2}");
                vs_streams.push(serde_json::json!({"partitions": p, "subject": ours, "throughput_ratio": t, "cpu_per_record_ratio": c}));
            }
        }
    }
    serde_json::json!({
        "exactly_once_over_at_least_once_at_100ms": eos_alo,
        "exactly_once_per_consumer_over_at_least_once_at_100ms": eos_pc_alo,
        "exactly_once_over_ceiling_at_100ms": eos_ceiling,
        "cpu_seconds_per_million_records_at_100ms": cpu,
        "partitions_of_those_ratios": p,
        "exactly_once_with_state_over_without": eos_state,
        "at_least_once_with_state_over_without": alo_state,
        "restore_records_per_second_median": restore_rate,
        "ours_over_kafka_streams": vs_streams,
    })
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1} %", 100.0 * v))
}

fn plots(args: &Args, agg: &[Agg]) {
    let dir = args.plot_dir();
    let subjects = ["ceiling", "at-least-once", "exactly-once", "exactly-once-per-consumer", STREAMS];
    // Throughput vs commit interval at SWEEP_PARTITIONS; the ceiling has no interval, so it
    // is drawn flat across the range.
    let intervals: Vec<u64> = {
        let mut v: Vec<u64> = agg
            .iter()
            .filter(|a| a.config.partitions == SWEEP_PARTITIONS)
            .filter_map(|a| a.config.interval_ms)
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let series: Vec<Series> = subjects
        .iter()
        .filter_map(|s| {
            let points: Vec<(f64, f64)> = if *s == "ceiling" {
                let c = find(agg, s, SWEEP_PARTITIONS, None)?.rps;
                intervals.iter().map(|i| (*i as f64, c)).collect()
            } else {
                intervals
                    .iter()
                    .filter_map(|i| find(agg, s, SWEEP_PARTITIONS, Some(*i)).map(|a| (*i as f64, a.rps)))
                    .collect()
            };
            (!points.is_empty()).then(|| Series { name: s.to_string(), points, markers: true })
        })
        .collect();
    log_x_chart(
        &dir.join("throughput-vs-commit-interval.svg"),
        &format!("Throughput vs commit interval ({SWEEP_PARTITIONS} partitions, {VALUE_SIZE} B values)"),
        "commit interval, ms (log)",
        "records/s",
        &series,
        Legend::UpperLeft,
    );
    let by_partitions = |value: fn(&Agg) -> f64| -> Vec<Series> {
        subjects
            .iter()
            .filter_map(|s| {
                let mut points: Vec<(f64, f64)> = agg
                    .iter()
                    .filter(|a| {
                        a.config.subject == *s
                            && (a.config.interval_ms == Some(BASE_INTERVAL_MS) || a.config.interval_ms.is_none())
                    })
                    .map(|a| (a.config.partitions as f64, value(a)))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                (!points.is_empty()).then(|| Series { name: s.to_string(), points, markers: true })
            })
            .collect()
    };
    log_x_chart(
        &dir.join("throughput-vs-partitions.svg"),
        &format!("Throughput vs input partitions ({BASE_INTERVAL_MS} ms commit interval, {VALUE_SIZE} B values)"),
        "input partitions (log)",
        "records/s",
        &by_partitions(|a| a.rps),
        Legend::UpperLeft,
    );
    log_x_chart(
        &dir.join("cpu-vs-partitions.svg"),
        &format!("CPU per million records vs input partitions ({BASE_INTERVAL_MS} ms)"),
        "input partitions (log)",
        "CPU seconds per million records",
        &by_partitions(|a| a.cpu),
        Legend::UpperLeft,
    );
}

fn fail(msg: &str) -> ! {
    eprintln!("batch_throughput failed: {msg}");
    std::process::exit(1)
}
