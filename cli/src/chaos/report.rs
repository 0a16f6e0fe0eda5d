//! Results: Jepsen's anomaly classes per scenario, the result table and the summary.
//!
//! # The classes
//! Each class is counted where it can be seen: by the **concurrent** read_committed reader
//! (it reads while faults happen, as a downstream consumer would) and by the **final**
//! checks once everything has caught up (the verifier and a final read_committed read).
//!
//! | class | concurrent reader | final checks |
//! |---|---|---|
//! | duplicate | an output whose origin it has already read | an input with two or more outputs |
//! | lost | — | an input without output, once the group committed past it |
//! | aborted read (G1a) | a record it read that the final read does not hold at that offset with that origin (it belonged to a transaction that did not commit) | — |
//! | non-monotonic | an offset not above the previous one of its partition; an origin offset below an earlier one of the same input partition | per-partition origin order |
//! | skipped offsets | a committed record (in the final read) at an offset below the last one it read in that partition, that it never read: a poll skip | — |
//! | unseen | a committed record it never reached: sent, committed, never read (the reader stalled, e.g. behind a transaction left hanging) | — |
//! | other | an output with no or a foreign origin | the same; stalled instances never fenced |
//!
//! # What gap is legitimate
//! A read_committed reader's offsets are not contiguous under transactions, and must not
//! be: every commit or abort writes a **control record** (a marker) that takes an offset
//! and is never delivered, and records of **aborted** transactions are filtered out. So a
//! gap between two offsets read is legitimate exactly when every offset in it is a marker
//! or an aborted record — that is, when none of them is in the final read_committed read
//! (which holds every committed data record and nothing else: no retention or compaction
//! runs in the suite). A gap offset that *is* in the final read is a committed record the
//! reader jumped over: a skipped offset.

use std::time::Duration;

use super::matrix::Cell;
use super::plan::Scenario;
use kafka_eos::Guarantee;

/// One anomaly class, as seen by the concurrent reader and by the final checks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Found by the concurrent read_committed reader.
    pub reader: u64,
    /// Found by the final checks (verifier, final read, reconciliation).
    pub at_end: u64,
}

impl Seen {
    /// Both together.
    pub fn total(self) -> u64 {
        self.reader + self.at_end
    }
}

/// Jepsen's anomaly classes for one scenario (what each means: `docs/reliability.md`, *Anomaly classes*).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Anomalies {
    /// An input processed into the output twice.
    pub duplicate: Seen,
    /// An input without output (the verifier's "missing").
    pub lost: Seen,
    /// Records of a transaction that did not commit, read by a read_committed reader (G1a).
    pub aborted_read: Seen,
    /// Offsets or origins going backwards.
    pub non_monotonic: Seen,
    /// Committed records a reader's offsets jumped over.
    pub skipped: Seen,
    /// Committed records never read.
    pub unseen: Seen,
    /// Outputs with no or a foreign origin; stalled instances that were never fenced.
    pub other: Seen,
}

impl Anomalies {
    /// Every class with its name, in table order.
    pub fn classes(&self) -> [(&'static str, Seen); 7] {
        [
            ("duplicate", self.duplicate),
            ("lost", self.lost),
            ("aborted read", self.aborted_read),
            ("non-monotonic", self.non_monotonic),
            ("skipped offsets", self.skipped),
            ("unseen", self.unseen),
            ("other", self.other),
        ]
    }

    /// Every anomaly of every class.
    pub fn total(&self) -> u64 {
        self.classes().iter().map(|(_, s)| s.total()).sum()
    }

    fn add(&mut self, o: &Anomalies) {
        for (a, b) in [
            (&mut self.duplicate, o.duplicate),
            (&mut self.lost, o.lost),
            (&mut self.aborted_read, o.aborted_read),
            (&mut self.non_monotonic, o.non_monotonic),
            (&mut self.skipped, o.skipped),
            (&mut self.unseen, o.unseen),
            (&mut self.other, o.other),
        ] {
            a.reader += b.reader;
            a.at_end += b.at_end;
        }
    }

    /// The per-class table of one scenario: class, concurrent reader, final checks.
    pub fn table(&self) -> Vec<String> {
        let mut out = vec![format!("{:<16} {:>8} {:>8} {:>8}", "anomaly class", "reader", "final", "total")];
        for (name, s) in self.classes() {
            out.push(format!("{name:<16} {:>8} {:>8} {:>8}", s.reader, s.at_end, s.total()));
        }
        out
    }
}

/// One scenario's outcome: the row of the result table, and notes for humans.
#[derive(Debug, Clone)]
pub struct ScenarioResult {
    /// Which scenario (the cell's fault).
    pub scenario: Scenario,
    /// The workload, guarantee and fault.
    pub cell: Cell,
    /// Input records (as the verifier read them).
    pub records: u64,
    /// Faults injected (for random aborts: transactions aborted on purpose or not).
    pub faults: u64,
    /// What the readers and checks found, per class.
    pub anomalies: Anomalies,
    /// Wall time of the scenario.
    pub elapsed: Duration,
    /// What happened, for humans: instances, transactions, reader, recoveries.
    pub notes: Vec<String>,
    /// Why the scenario could not complete, if it could not.
    pub error: Option<String>,
}

const CLASS_HEADER: [&str; 7] = ["dup", "lost", "G1a", "non-mono", "skipped", "unseen", "other"];

impl ScenarioResult {
    pub(crate) fn new(cell: Cell) -> ScenarioResult {
        ScenarioResult {
            scenario: cell.fault,
            cell,
            records: 0,
            faults: 0,
            anomalies: Anomalies::default(),
            elapsed: Duration::ZERO,
            notes: Vec::new(),
            error: None,
        }
    }

    /// Every violation found; 0 means the scenario passed (if it completed). Under
    /// at-least-once a duplicate, and the step back in origin order a replay makes, is the
    /// guarantee working as documented, not a violation: every other class counts.
    pub fn violations(&self) -> u64 {
        let a = &self.anomalies;
        if self.cell.guarantee == Guarantee::AtLeastOnce {
            a.total() - a.duplicate.total() - a.non_monotonic.total()
        } else {
            a.total()
        }
    }

    /// Completed with no violation.
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.violations() == 0
    }

    /// The header of the result table: one column per anomaly class (both sides added).
    pub fn header() -> String {
        let classes: Vec<String> = CLASS_HEADER.iter().map(|c| format!("{c:>8}")).collect();
        format!(
            "{:<16} {:<14} {:<26} {:>9} {:>6} {} {:>8}",
            "scenario",
            "workload",
            "guarantee",
            "records",
            "faults",
            classes.join(" "),
            "elapsed"
        )
    }

    /// This result as a row of the table.
    pub fn row(&self) -> String {
        let classes: Vec<String> = self.anomalies.classes().iter().map(|(_, s)| format!("{:>8}", s.total())).collect();
        format!(
            "{:<16} {:<14} {:<26} {:>9} {:>6} {} {:>7.1}s{}",
            self.scenario.name(),
            self.cell.workload.name(),
            self.cell.guarantee.as_str(),
            self.records,
            self.faults,
            classes.join(" "),
            self.elapsed.as_secs_f64(),
            if self.passed() { "" } else { "  FAILED" }
        )
    }
}

/// Every scenario's result.
#[derive(Debug, Clone)]
pub struct SuiteReport {
    /// In the order run.
    pub results: Vec<ScenarioResult>,
    /// The seed used.
    pub seed: u64,
    /// Where the instance logs are (kept when a scenario failed), if anywhere.
    pub logs: Option<std::path::PathBuf>,
}

impl SuiteReport {
    /// Every scenario completed without a violation.
    pub fn passed(&self) -> bool {
        self.results.iter().all(ScenarioResult::passed)
    }

    /// Every class summed over the scenarios.
    pub fn totals(&self) -> Anomalies {
        let mut t = Anomalies::default();
        for r in &self.results {
            t.add(&r.anomalies);
        }
        t
    }

    /// The summary table: one row per scenario, one column per class, and a total row.
    pub fn table(&self) -> Vec<String> {
        let mut out = vec![ScenarioResult::header()];
        out.extend(self.results.iter().map(ScenarioResult::row));
        let t = self.totals();
        let classes: Vec<String> = t.classes().iter().map(|(_, s)| format!("{:>8}", s.total())).collect();
        out.push(format!(
            "{:<16} {:<14} {:<26} {:>9} {:>6} {} {:>7.1}s",
            "total",
            "",
            "",
            self.results.iter().map(|r| r.records).sum::<u64>(),
            self.results.iter().map(|r| r.faults).sum::<u64>(),
            classes.join(" "),
            self.results.iter().map(|r| r.elapsed.as_secs_f64()).sum::<f64>()
        ));
        out
    }

    /// `chaos: <k> scenarios, <n> faults, <d> duplicates, <m> missing, <o> order violations,
    /// <a> aborted reads, <s> skipped offsets, <u> unseen, <x> other`: the violations. The
    /// duplicates and replays out of order of at-least-once cells, which its contract
    /// allows, follow apart (`; at-least-once, allowed: ...`).
    pub fn summary_line(&self) -> String {
        let mut t = self.totals();
        let (mut dup, mut order) = (0, 0);
        for r in self.results.iter().filter(|r| r.cell.guarantee == Guarantee::AtLeastOnce) {
            dup += r.anomalies.duplicate.total();
            order += r.anomalies.non_monotonic.total();
        }
        t.duplicate = Seen { reader: 0, at_end: t.duplicate.total() - dup };
        t.non_monotonic = Seen { reader: 0, at_end: t.non_monotonic.total() - order };
        let allowed = if dup + order > 0 {
            format!("; at-least-once, allowed: {dup} duplicates, {order} replayed out of order")
        } else {
            String::new()
        };
        format!(
            "chaos: {} scenarios, {} faults, {} duplicates, {} missing, {} order violations, {} aborted reads, {} skipped offsets, {} unseen, {} other{allowed}",
            self.results.len(),
            self.results.iter().map(|r| r.faults).sum::<u64>(),
            t.duplicate.total(),
            t.lost.total(),
            t.non_monotonic.total(),
            t.aborted_read.total(),
            t.skipped.total(),
            t.unseen.total(),
            t.other.total(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::matrix::Workload;
    use super::*;

    #[test]
    fn any_class_fails_the_run() {
        let cell = Cell {
            workload: Workload::Copy,
            guarantee: Guarantee::ExactlyOncePerPartition,
            fault: Scenario::SlowBroker,
        };
        let mut r = ScenarioResult::new(cell);
        assert!(r.passed());
        for i in 0..7 {
            let mut a = Anomalies::default();
            let classes = [
                &mut a.duplicate,
                &mut a.lost,
                &mut a.aborted_read,
                &mut a.non_monotonic,
                &mut a.skipped,
                &mut a.unseen,
                &mut a.other,
            ];
            classes[i].reader = 1;
            r.anomalies = a;
            assert!(!r.passed(), "class {i}");
        }
        let report = SuiteReport { results: vec![r.clone(), r], seed: 1, logs: None };
        assert_eq!(report.totals().other.reader, 2);
        assert!(report.summary_line().contains("0 duplicates, 0 missing, 0 order violations"));
        assert!(report.summary_line().ends_with("2 other"), "{}", report.summary_line());
        let table = report.table();
        assert_eq!(table.len(), 4);
        assert!(table[0].contains("G1a") && table[3].starts_with("total"), "{table:?}");
        assert_eq!(Anomalies::default().table().len(), 8);
    }

    #[test]
    fn at_least_once_allows_duplicates_and_replayed_order_but_nothing_else() {
        let cell = Cell { workload: Workload::Copy, guarantee: Guarantee::AtLeastOnce, fault: Scenario::ProcessKill };
        let mut r = ScenarioResult::new(cell);
        r.anomalies.duplicate = Seen { reader: 3, at_end: 4 };
        r.anomalies.non_monotonic = Seen { reader: 2, at_end: 1 };
        assert!(r.passed(), "{:?}", r.violations());
        r.anomalies.lost.at_end = 1;
        assert_eq!(r.violations(), 1);
        let report = SuiteReport { results: vec![r.clone()], seed: 1, logs: None };
        assert!(
            report.summary_line().contains("0 duplicates, 1 missing, 0 order violations")
                && report.summary_line().ends_with("allowed: 7 duplicates, 3 replayed out of order"),
            "{}",
            report.summary_line()
        );
        r.cell.guarantee = Guarantee::ExactlyOncePerPartition;
        assert_eq!(r.violations(), 11);
    }
}
