//! What the latency bench reports: per system the percentiles of every counted record's
//! latency and the worst latency of each second (by the second the record was sent in);
//! the seconds whose worst record waited more than a second, with the transactions in
//! flight meanwhile; the per-second series as CSV and as a plot.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos_cli::bench::latency_guard::{latency_checks, Check, GuardedRun, LatencyLimits};
use kafka_eos_cli::bench::table;

use crate::common::plot::{time_chart, Series};
use crate::common::{results_dir, workspace_dir, write_results, Args};
use crate::load::{Epoch, Seen, Sent, LATE};
use crate::Plan;

/// A second is a stall when its worst record waited longer than this (issue 38's bound).
const STALL_MS: f64 = 1_000.0;
/// The summary also counts the seconds over this.
const SLOW_MS: f64 = 500.0;
/// The most transactions listed per stalled second (the longest first).
const TXNS_PER_STALL: usize = 12;

/// One transaction of a kafka-eos pipeline, from its `on_transaction` hook.
#[derive(Clone, Debug)]
pub struct Txn {
    /// When the hook reported it (its end), ns since the Unix epoch.
    pub end_ns: u64,
    /// Input partitions in the batch.
    pub partitions: Vec<i32>,
    pub records: usize,
    /// `begin_transaction` (the batch's first record, when processed as collected) to
    /// the end of the commit.
    pub total: Duration,
    /// The commit step.
    pub commit: Duration,
    pub committed: bool,
    pub outcome: String,
}

impl Txn {
    pub fn of(e: &TransactionEvent, end_ns: u64) -> Txn {
        let outcome = match &e.outcome {
            Outcome::Committed => "committed".to_string(),
            Outcome::Aborted { reason, .. } => format!("aborted: {reason}"),
            Outcome::GaveUp { reason } => format!("gave up: {reason}"),
            Outcome::Dropped { reason, .. } => format!("dropped: {reason}"),
            Outcome::Reconciled { found, reason } => format!("reconciled as {found:?}: {reason}"),
            other => format!("{other:?}"),
        };
        Txn {
            end_ns,
            partitions: e.partitions.iter().map(|(_, p)| *p).collect(),
            records: e.records,
            total: e.total,
            commit: e.commit,
            committed: e.outcome == Outcome::Committed,
            outcome,
        }
    }

    /// Its start and end in seconds of the run.
    fn span(&self, epoch: &Epoch) -> (f64, f64) {
        let end = self.end_ns.saturating_sub(epoch.start_ns) as f64 / 1e9;
        (end - self.total.as_secs_f64(), end)
    }
}

/// One system's run.
pub struct Run {
    pub system: String,
    pub epoch: Epoch,
    pub sent: Sent,
    pub seen: Seen,
    /// The pipeline's transactions (`None` for Kafka Streams).
    pub transactions: Option<Vec<Txn>>,
    pub load_before: f64,
    pub load_after: f64,
    /// The share of CPU time the hypervisor took during the run, in percent.
    pub steal_percent: f64,
}

/// One second of the series.
struct Second {
    second: usize,
    worst_ms: f64,
    p99_ms: f64,
    count: usize,
}

/// The `q` quantile of sorted microseconds, in ms (nearest rank).
fn quantile_ms(sorted: &[u32], q: f64) -> f64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(rank).map_or(f64::NAN, |&us| us as f64 / 1000.0)
}

impl Run {
    /// The counted seconds: from the end of the warm-up to the end of the schedule.
    fn seconds(&self, plan: &Plan) -> Vec<Second> {
        (plan.warmup as usize..self.seen.by_second.len())
            .map(|second| {
                let v = &self.seen.by_second[second];
                Second { second, worst_ms: quantile_ms(v, 1.0), p99_ms: quantile_ms(v, 0.99), count: v.len() }
            })
            .collect()
    }

    /// Records the broker acknowledged that the reader never saw.
    fn unseen(&self) -> u64 {
        (self.sent.records - self.sent.failed).saturating_sub(self.seen.distinct)
    }

    /// Every counted record's latency, sorted.
    fn counted(&self, plan: &Plan) -> Vec<u32> {
        let mut all: Vec<u32> = self.seen.by_second.iter().skip(plan.warmup as usize).flatten().copied().collect();
        all.sort_unstable();
        all
    }

    /// The run's figures over its counted records and seconds.
    fn figures(&self, plan: &Plan) -> Figures {
        let all = self.counted(plan);
        let seconds = self.seconds(plan);
        let over = |ms: f64| seconds.iter().filter(|s| s.worst_ms > ms).count();
        Figures {
            records: all.len(),
            quantiles_ms: QUANTILES.map(|q| quantile_ms(&all, q)),
            worst_second_ms: seconds.iter().map(|s| s.worst_ms).filter(|w| w.is_finite()).fold(f64::NAN, f64::max),
            seconds_over_500_ms: over(SLOW_MS),
            seconds_over_1_s: over(STALL_MS),
        }
    }

    /// The summary row: records, percentiles, the per-second series' max and its slow and
    /// stalled seconds, the load average and the stolen CPU time.
    fn row(&self, plan: &Plan) -> Vec<String> {
        let f = self.figures(plan);
        let mut row = vec![self.system.clone(), f.records.to_string()];
        row.extend(f.quantiles_ms.map(|ms| format!("{ms:.0}")));
        row.extend([
            format!("{:.0}", f.worst_second_ms),
            f.seconds_over_500_ms.to_string(),
            f.seconds_over_1_s.to_string(),
        ]);
        row.push(format!("{:.2} -> {:.2}", self.load_before, self.load_after));
        row.push(format!("{:.1}", self.steal_percent));
        row
    }
}

/// p50, p90, p99, p99.9 and the max.
const QUANTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 1.0];

/// A run's summary.
#[derive(serde::Serialize)]
struct Figures {
    records: usize,
    /// At [`QUANTILES`].
    quantiles_ms: [f64; 5],
    worst_second_ms: f64,
    seconds_over_500_ms: usize,
    seconds_over_1_s: usize,
}

const HEADER: [&str; 12] = [
    "system",
    "records",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
    "worst second ms",
    "s > 500 ms",
    "s > 1 s",
    "load average",
    "steal %",
];

/// Prints one system's figures as soon as it has run, with its stalls.
pub fn print_run(run: &Run, plan: &Plan) {
    let s = &run.sent;
    let target = plan.schedule.records();
    println!(
        "  producer: {} of {target} records in {:.2} s ({:.0}/s), {} failed; {} sent more than {LATE:?} after their \
         time, the latest {:.1} ms after",
        s.records,
        s.elapsed.as_secs_f64(),
        s.records as f64 / s.elapsed.as_secs_f64().max(1e-9),
        s.failed,
        s.late,
        s.worst_late.as_secs_f64() * 1e3
    );
    if s.late > 0 || s.records < target {
        println!(
            "  WARNING: the producer fell behind its schedule ({} records more than {LATE:?} late): this machine is too \
             busy for an exact open loop at this rate (a late record's latency counts from its sending, not its time)",
            s.late
        );
    }
    let counted_acks = s.worst_ack_by_second.iter().skip(plan.warmup as usize);
    println!("  input: slowest acknowledgement {:.0} ms", counted_acks.max().copied().unwrap_or(0) as f64 / 1e3);
    let unseen = run.unseen();
    println!(
        "  reader: {} distinct records visible, {unseen} not visible by the end, {} duplicates",
        run.seen.distinct, run.seen.duplicates
    );
    print!("{}", table(&HEADER, &[run.row(plan)]));
    print_stalls(run, plan);
}

/// For every stalled second, the transactions in flight while its records waited: from
/// the second's start to its last record's visibility (start + 1 s + the worst latency).
fn print_stalls(run: &Run, plan: &Plan) {
    let stalls: Vec<Second> = run.seconds(plan).into_iter().filter(|s| s.worst_ms > STALL_MS).collect();
    let Some(txns) = &run.transactions else {
        if !stalls.is_empty() {
            println!("  {} stalled seconds (no transaction events from Kafka Streams)", stalls.len());
        }
        return;
    };
    for st in &stalls {
        let (from, to) = (st.second as f64, st.second as f64 + 1.0 + st.worst_ms / 1e3);
        let mut held: Vec<&Txn> = txns
            .iter()
            .filter(|t| {
                let (a, b) = t.span(&run.epoch);
                a < to && b > from
            })
            .collect();
        held.sort_by_key(|t| std::cmp::Reverse(t.total));
        println!(
            "  stall: second {} (worst {:.0} ms, p99 {:.0} ms, {} records; slowest input ack {:.0} ms): {} \
             transactions in flight in {from:.0}-{to:.1} s, the longest:",
            st.second,
            st.worst_ms,
            st.p99_ms,
            st.count,
            run.sent.worst_ack_by_second.get(st.second).copied().unwrap_or(0) as f64 / 1e3,
            held.len()
        );
        let mut out = String::new();
        for t in held.iter().take(TXNS_PER_STALL) {
            let (a, b) = t.span(&run.epoch);
            let _ = writeln!(
                out,
                "    {a:8.3}-{b:8.3} s  partitions {:?}  {} records  {:.1} ms, commit step {:.1} ms  {}",
                t.partitions,
                t.records,
                t.total.as_secs_f64() * 1e3,
                t.commit.as_secs_f64() * 1e3,
                t.outcome
            );
        }
        print!("{out}{}", quiet_partitions(txns, &run.epoch, plan.schedule.partitions, from, to));
    }
}

/// Per partition, the longest time without a commit around a stall (`from`..`to`, seconds
/// of the run), counted from its last commit before `from`: a task that was not cycling at
/// all (a start, a rebalance, a blocked call) shows here, not among the transactions.
fn quiet_partitions(txns: &[Txn], epoch: &Epoch, partitions: i32, from: f64, to: f64) -> String {
    let mut parts = Vec::new();
    for p in 0..partitions {
        let mut ends: Vec<f64> =
            txns.iter().filter(|t| t.committed && t.partitions.contains(&p)).map(|t| t.span(epoch).1).collect();
        ends.sort_by(f64::total_cmp);
        let first = ends.iter().rposition(|&e| e < from).unwrap_or(0);
        let mut marks: Vec<f64> = ends[first..].iter().copied().take_while(|&e| e <= to).collect();
        if marks.first().is_none_or(|&e| e >= from) {
            marks.insert(0, 0.0); // nothing committed before the stall: since the run's start
        }
        marks.push(ends.iter().copied().find(|&e| e > to).unwrap_or(to));
        if let Some((a, b)) = marks.windows(2).map(|w| (w[0], w[1])).max_by(|x, y| (x.1 - x.0).total_cmp(&(y.1 - y.0)))
        {
            parts.push(format!("{p}: {:.0} ms ({a:.3}-{b:.3} s)", (b - a) * 1e3));
        }
    }
    format!("    longest time without a commit, per partition: {}\n", parts.join(", "))
}

/// The quick run's guard (see `main.rs`): the checks, printed.
pub fn guard(runs: &[Run], plan: &Plan) -> Vec<Check> {
    let path = workspace_dir().join("benches").join("baseline.json");
    let limits: LatencyLimits = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()))
        .and_then(|v| serde_json::from_value(v["latency"].clone()).map_err(|e| format!("its `latency` section: {e}")))
    {
        Ok(l) => l,
        Err(e) => panic!("cannot read the latency limits of {}: {e}", path.display()),
    };
    let p90 = |r: &Run| r.figures(plan).quantiles_ms[1];
    let eo = runs.iter().find(|r| r.system == "exactly-once").map(|r| GuardedRun {
        p90_ms: p90(r),
        duplicates: r.seen.duplicates,
        unseen: r.unseen(),
    });
    let streams = runs.iter().find(|r| r.system == crate::STREAMS).map(p90);
    let checks = latency_checks(eo, streams, &limits);
    println!("\nlatency guard (limits: {})", limits.measured);
    if streams.is_none() {
        println!("  Kafka Streams did not run: its ratio is not checked");
    }
    let rows: Vec<Vec<String>> = checks
        .iter()
        .map(|c| {
            let now = c.now.map_or("-".into(), |x| format!("{x:.2}"));
            vec![c.what.clone(), now, format!("{:.2}", c.limit), (if c.passed { "ok" } else { "FAILED" }).into()]
        })
        .collect();
    print!("{}", table(&["check", "this run", "limit", "verdict"], &rows));
    checks
}

/// The summary table of every system, the CSV, the plot and the result file (with the
/// guard's checks in quick mode).
pub fn finish(runs: &[Run], plan: &Plan, args: &Args, bootstrap: &str, guard: Option<&[Check]>) {
    if runs.is_empty() {
        return;
    }
    println!("\nlatency from send to visible to read_committed, records sent after the first {} s:", plan.warmup);
    let rows: Vec<Vec<String>> = runs.iter().map(|r| r.row(plan)).collect();
    print!("{}", table(&HEADER, &rows));
    let dir = results_dir().parent().map(|t| t.join("latency")).unwrap_or_else(|| PathBuf::from("latency"));
    let mut csv = String::from("second,system,worst_ms,p99_ms,count\n");
    let mut series = Vec::new();
    for run in runs {
        let seconds = run.seconds(plan);
        for s in &seconds {
            let ms = |x: f64| if x.is_finite() { format!("{x:.3}") } else { String::new() };
            let _ = writeln!(csv, "{},{},{},{},{}", s.second, run.system, ms(s.worst_ms), ms(s.p99_ms), s.count);
        }
        let points = seconds.iter().map(|s| (s.second as f64, s.worst_ms)).collect();
        series.push(Series { name: run.system.clone(), points, markers: false });
    }
    let csv_path = dir.join(format!("{}.csv", plan.name));
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&csv_path, csv)) {
        Ok(()) => println!("series: {}", csv_path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", csv_path.display()),
    }
    let s = plan.schedule;
    time_chart(
        &args.plots.clone().unwrap_or(dir).join(format!("{}.svg", plan.name)),
        &format!("Worst latency of each second: {} records/s, {} partitions", s.rate, s.partitions),
        "second of the run (by send time)",
        "worst latency (ms)",
        &series,
        !args.linear_y,
    );
    let results = runs
        .iter()
        .map(|r| {
            serde_json::json!({
                "system": r.system,
                "figures": r.figures(plan),
                "load_average": [r.load_before, r.load_after],
                "steal_percent": r.steal_percent,
                "producer_late_records": r.sent.late,
                "duplicates": r.seen.duplicates,
            })
        })
        .collect();
    let guard: Option<Vec<serde_json::Value>> = guard.map(|checks| {
        checks
            .iter()
            .map(|c| serde_json::json!({ "check": c.what, "now": c.now, "limit": c.limit, "passed": c.passed }))
            .collect()
    });
    let run = serde_json::json!({
        "partitions": s.partitions, "rate": s.rate, "seconds": s.seconds, "warmup_seconds": plan.warmup,
        "guard": guard,
    });
    write_results(&format!("latency-{}", plan.name), args.mode(), bootstrap, run, results);
}
