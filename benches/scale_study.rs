//! The scale study of docs/scaling.md: instances as processes going 1 → 2 → 4 → 2, per
//! guarantee and input partition count, with their threads, sockets and memory; then a
//! rolling restart of 4 instances without and with static membership; then an instance
//! killed for good, without and with standby replicas, on memory and on disk.
//!
//! `cargo bench --bench scale_study [-- --quick] [--only study|rolling|failover|visibility] [--partitions
//! 64,256] [--subjects exactly-once] [--phase-secs 30] [--rate 5000] [--records N]
//! [--brokers 3]`. The
//! runs are `kafka_eos_cli::scale::study` and `kafka_eos_cli::scale::rolling` (see their
//! docs for every figure). Full mode: a local 3-broker cluster (replication 3); the sizes
//! over 64, 256 and 1,024 partitions, the three guarantees, 30 s phases, 5,000 records/s;
//! the rolling restart over 32 partitions with 400,000 records of state (`--records`), then
//! 2,000 records/s; the plots go to docs/img. Quick mode (CI): one broker; the sizes over
//! 16 partitions, exactly-once, 1 → 2 → 1 in 10 s phases; the rolling restart over 8
//! partitions, 20,000 records of state, 400 records/s. The failover: 2 instances, 4
//! partitions, 2,000,000 records of 1,000 B (`--records`; about 1 GB on the killed
//! instance), 400 records/s; quick: 20,000 records. The visibility run: per guarantee
//! (`--subjects`) and takeover, an instance SIGKILLed in the middle of its transactions and
//! how long `read_committed` readers wait (`kafka_eos_cli::scale::visibility`), 4 partitions,
//! 400 records/s. Every run is verified; a broken copy fails the bench.

mod common;

use std::time::Duration;

use common::plot::{log_x_chart, Legend, Series};
use common::{broker_with, init_tracing, load_average, write_results, Args};
use kafka_eos::Guarantee;
use kafka_eos_cli::bench::table;
use kafka_eos_cli::scale::failover::{self, FailoverOptions};
use kafka_eos_cli::scale::rolling::{self, RollingOptions};
use kafka_eos_cli::scale::study::{run, PhaseReport, StudyOptions};
use kafka_eos_cli::scale::visibility::{self, Takeover, VisibilityOptions};
use kafka_eos_testkit::broker::ClusterConfig;

const GUARANTEES: [Guarantee; 3] =
    [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce];

fn main() {
    let args = Args::parse();
    init_tracing();
    let nodes = args.brokers.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let cluster = broker_with(ClusterConfig::with_nodes(nodes));
    let bootstrap = cluster.bootstrap_servers();
    let partitions = match (&args.partitions[..], args.quick) {
        ([], true) => vec![16],
        ([], false) => vec![64, 256, 1024],
        (p, _) => p.to_vec(),
    };
    let guarantees: Vec<Guarantee> = match (&args.subjects[..], args.quick) {
        ([], true) => vec![Guarantee::ExactlyOncePerPartition],
        ([], false) => GUARANTEES.to_vec(),
        (names, _) => {
            GUARANTEES.into_iter().filter(|g| names.iter().any(|n| n.parse::<Guarantee>().ok() == Some(*g))).collect()
        }
    };
    let log_dir = std::env::temp_dir().join(kafka_eos_cli::bench::unique_name("scale-study"));
    println!("scale_study ({} mode): {nodes} broker(s); logs in {}", args.mode(), log_dir.display());
    let mut failures = Vec::new();
    let part = |name: &str| args.only.as_deref().is_none_or(|only| only == name);
    if part("study") {
        study(&args, &bootstrap, nodes, &partitions, &guarantees, &log_dir, &mut failures);
    }
    if part("rolling") {
        rolling(&args, &bootstrap, nodes, &log_dir, &mut failures);
    }
    if part("failover") {
        failover(&args, &bootstrap, nodes, &log_dir, &mut failures);
    }
    if part("visibility") {
        let guarantees = if args.subjects.is_empty() { GUARANTEES.to_vec() } else { guarantees.clone() };
        visibility(&args, &bootstrap, nodes, &guarantees, &log_dir, &mut failures);
    }
    drop(cluster);
    if !failures.is_empty() {
        eprintln!("scale_study: {} configuration(s) failed:\n  {}", failures.len(), failures.join("\n  "));
        std::process::exit(1);
    }
}

/// The group going through its sizes, per partition count and guarantee.
fn study(
    args: &Args,
    bootstrap: &str,
    nodes: usize,
    partitions: &[i32],
    guarantees: &[Guarantee],
    log_dir: &std::path::Path,
    failures: &mut Vec<String>,
) {
    let steps = if args.quick { vec![1, 2, 1] } else { vec![1, 2, 4, 2] };
    let phase = Duration::from_secs(args.phase_secs.unwrap_or(if args.quick { 10 } else { 30 }));
    let rate = args.rate.unwrap_or(if args.quick { 800 } else { 5_000 });
    println!("the group's sizes: instances {steps:?}, {} s phases, {rate} records/s", phase.as_secs());
    let (mut rows, mut results, mut done) = (Vec::new(), Vec::new(), Vec::new());
    for &p in partitions {
        for &g in guarantees {
            let opts = StudyOptions {
                replication: nodes as i32,
                steps: steps.clone(),
                phase,
                rate,
                ..StudyOptions::new(exe(), bootstrap, p, g, log_dir)
            };
            let load = load_average();
            eprintln!("  {p} partitions, {} (load average {load:.2})", g.as_str());
            // A configuration that fails is reported and the others still run (a full run
            // takes half an hour); the bench fails at the end.
            let report = match run(&opts) {
                Ok(r) if r.holds(g) => r,
                Ok(r) => {
                    failures.push(format!("{p} partitions, {}: the copy broke: {:?}", g.as_str(), r.verified));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{p} partitions, {}: {e}", g.as_str()));
                    continue;
                }
            };
            for (k, ph) in report.phases.iter().enumerate() {
                rows.push(row(p, g, k == 0, ph));
                results.push(json(p, g, load, ph));
            }
            done.push((p, g, report.phases));
        }
    }
    println!("\nload average {:.2} at the end; every copy that ran to the end verified", load_average());
    let header = [
        "partitions",
        "guarantee",
        "instances",
        "moved",
        "unmoved gap",
        "steady gap",
        "moved pause",
        "all committing",
        "records/s",
        "backlog",
        "aborts",
        "threads",
        "sockets",
        "fds",
        "RSS MiB",
    ];
    print!("{}", table(&header, &rows));
    let run = serde_json::json!({ "nodes": nodes, "steps": steps, "phase_s": phase.as_secs(), "rate": rate });
    write_results("scale_study", args.mode(), bootstrap, run, results);
    plots(args, &done);
}

/// The rolling restart of 4 instances, without and with static membership, side by side.
fn rolling(args: &Args, bootstrap: &str, nodes: usize, log_dir: &std::path::Path, failures: &mut Vec<String>) {
    let partitions = args.partitions.first().copied().unwrap_or(if args.quick { 8 } else { 32 });
    let preload = args.records.unwrap_or(if args.quick { 20_000 } else { 400_000 });
    let rate = args.rate.unwrap_or(if args.quick { 400 } else { 2_000 });
    println!(
        "\nrolling restart: 4 instances, {partitions} partitions, {preload} records of state, then {rate} records/s"
    );
    let (mut rows, mut results) = (Vec::new(), Vec::new());
    for static_membership in [false, true] {
        let mut opts = RollingOptions {
            preload,
            rate,
            restart_delay: Duration::from_secs(if args.quick { 3 } else { 5 }),
            settle: Duration::from_secs(if args.quick { 3 } else { 5 }),
            ..RollingOptions::new(exe(), bootstrap, partitions, static_membership, log_dir)
        };
        opts.group.replication = nodes as i32;
        let what = if static_membership { "static" } else { "dynamic" };
        let load = load_average();
        eprintln!("  {what} membership (load average {load:.2})");
        let r = match rolling::run(&opts) {
            Ok(r) if r.verified.is_exactly_once() && r.verified.output_records == r.produced => r,
            Ok(r) => {
                failures.push(format!("rolling restart, {what}: the copy broke: {:?}", r.verified));
                continue;
            }
            Err(e) => {
                failures.push(format!("rolling restart, {what}: {e}"));
                continue;
            }
        };
        rows.push(vec![
            what.to_string(),
            r.restarts.to_string(),
            secs(r.window),
            format!("{:.1} s", r.paused.as_secs_f64()),
            secs(r.longest_gap),
            r.moves.to_string(),
            r.restored.to_string(),
            r.takeovers.to_string(),
        ]);
        results.push(serde_json::json!({
            "membership": what, "partitions": partitions, "load_average_before": load,
            "restarts": r.restarts, "window_s": r.window.as_secs_f64(),
            "paused_partition_s": r.paused.as_secs_f64(), "longest_gap_s": r.longest_gap.as_secs_f64(),
            "moves": r.moves, "restored_records": r.restored, "takeovers": r.takeovers,
            "produced": r.produced,
        }));
    }
    println!("load average {:.2} at the end; every copy that ran to the end verified exactly once", load_average());
    let header =
        ["membership", "restarts", "window", "paused (partition-s)", "longest gap", "moves", "restored", "takeovers"];
    print!("{}", table(&header, &rows));
    let run = serde_json::json!({ "nodes": nodes, "partitions": partitions, "preload": preload, "rate": rate });
    write_results("rolling_restart", args.mode(), bootstrap, run, results);
}

/// An instance killed for good while it holds about half the state, without and with a
/// standby replica, in memory and on disk.
fn failover(args: &Args, bootstrap: &str, nodes: usize, log_dir: &std::path::Path, failures: &mut Vec<String>) {
    let partitions = args.partitions.first().copied().unwrap_or(4);
    let preload = args.records.unwrap_or(if args.quick { 20_000 } else { 2_000_000 });
    let rate = args.rate.unwrap_or(400);
    let mut base = FailoverOptions { preload, rate, ..FailoverOptions::new(exe(), bootstrap, partitions, log_dir) };
    base.group.replication = nodes as i32;
    let state_mib = preload as f64 * base.value_bytes as f64 / (1 << 20) as f64;
    println!(
        "
failover: {} instances, {partitions} partitions, {preload} records of {} B ({state_mib:.0} MiB of state), \
         {rate} records/s, session timeout {} s; instance 0 SIGKILLed for good",
        base.group.instances,
        base.value_bytes,
        base.group.session_timeout.as_secs()
    );
    let (mut rows, mut results) = (Vec::new(), Vec::new());
    for disk in [false, true] {
        for standby_replicas in [0, 1] {
            let opts = FailoverOptions { disk, standby_replicas, ..base.clone() };
            let backend = if disk { "disk" } else { "memory" };
            let load = load_average();
            eprintln!("  {backend}, {standby_replicas} standby (load average {load:.2})");
            let r = match failover::run(&opts) {
                Ok(r) if r.verified.is_exactly_once() && r.verified.output_records == r.produced => r,
                Ok(r) => {
                    failures.push(format!(
                        "failover, {backend}, {standby_replicas} standby: the copy broke: {:?}",
                        r.verified
                    ));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("failover, {backend}, {standby_replicas} standby: {e}"));
                    continue;
                }
            };
            let waits: Vec<String> = r.waits.iter().map(|(p, w)| format!("{p}: {:.1}", w.as_secs_f64())).collect();
            rows.push(vec![
                backend.to_string(),
                standby_replicas.to_string(),
                format!("{load:.2}"),
                r.waits.len().to_string(),
                secs(r.longest()),
                waits.join(", "),
                r.restored.to_string(),
                r.handovers.to_string(),
            ]);
            results.push(serde_json::json!({
                "backend": backend, "standby_replicas": standby_replicas, "load_average_before": load,
                "moved": r.waits.len(), "longest_wait_s": r.longest().as_secs_f64(),
                "waits_s": r.waits.iter().map(|(p, w)| (p.to_string(), w.as_secs_f64())).collect::<std::collections::BTreeMap<_, _>>(),
                "restored_records": r.restored, "handovers": r.handovers, "produced": r.produced,
            }));
        }
    }
    println!("load average {:.2} at the end; every copy that ran to the end verified exactly once", load_average());
    let header =
        ["backend", "standbys", "load", "moved", "kill to last commit", "per partition (s)", "restored", "from copies"];
    print!("{}", table(&header, &rows));
    let run = serde_json::json!({
        "nodes": nodes, "partitions": partitions, "preload": preload, "value_bytes": base.value_bytes, "rate": rate,
        "session_timeout_s": base.group.session_timeout.as_secs(),
    });
    write_results("failover", args.mode(), bootstrap, run, results);
}

/// An instance SIGKILLed in the middle of its transactions, per guarantee and takeover: how
/// long `read_committed` readers of every output partition wait for what was written before.
fn visibility(
    args: &Args,
    bootstrap: &str,
    nodes: usize,
    guarantees: &[Guarantee],
    log_dir: &std::path::Path,
    failures: &mut Vec<String>,
) {
    let partitions = args.partitions.first().copied().unwrap_or(4);
    let mut base = VisibilityOptions::new(exe(), bootstrap, partitions, log_dir);
    base.rate = args.rate.unwrap_or(base.rate);
    base.group.replication = nodes as i32;
    println!(
        "\nvisibility: {partitions} partitions, {} records/s, every transaction writing every output partition, \
         session timeout {} s, transaction timeout {} s; instance 0 SIGKILLed {} s after every instance commits",
        base.rate,
        base.group.session_timeout.as_secs(),
        base.transaction_timeout.as_secs(),
        base.steady.as_secs()
    );
    let (mut rows, mut results) = (Vec::new(), Vec::new());
    for &guarantee in guarantees {
        for takeover in Takeover::ALL {
            let mut opts = VisibilityOptions { takeover, ..base.clone() };
            opts.group.guarantee = guarantee;
            let (g, t, load) = (guarantee.as_str(), takeover.as_str(), load_average());
            eprintln!("  {g}, {t} (load average {load:.2})");
            let r = match visibility::run(&opts) {
                Ok(r) if r.verified.missing == 0 && (r.verified.is_exactly_once() || !guarantee.is_transactional()) => {
                    r
                }
                Ok(r) => {
                    failures.push(format!("visibility, {g}, {t}: the copy broke: {:?}", r.verified));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("visibility, {g}, {t}: {e}"));
                    continue;
                }
            };
            let per: Vec<String> = r.hidden.iter().map(|(p, w)| format!("{p}: {:.1}", w.as_secs_f64())).collect();
            rows.push(vec![
                g.to_string(),
                t.to_string(),
                format!("{load:.2}"),
                secs(r.shortest()),
                secs(r.longest()),
                per.join(", "),
                secs(r.worst_before),
                secs(r.worst_after),
            ]);
            results.push(serde_json::json!({
                "guarantee": g, "takeover": t, "load_average_before": load,
                "hidden_s": r.hidden.iter().map(|(p, w)| (p.to_string(), w.as_secs_f64())).collect::<std::collections::BTreeMap<_, _>>(),
                "worst_before_s": r.worst_before.as_secs_f64(), "worst_after_s": r.worst_after.as_secs_f64(),
                "produced": r.produced, "duplicates": r.verified.duplicates,
            }));
        }
    }
    println!("load average {:.2} at the end", load_average());
    let header = [
        "guarantee",
        "takeover",
        "load",
        "hidden, shortest",
        "hidden, longest",
        "per output partition (s)",
        "worst latency, 6 to 1 s before",
        "worst latency, 1 s after",
    ];
    print!("{}", table(&header, &rows));
    let run = serde_json::json!({
        "nodes": nodes, "partitions": partitions, "rate": base.rate,
        "session_timeout_s": base.group.session_timeout.as_secs(),
        "transaction_timeout_s": base.transaction_timeout.as_secs(),
    });
    write_results("visibility", args.mode(), bootstrap, run, results);
}

/// The `kafka-eos` binary of this build: the instances run `kafka-eos chaos instance`.
fn exe() -> std::path::PathBuf {
    env!("CARGO_BIN_EXE_kafka-eos").into()
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// A table row; the first phase starts the group, so nothing moves in it (its "all
/// committing" is the start-up: every partition's first commit).
fn row(p: i32, g: Guarantee, first: bool, ph: &PhaseReport) -> Vec<String> {
    let all = ph.pauses.all_committing.map_or("not all".to_string(), secs);
    let total = (ph.committed + ph.aborted).max(1);
    let (moved, unmoved) = if first { (0, 0) } else { (ph.pauses.moved, ph.pauses.unmoved) };
    vec![
        p.to_string(),
        g.as_str().to_string(),
        ph.instances.to_string(),
        if first { "start".into() } else { moved.to_string() },
        if unmoved > 0 { secs(ph.pauses.longest_unmoved_gap) } else { "-".into() },
        secs(ph.steady_gap),
        if moved > 0 { secs(ph.pauses.longest_moved_pause) } else { "-".into() },
        all,
        format!("{:.0}", ph.throughput),
        ph.backlog.to_string(),
        format!("{:.1} %", 100.0 * ph.aborted as f64 / total as f64),
        ph.largest.threads.to_string(),
        ph.largest.sockets.to_string(),
        ph.largest.fds.to_string(),
        format!("{:.0}", ph.largest.rss_bytes as f64 / (1 << 20) as f64),
    ]
}

fn json(p: i32, g: Guarantee, load: f64, ph: &PhaseReport) -> serde_json::Value {
    serde_json::json!({
        "partitions": p, "guarantee": g.as_str(), "load_average_before": load,
        "instances": ph.instances, "moved": ph.pauses.moved, "unmoved": ph.pauses.unmoved,
        "unmoved_gap_s": ph.pauses.longest_unmoved_gap.as_secs_f64(),
        "steady_gap_s": ph.steady_gap.as_secs_f64(),
        "moved_pause_s": ph.pauses.longest_moved_pause.as_secs_f64(),
        "all_committing_s": ph.pauses.all_committing.map(|d| d.as_secs_f64()),
        "records_per_s": ph.throughput, "backlog": ph.backlog,
        "committed": ph.committed, "aborted": ph.aborted,
        "threads": ph.largest.threads, "sockets": ph.largest.sockets, "fds": ph.largest.fds, "rss_bytes": ph.largest.rss_bytes,
    })
}

/// Per guarantee against partitions: the single instance's threads and RSS, and the
/// longest time until every partition committed again after a membership change.
fn plots(args: &Args, done: &[(i32, Guarantee, Vec<PhaseReport>)]) {
    let dir = args.plot_dir();
    let series = |value: &dyn Fn(&[PhaseReport]) -> Option<f64>| -> Vec<Series> {
        GUARANTEES
            .iter()
            .filter_map(|g| {
                let mut points: Vec<(f64, f64)> =
                    done.iter().filter(|d| d.1 == *g).filter_map(|d| Some((d.0 as f64, value(&d.2)?))).collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                (!points.is_empty()).then(|| Series { name: g.as_str().to_string(), points, markers: true })
            })
            .collect()
    };
    let first = |f: fn(&PhaseReport) -> f64| move |ph: &[PhaseReport]| ph.first().map(f);
    log_x_chart(
        &dir.join("scale-threads-vs-partitions.svg"),
        "Threads of one instance vs input partitions",
        "input partitions (log)",
        "OS threads",
        &series(&first(|ph| ph.largest.threads as f64)),
        Legend::UpperLeft,
    );
    log_x_chart(
        &dir.join("scale-rss-vs-partitions.svg"),
        "Resident memory of one instance vs input partitions",
        "input partitions (log)",
        "RSS, MiB",
        &series(&first(|ph| ph.largest.rss_bytes as f64 / (1 << 20) as f64)),
        Legend::UpperLeft,
    );
    log_x_chart(
        &dir.join("scale-pause-vs-partitions.svg"),
        "Longest time until every partition commits again after a membership change",
        "input partitions (log)",
        "seconds",
        &series(&|ph| {
            ph.iter()
                .skip(1)
                .map(|p| p.pauses.all_committing.map(|d| d.as_secs_f64()))
                .try_fold(0.0f64, |m, d| Some(m.max(d?)))
        }),
        Legend::UpperLeft,
    );
}
