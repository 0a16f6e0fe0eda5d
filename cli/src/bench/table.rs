//! Figures as text: medians, tables, the overhead table, ProducerPerformance's summary.

use super::*;

/// Median of `xs` (NaN if empty); the middle two's mean for an even count.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A Markdown table (what `docs/benchmarks.md` holds): a header row, then rows, numbers
/// right-aligned. A row with more cells than the header gets extra columns, not a panic.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN).set_header(header.iter().copied());
    for r in rows {
        t.add_row(r.iter().map(String::as_str));
    }
    for column in t.column_iter_mut().skip(1) {
        column.set_cell_alignment(comfy_table::CellAlignment::Right);
    }
    t.to_string() + "\n"
}

/// Formats an optional number with `digits` decimals, `-` when absent.
pub fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "-".into(),
    }
}

/// The overhead table: each result's throughput, its ratio to the ceiling among
/// `results`, CPU per million records, peak RSS and the verifier's verdict.
pub fn overhead_table(results: &[CopyResult]) -> String {
    let ceiling = results.iter().find(|r| r.subject == Subject::Ceiling.name()).map(|r| r.records_per_second);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.subject.clone(),
                r.commit_interval_ms.map_or("-".into(), |ms| ms.to_string()),
                format!("{:.0}", r.records_per_second),
                format!("{:.2}", r.megabytes_per_second),
                fmt_opt(ceiling.filter(|c| *c > 0.0).map(|c| 100.0 * r.records_per_second / c), 1),
                fmt_opt(r.cpu_seconds_per_million_records, 2),
                fmt_opt(r.peak_rss_bytes.map(|b| b as f64 / (1 << 20) as f64), 0),
                fmt_opt(r.peak_rss_above_baseline_bytes.map(|b| b as f64 / (1 << 20) as f64), 0),
                match r.verified {
                    Some(v) if v.ok => "ok".into(),
                    Some(v) => format!("FAILED ({} dup, {} missing)", v.duplicates, v.missing),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    table(
        &[
            "subject",
            "commit ms",
            "records/s",
            "MB/s",
            "% of ceiling",
            "CPU s/M rec",
            "peak RSS MiB",
            "RSS over baseline MiB",
            "verified",
        ],
        &rows,
    )
}

/// The records/s in the final summary line of Kafka's `ProducerPerformance`: `N records
/// sent, X records/sec (Y MB/sec), ... ms 99.9th.` (its periodic lines carry no
/// percentiles).
pub fn parse_producer_performance(text: &str) -> Option<f64> {
    let line = text.lines().rev().find(|l| l.contains(" records sent, ") && l.contains("99.9th"))?;
    let rate = line.split(", ").nth(1)?;
    rate.split_whitespace().next()?.parse().ok()
}
