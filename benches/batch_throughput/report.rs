//! The medians of a run, its tables, the goal lines and the plots.

use std::collections::BTreeMap;

use kafka_eos_cli::bench::{fmt_opt, median, table, CopyResult, Subject};

use crate::common::plot::{log_x_chart, Legend, Series};
use crate::common::Args;
use crate::{
    mib, Config, BASE_INTERVAL_MS, COPIER, PRODUCER_PERF, STREAMS, STREAMS_NEWEST, STREAMS_TV0, SWEEP_PARTITIONS,
    VALUE_SIZE,
};

/// The medians of one configuration over its repetitions.
pub struct Agg {
    pub config: Config,
    pub runs: Vec<CopyResult>,
    pub rps: f64,
    pub mbps: f64,
    /// Median over repetitions of this run's records/s over the ceiling's in the same
    /// repetition and partition count.
    pub ratio: f64,
    /// The same, over `ProducerPerformance`'s (NaN: not measured).
    pub of_reference: f64,
    /// The best repetition's ratio to the ceiling (the regression guard's figure: see
    /// `guard.rs`).
    pub best_ratio: f64,
    pub cpu: f64,
    /// The broker's CPU seconds per million records (NaN: not measured).
    pub broker_cpu: f64,
    pub rss: f64,
    pub rss_added: f64,
    pub e2e: f64,
    pub verified: bool,
}

pub fn aggregate(runs: &[(usize, Config, CopyResult)]) -> Vec<Agg> {
    // The ceiling and the reference of each (repetition, partitions), for same-run ratios.
    let rate_of = |subject: &str| -> BTreeMap<(usize, i32), f64> {
        runs.iter()
            .filter(|(_, c, _)| c.subject == subject)
            .map(|(rep, c, r)| ((*rep, c.partitions), r.records_per_second))
            .collect()
    };
    let (ceiling, reference) = (rate_of(Subject::Ceiling.name()), rate_of(PRODUCER_PERF));
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
                    of_reference: f64::NAN,
                    best_ratio: f64::NAN,
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
    // Ratios: (this run / the base of the same repetition), per repetition.
    let ratios = |g: &Agg, base: &BTreeMap<(usize, i32), f64>| {
        let mut ratios = Vec::new();
        for (rep, c, r) in runs {
            if c.subject == g.config.subject
                && c.partitions == g.config.partitions
                && c.interval_ms == g.config.interval_ms
            {
                if let Some(v) = base.get(&(*rep, c.partitions)).filter(|v| **v > 0.0) {
                    ratios.push(r.records_per_second / v);
                }
            }
        }
        ratios
    };
    let best = |xs: &[f64]| xs.iter().copied().fold(f64::NAN, f64::max);
    for g in &mut groups {
        let (of_ceiling, of_reference) = (ratios(g, &ceiling), ratios(g, &reference));
        (g.ratio, g.best_ratio) = (median(&of_ceiling), best(&of_ceiling));
        g.of_reference = median(&of_reference);
    }
    groups
}

pub fn print_tables(agg: &[Agg], reps: usize) {
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
                fmt_opt(Some(100.0 * a.of_reference), 1),
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
                "% of ProducerPerformance",
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
        PRODUCER_PERF,
        "ceiling",
        "at-least-once",
        "at-least-once+state",
        "exactly-once",
        "exactly-once+state",
        "exactly-once-per-consumer",
        STREAMS,
        STREAMS_NEWEST,
        STREAMS_TV0,
        COPIER,
    ]
    .iter()
    .position(|s| *s == subject)
    .unwrap_or(99)
}

pub fn find<'a>(agg: &'a [Agg], subject: &str, partitions: i32, interval_ms: Option<u64>) -> Option<&'a Agg> {
    agg.iter().find(|a| {
        a.config.subject == subject && a.config.partitions == partitions && a.config.interval_ms == interval_ms
    })
}

/// The goal lines, printed and returned for the JSON.
pub fn summary(agg: &[Agg]) -> serde_json::Value {
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
    let of_reference = |s: &str, i: Option<u64>| find(agg, s, p, i).map(|a| a.of_reference).filter(|x| x.is_finite());
    let reference = find(agg, PRODUCER_PERF, p, None).map(|a| a.rps);
    let mut cpu = serde_json::Map::new();
    for s in ["ceiling", "at-least-once", "exactly-once", "exactly-once-per-consumer", STREAMS, STREAMS_NEWEST] {
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
    if let Some(rps) = reference {
        println!(
            "  ProducerPerformance (the broker's capacity for one producer): {rps:.0} records/s; as a fraction of it:"
        );
        for (s, i, goal) in [
            ("ceiling", None, ""),
            ("at-least-once", at, " (goal: >= exactly-once)"),
            ("exactly-once", at, " (goal: >= 70 %)"),
            ("exactly-once-per-consumer", at, ""),
        ] {
            println!("    {s:<40} {}{goal}", pct(of_reference(s, i)));
        }
    }
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
    for streams in [STREAMS, STREAMS_NEWEST] {
        if !agg.iter().any(|a| a.config.subject == streams) {
            continue;
        }
        println!(
            "\nours / {streams} at {BASE_INTERVAL_MS} ms (goal: throughput >= 1.5 at <= 0.5 of its CPU per record):"
        );
        for &p in &partitions {
            for ours in ["exactly-once", "exactly-once-per-consumer"] {
                let (Some(o), Some(s)) = (find(agg, ours, p, at), find(agg, streams, p, at)) else { continue };
                let t = o.rps / s.rps;
                let c = o.cpu / s.cpu;
                println!("  {p:>2} partitions, {ours:<26} throughput x{t:.2}, CPU per record x{c:.2}");
                vs_streams.push(serde_json::json!({"peer": streams, "partitions": p, "subject": ours, "throughput_ratio": t, "cpu_per_record_ratio": c}));
            }
        }
    }
    serde_json::json!({
        "exactly_once_over_at_least_once_at_100ms": eos_alo,
        "exactly_once_per_consumer_over_at_least_once_at_100ms": eos_pc_alo,
        "exactly_once_over_ceiling_at_100ms": eos_ceiling,
        "producer_performance_records_per_second": reference,
        "exactly_once_over_producer_performance_at_100ms": of_reference("exactly-once", at),
        "at_least_once_over_producer_performance_at_100ms": of_reference("at-least-once", at),
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

pub fn plots(args: &Args, agg: &[Agg]) {
    let dir = args.plot_dir();
    let subjects = ["ceiling", "at-least-once", "exactly-once", "exactly-once-per-consumer", STREAMS, STREAMS_NEWEST];
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
