//! The regression guard of quick mode: the run's ratios against `benches/baseline.json`.
//!
//! Absolute records/s move with the machine and whatever else runs on it; a ratio of two
//! subjects measured side by side in the same repetition moves much less. So the guard
//! compares, per subject, the ratio to the ceiling (the no-transaction copy of the same
//! input, measured in the same repetition) with the committed baseline. It takes each
//! subject's **best** repetition, not the median: a regression of the code slows every
//! repetition, while now and then one repetition runs at a third of the usual rate with
//! several times the CPU, in librdkafka's producer threads (docs/benchmarks.md, "Slow
//! repetitions"); two of three repetitions hit by that would fail a median-based guard for
//! nothing. A ratio below `baseline × (1 − tolerance)` fails the run: that is a regression
//! well outside run-to-run noise. A ratio above `baseline × (1 + tolerance)` is reported,
//! so the baseline gets refreshed when the code gets faster.
//!
//! Memory is guarded the same way: each pipeline subject's peak RSS over the ceiling's in
//! the same run (its lowest repetition: a regression raises every one) must stay under
//! `peak_rss_over_ceiling_max`.
//!
//! The baseline is a quick run's figures on a quiet machine of the CI's kind: copy the
//! `guard.measured` ratios of `target/bench-results/batch_throughput-quick.json` into it,
//! and say in `measured` when and under what load.

use std::collections::BTreeMap;

use kafka_eos_cli::bench::{median, table};
use serde::Deserialize;

use crate::report::Agg;
use crate::{common::workspace_dir, BASE_INTERVAL_MS, QUICK_PARTITIONS};

/// `benches/baseline.json`.
#[derive(Debug, Deserialize)]
struct Baseline {
    /// What the figures are relative to: `ceiling`.
    reference: String,
    /// Relative tolerance, e.g. 0.4 for ±40 %.
    tolerance: f64,
    /// How, where and when the baseline was measured.
    measured: String,
    /// Subject → median ratio to the reference.
    ratios: BTreeMap<String, f64>,
    /// The most a pipeline subject's peak RSS may be, as a multiple of the ceiling's in the
    /// same run (its lowest repetition over the ceiling's median).
    peak_rss_over_ceiling_max: f64,
    /// How the memory limit was chosen.
    peak_rss_measured: String,
}

/// The comparison, as printed.
pub struct Comparison {
    reference: String,
    rows: Vec<(String, Option<f64>, f64, &'static str)>,
    measured: BTreeMap<String, f64>,
}

impl Comparison {
    /// Whether every baseline subject was measured and none fell below its tolerance.
    pub fn passed(&self) -> bool {
        !self.rows.iter().any(|r| r.3 == "REGRESSED" || r.3 == "MISSING")
    }

    /// For the results file.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "reference": self.reference,
            "measured": self.measured,
            "rows": self.rows.iter().map(|(s, now, base, verdict)| serde_json::json!({
                "subject": s, "ratio": now, "baseline": base, "verdict": verdict,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Compares the quick run's ratios with the baseline and prints the comparison.
pub fn compare(agg: &[Agg], records: u64) -> Comparison {
    let path = workspace_dir().join("benches").join("baseline.json");
    let baseline: Baseline = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(b) => b,
        Err(e) => panic!("cannot read the bench baseline {}: {e}", path.display()),
    };
    let reference = "ceiling";
    assert_eq!(baseline.reference, reference, "{}: the guard compares with the ceiling", path.display());
    let mut measured: BTreeMap<String, f64> =
        agg.iter().filter(|a| at_guard(a)).map(|a| (a.config.subject.clone(), a.best_ratio)).collect();
    measured.retain(|s, x| x.is_finite() && s != reference);
    let memory = peak_rss_over_ceiling(agg, reference);
    let mut rows: Vec<_> = baseline
        .ratios
        .iter()
        .map(|(subject, base)| {
            let now = measured.get(subject).copied();
            let verdict = match now {
                None => "MISSING",
                Some(x) if x < base * (1.0 - baseline.tolerance) => "REGRESSED",
                Some(x) if x > base * (1.0 + baseline.tolerance) => "faster: refresh the baseline",
                Some(_) => "ok",
            };
            (subject.clone(), now, *base, verdict)
        })
        .collect();
    // Memory: a regression raises every repetition's peak, so the lowest is compared.
    let limit = baseline.peak_rss_over_ceiling_max;
    for subject in baseline.ratios.keys() {
        let now = memory.get(subject).copied();
        let verdict = match now {
            None => "MISSING",
            Some(x) if x > limit => "REGRESSED",
            Some(_) => "ok",
        };
        rows.push((format!("{subject} peak RSS / ceiling's"), now, limit, verdict));
    }
    println!(
        "\nregression guard: {QUICK_PARTITIONS} partitions, {records} records, best repetition's ratio to {reference}, \
         tolerance ±{:.0} % (baseline: {}); peak RSS over the ceiling's at most {limit} ({})",
        100.0 * baseline.tolerance,
        baseline.measured,
        baseline.peak_rss_measured
    );
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(s, now, base, v)| {
            vec![s.clone(), now.map_or("-".into(), |x| format!("{x:.3}")), format!("{base:.3}"), v.to_string()]
        })
        .collect();
    print!("{}", table(&["subject", "this run", "baseline (RSS: the most)", "verdict"], &cells));
    // MISSING (a subject that failed to copy, or a row no longer named as the baseline
    // names it) fails the guard as a regression does: a guard that measures nothing guards
    // nothing.
    Comparison { reference: reference.into(), rows, measured }
}

/// Whether `a` is a copy of the guard's configuration: [`QUICK_PARTITIONS`] partitions at
/// the base commit interval (or none: the ceiling).
fn at_guard(a: &Agg) -> bool {
    a.config.partitions == QUICK_PARTITIONS
        && (a.config.interval_ms.is_none() || a.config.interval_ms == Some(BASE_INTERVAL_MS))
}

/// Per subject of the guard's configuration: its lowest repetition's peak RSS over the
/// median peak RSS of `reference` (the ceiling).
fn peak_rss_over_ceiling(agg: &[Agg], reference: &str) -> BTreeMap<String, f64> {
    let peaks = |a: &Agg| -> Vec<f64> { a.runs.iter().filter_map(|r| r.peak_rss_bytes).map(|b| b as f64).collect() };
    let guarded = || agg.iter().filter(|a| at_guard(a));
    let Some(ceiling) = guarded().find(|a| a.config.subject == reference).map(|a| median(&peaks(a))) else {
        return BTreeMap::new();
    };
    guarded()
        .filter(|a| a.config.subject != reference && ceiling > 0.0)
        .filter_map(|a| Some((a.config.subject.clone(), peaks(a).into_iter().reduce(f64::min)? / ceiling)))
        .collect()
}
