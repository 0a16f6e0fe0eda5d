//! The latency bench's regression guard (`cargo bench --bench latency -- --quick`, run by
//! CI): the exactly-once copy's p90 against an absolute bound and against Kafka Streams'
//! p90 measured in the same run, and not one record lost or seen twice.
//!
//! p90, not p99: a quick run counts few records, so its p99 is set by its worst second,
//! and one slow second of a young broker moves it far between otherwise equal runs, while
//! the p90 hardly moves (docs/benchmarks.md, "The regression guard", has the spread). A
//! regression the guard is meant to catch (a batch waiting an extra interval, a task that
//! stalls every few seconds) moves the p90 by an interval or more. The ratio to Streams,
//! measured a minute apart on the same broker, moves less with the machine's load than
//! either figure. Without Java (no Streams) the ratio is not checked.

use serde::Deserialize;

/// `benches/baseline.json`'s `latency` section.
#[derive(Clone, Debug, Deserialize)]
pub struct LatencyLimits {
    /// The most the exactly-once copy's p90 may be, ms.
    pub p90_max_ms: f64,
    /// The most its p90 may be as a multiple of Kafka Streams' p90 in the same run.
    pub p90_over_streams_max: f64,
    /// How the limits were chosen.
    pub measured: String,
}

/// What the guard reads of the exactly-once system's run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GuardedRun {
    /// Its p90 over the counted records, ms.
    pub p90_ms: f64,
    /// Records seen more than once.
    pub duplicates: u64,
    /// Records acknowledged by the broker but never visible by the end.
    pub unseen: u64,
}

/// One check and its verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What is checked, as printed.
    pub what: String,
    /// This run's figure (`None`: not measured).
    pub now: Option<f64>,
    /// The most it may be.
    pub limit: f64,
    /// Whether `now` is within `limit`.
    pub passed: bool,
}

/// The checks, given the exactly-once run (`None`: it failed or did not run, which fails
/// the guard: a guard that measures nothing guards nothing) and Streams' p90 (`None`: not
/// run, so its check is left out).
pub fn latency_checks(eo: Option<GuardedRun>, streams_p90_ms: Option<f64>, limits: &LatencyLimits) -> Vec<Check> {
    let Some(run) = eo else {
        return vec![Check { what: "exactly-once ran".into(), now: None, limit: 1.0, passed: false }];
    };
    let mut checks = vec![
        Check {
            what: "exactly-once p90 ms".into(),
            now: Some(run.p90_ms),
            limit: limits.p90_max_ms,
            passed: run.p90_ms.is_finite() && run.p90_ms <= limits.p90_max_ms,
        },
        Check { what: "duplicates".into(), now: Some(run.duplicates as f64), limit: 0.0, passed: run.duplicates == 0 },
        Check { what: "not visible".into(), now: Some(run.unseen as f64), limit: 0.0, passed: run.unseen == 0 },
    ];
    if let Some(streams) = streams_p90_ms.filter(|s| s.is_finite() && *s > 0.0) {
        let ratio = run.p90_ms / streams;
        checks.push(Check {
            what: "exactly-once p90 / Kafka Streams' p90".into(),
            now: Some(ratio),
            limit: limits.p90_over_streams_max,
            passed: ratio.is_finite() && ratio <= limits.p90_over_streams_max,
        });
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LatencyLimits {
        LatencyLimits { p90_max_ms: 200.0, p90_over_streams_max: 1.5, measured: String::new() }
    }

    fn run(p90_ms: f64) -> GuardedRun {
        GuardedRun { p90_ms, duplicates: 0, unseen: 0 }
    }

    fn failed(checks: &[Check]) -> Vec<&str> {
        checks.iter().filter(|c| !c.passed).map(|c| c.what.as_str()).collect()
    }

    #[test]
    fn a_run_within_both_limits_passes() {
        let checks = latency_checks(Some(run(110.0)), Some(115.0), &limits());
        assert_eq!(checks.len(), 4);
        assert!(failed(&checks).is_empty(), "{checks:?}");
    }

    #[test]
    fn a_p90_over_the_bound_or_the_ratio_fails() {
        assert_eq!(failed(&latency_checks(Some(run(201.0)), Some(190.0), &limits())), ["exactly-once p90 ms"]);
        assert_eq!(
            failed(&latency_checks(Some(run(190.0)), Some(120.0), &limits())),
            ["exactly-once p90 / Kafka Streams' p90"]
        );
        assert_eq!(failed(&latency_checks(Some(run(f64::NAN)), None, &limits())), ["exactly-once p90 ms"]);
    }

    #[test]
    fn a_record_lost_or_seen_twice_fails() {
        let dup = GuardedRun { duplicates: 1, ..run(100.0) };
        let lost = GuardedRun { unseen: 3, ..run(100.0) };
        assert_eq!(failed(&latency_checks(Some(dup), None, &limits())), ["duplicates"]);
        assert_eq!(failed(&latency_checks(Some(lost), None, &limits())), ["not visible"]);
    }

    #[test]
    fn without_streams_the_ratio_is_left_out_and_without_a_run_the_guard_fails() {
        let checks = latency_checks(Some(run(100.0)), None, &limits());
        assert_eq!(checks.len(), 3);
        assert!(failed(&checks).is_empty());
        assert_eq!(latency_checks(Some(run(100.0)), Some(0.0), &limits()).len(), 3, "no Streams figure");
        assert_eq!(failed(&latency_checks(None, Some(100.0), &limits())), ["exactly-once ran"]);
    }
}
