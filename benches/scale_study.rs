//! The scale study of docs/scaling.md: instances as processes going 1 → 2 → 4 → 2, per
//! guarantee and input partition count, with their threads, sockets and memory.
//!
//! `cargo bench --bench scale_study [-- --quick] [--partitions 64,256] [--subjects
//! exactly-once] [--phase-secs 30] [--rate 5000]`. The run is
//! `kafka_eos_cli::scale::study` (see its docs for every figure). Full mode: a local
//! 3-broker cluster (replication 3), 64, 256 and 1,024 partitions, the three guarantees,
//! 30 s phases, 5,000 records/s; the plots go to docs/img. Quick mode (CI): one broker,
//! 16 partitions, exactly-once, 1 → 2 → 1 in 10 s phases. Every run is verified; a broken
//! copy stops the bench.

mod common;

use std::time::Duration;

use common::plot::{log_x_chart, Legend, Series};
use common::{broker_with, init_tracing, load_average, write_results, Args};
use kafka_eos::Guarantee;
use kafka_eos_cli::bench::table;
use kafka_eos_cli::scale::study::{run, PhaseReport, StudyOptions};
use kafka_eos_testkit::broker::ClusterConfig;

const GUARANTEES: [Guarantee; 3] = [Guarantee::ExactlyOnce, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce];

fn main() {
    let args = Args::parse();
    init_tracing();
    let nodes = if args.quick { 1 } else { 3 };
    let cluster = broker_with(ClusterConfig::with_nodes(nodes));
    let bootstrap = cluster.bootstrap_servers();
    let partitions = match (&args.partitions[..], args.quick) {
        ([], true) => vec![16],
        ([], false) => vec![64, 256, 1024],
        (p, _) => p.to_vec(),
    };
    let guarantees: Vec<Guarantee> = match (&args.subjects[..], args.quick) {
        ([], true) => vec![Guarantee::ExactlyOnce],
        ([], false) => GUARANTEES.to_vec(),
        (names, _) => GUARANTEES.into_iter().filter(|g| names.iter().any(|n| n == g.as_str())).collect(),
    };
    let steps = if args.quick { vec![1, 2, 1] } else { vec![1, 2, 4, 2] };
    let phase = Duration::from_secs(args.phase_secs.unwrap_or(if args.quick { 10 } else { 30 }));
    let rate = args.rate.unwrap_or(if args.quick { 800 } else { 5_000 });
    let log_dir = std::env::temp_dir().join(kafka_eos_cli::bench::unique_name("scale-study"));
    println!(
        "scale_study ({} mode): {nodes} broker(s), instances {steps:?}, {} s phases, {rate} records/s; logs in {}",
        args.mode(),
        phase.as_secs(),
        log_dir.display()
    );
    let (mut rows, mut results, mut done, mut failures) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &p in &partitions {
        for &g in &guarantees {
            let opts = StudyOptions {
                replication: nodes as i32,
                steps: steps.clone(),
                phase,
                rate,
                ..StudyOptions::new(exe(), &bootstrap, p, g, &log_dir)
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
    write_results("scale_study", args.mode(), &bootstrap, run, results);
    plots(&args, &done);
    drop(cluster);
    if !failures.is_empty() {
        eprintln!("scale_study: {} configuration(s) failed:\n  {}", failures.len(), failures.join("\n  "));
        std::process::exit(1);
    }
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
