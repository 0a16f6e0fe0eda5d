//! The fault matrix: every workload × guarantee × fault, and for each cell whether it runs
//! (in CI, or in the long run outside it) or why it cannot apply.
//!
//! A cell is one scenario of the suite: a fault plan ([`Scenario`]) run against one
//! [`Workload`] under one [`Guarantee`]. [`verdict`] decides every cell; it is a pure
//! function, so the table in `docs/reliability.md` and the runs come from the same rule
//! (`kafka-eos chaos --matrix long --list` prints it).
//!
//! The features a user combines map onto workloads ([`FEATURES`]): the financial close
//! carries state, windows closed by idle timers, a stream–table join and dedup at once, on
//! memory or on disk; the timers workload carries transactions of timers alone; the sink
//! workloads carry the sinks. A feature with no workload says so in the table.

use kafka_eos::Guarantee;

use super::plan::Scenario;
pub use super::workload::Workload;

/// The features of the runtime and the workloads that exercise them under faults; an empty
/// list is a feature no cell covers yet.
pub const FEATURES: [(&str, &[Workload]); 15] = [
    ("stateless copy", &[Workload::Copy]),
    ("state in memory (changelogs, restore)", &[Workload::Close]),
    ("state on disk (local checkpoint, tail restore)", &[Workload::CloseDisk]),
    ("timers (transactions of timers alone)", &[Workload::Timers]),
    ("windows closed by idle advance", &[Workload::Close, Workload::CloseDisk]),
    ("stream–table join", &[Workload::Close, Workload::CloseDisk]),
    ("dedup", &[Workload::Close, Workload::CloseDisk]),
    ("standby replicas (a moved partition continues a warm copy)", &[Workload::CloseStandby]),
    ("PostgreSQL sink", &[Workload::Postgres]),
    ("Redis sink", &[Workload::Redis, Workload::RedisNoDedup]),
    ("repartition topics (processing by another key)", &[Workload::Velocity]),
    ("window triggers (threshold)", &[Workload::Velocity]),
    ("exactly-once sink beside state (outbox)", &[Workload::Velocity]),
    ("stream–stream join", &[Workload::Join]),
    ("dead-lettering", &[Workload::Join]),
];

/// The faults of the matrix, in table order: the suite's scenarios less the presets (which
/// name a workload and a fault together).
pub const FAULTS: [Scenario; 16] = [
    Scenario::ProcessKill,
    Scenario::ProcessBounce,
    Scenario::Stall,
    Scenario::RebalanceStorm,
    Scenario::RandomAborts,
    Scenario::BrokerKill,
    Scenario::BrokerBounce,
    Scenario::CoordinatorKill,
    Scenario::EndTxnHeld,
    Scenario::ProduceHeld,
    Scenario::CoordinatorCut,
    Scenario::GroupCoordinatorCut,
    Scenario::MemberCut,
    Scenario::ZombieReconcile,
    Scenario::SlowBroker,
    Scenario::SinkKill,
];

/// The guarantees, in table order.
pub const GUARANTEES: [Guarantee; 3] =
    [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce];

/// Where a cell that applies runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// In the merge gate (`.ci/run`), at CI size.
    Ci,
    /// In the long run outside it (`.ci/long chaos`).
    Long,
}

impl Tier {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Ci => "ci",
            Tier::Long => "long",
        }
    }
}

/// What the matrix says of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The cell runs, in this tier.
    Runs(Tier),
    /// The fault cannot reach what the cell would test: why.
    Inapplicable(&'static str),
}

/// One cell: a workload under a guarantee and a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// What the instances run.
    pub workload: Workload,
    /// Under which guarantee.
    pub guarantee: Guarantee,
    /// The fault plan.
    pub fault: Scenario,
}

impl Cell {
    /// `<fault>`, or `<workload>-<guarantee>-<fault>` when the cell is not the copy under
    /// exactly-once (or the preset's own workload): names its log directory and topics.
    pub fn label(&self) -> String {
        let plain = self.fault.preset().map_or(self.workload == Workload::Copy, |own| own == self.workload);
        if plain && self.guarantee == Guarantee::ExactlyOncePerPartition {
            self.fault.name().to_string()
        } else {
            format!("{}-{}-{}", self.workload, short(self.guarantee), self.fault)
        }
    }

    /// Mixed into the suite's seed for this cell's schedule: the fault's position alone for
    /// the copy under exactly-once (the suite's default cells keep their schedules), else
    /// the workload and guarantee too.
    pub(crate) fn seed_salt(&self) -> u64 {
        let pos = |i: Option<usize>| i.unwrap_or(0) as u64;
        (pos(Scenario::ALL.iter().position(|s| *s == self.fault)) + 1)
            ^ (pos(Workload::ALL.iter().position(|w| *w == self.workload)) << 8)
            ^ (pos(GUARANTEES.iter().position(|g| *g == self.guarantee)) << 12)
    }
}

/// A guarantee's short name, for labels.
fn short(g: Guarantee) -> &'static str {
    match g {
        Guarantee::ExactlyOncePerPartition => "eos",
        Guarantee::ExactlyOncePerConsumer => "eopc",
        _ => "alo",
    }
}

/// The merge gate's slice: the timers workload, whose outputs mostly commit in transactions
/// of timers alone, under crashes and coordinator kills; the copy under held `EndTxn`
/// requests (a commit resumed, a late `EndTxn`); the exactly-once sink under crashes of
/// its instances and its server; state taken over from standby copies after crashes; and
/// card velocity (repartition, outbox, triggers) under crashes of its instances; and the
/// timers workload's zombie, whose reconciles meet the new owners' commits.
const CI: [(Workload, Guarantee, Scenario); 7] = [
    (Workload::Timers, Guarantee::ExactlyOncePerPartition, Scenario::ProcessKill),
    (Workload::Timers, Guarantee::ExactlyOncePerPartition, Scenario::CoordinatorKill),
    (Workload::Copy, Guarantee::ExactlyOncePerPartition, Scenario::EndTxnHeld),
    (Workload::Postgres, Guarantee::ExactlyOncePerPartition, Scenario::SinkKill),
    (Workload::CloseStandby, Guarantee::ExactlyOncePerPartition, Scenario::ProcessKill),
    (Workload::Velocity, Guarantee::ExactlyOncePerPartition, Scenario::ProcessKill),
    (Workload::Timers, Guarantee::ExactlyOncePerPartition, Scenario::ZombieReconcile),
];

/// Whether the cell (`workload`, `guarantee`, `fault`) runs, and where, or why not.
pub fn verdict(workload: Workload, guarantee: Guarantee, fault: Scenario) -> Verdict {
    use Verdict::Inapplicable;
    let transactional = guarantee != Guarantee::AtLeastOnce;
    if fault.preset().is_some_and(|own| own != workload) {
        return Inapplicable("a preset scenario runs its own workload");
    }
    if fault == Scenario::SinkKill && workload.sink().is_none() {
        return Inapplicable("no sink server to kill: the workload writes to Kafka");
    }
    if fault == Scenario::ProduceHeld && !workload.produces() {
        return Inapplicable("the sink workload produces no output records for the proxy to hold");
    }
    if !transactional
        && matches!(
            fault,
            Scenario::EndTxnHeld
                | Scenario::ProduceHeld
                | Scenario::CoordinatorCut
                | Scenario::CoordinatorKill
                | Scenario::ZombieReconcile
        )
    {
        return Inapplicable("at-least-once runs no transactions: no EndTxn or transactional produce to aim at");
    }
    if !transactional && workload.close() {
        return Inapplicable(
            "the close is checked to the cent, which at-least-once does not promise (a replay counts twice); \
             its no-loss check runs on the copy, timers and sink workloads",
        );
    }
    if !transactional && workload == Workload::Velocity {
        return Inapplicable("the outbox sink is refused under at-least-once: its rows would apply twice on a replay");
    }
    if fault == Scenario::RandomAborts && (workload.close() || workload == Workload::Velocity) {
        return Inapplicable(
            "deliberate failures come from the instance's per-record hook, which the close and card velocity (the \
             examples' pipelines, run as they ship) do not call: the cell would inject nothing",
        );
    }
    if CI.contains(&(workload, guarantee, fault)) {
        Verdict::Runs(Tier::Ci)
    } else {
        Verdict::Runs(Tier::Long)
    }
}

/// Every cell of the matrix with its verdict, in table order (workload, guarantee, fault).
pub fn cells() -> Vec<(Cell, Verdict)> {
    let mut out = Vec::new();
    for workload in Workload::ALL {
        for guarantee in GUARANTEES {
            for fault in FAULTS {
                out.push((Cell { workload, guarantee, fault }, verdict(workload, guarantee, fault)));
            }
        }
    }
    out
}

/// The cells that run in `tier` (the CI slice is part of the long run too).
pub fn runs_in(tier: Tier) -> Vec<Cell> {
    cells().into_iter().filter(|(_, v)| matches!(v, Verdict::Runs(t) if *t <= tier)).map(|(c, _)| c).collect()
}

/// The matrix as Markdown: a row per workload and fault, a column per
/// guarantee; a cell says where it runs, or `n/a` with a footnote number.
pub fn markdown() -> Vec<String> {
    let mut reasons: Vec<&'static str> = Vec::new();
    let mut out = vec![
        format!("| workload | fault | {} |", GUARANTEES.map(|g| g.as_str()).join(" | ")),
        "|---|---|---|---|---|".to_string(),
    ];
    for workload in Workload::ALL {
        for fault in FAULTS {
            let row: Vec<String> = GUARANTEES
                .iter()
                .map(|&g| match verdict(workload, g, fault) {
                    Verdict::Runs(t) => t.name().to_string(),
                    Verdict::Inapplicable(why) => {
                        let n = reasons.iter().position(|r| *r == why).unwrap_or_else(|| {
                            reasons.push(why);
                            reasons.len() - 1
                        });
                        format!("n/a ({})", n + 1)
                    }
                })
                .collect();
            out.push(format!("| {workload} | {fault} | {} |", row.join(" | ")));
        }
    }
    out.push(String::new());
    out.extend(reasons.iter().enumerate().map(|(i, r)| format!("{}. {r}", i + 1)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_has_a_verdict_and_every_fault_and_workload_runs_somewhere() {
        let all = cells();
        assert_eq!(all.len(), Workload::ALL.len() * GUARANTEES.len() * FAULTS.len());
        for fault in FAULTS {
            assert!(fault.preset().is_none(), "{fault} is a fault");
            assert!(all.iter().any(|(c, v)| c.fault == fault && matches!(v, Verdict::Runs(_))), "{fault} never runs");
        }
        for w in Workload::ALL {
            for g in GUARANTEES {
                let runs =
                    all.iter().filter(|(c, v)| c.workload == w && c.guarantee == g && matches!(v, Verdict::Runs(_)));
                // The close and card velocity under at-least-once are the pairs the matrix
                // leaves out whole.
                let out = (w.close() || w == Workload::Velocity) && g == Guarantee::AtLeastOnce;
                assert_eq!(runs.count() == 0, out, "{w} {g:?}");
            }
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
        }
        assert!("nope".parse::<Workload>().unwrap_err().contains("close-disk"));
    }

    #[test]
    fn the_ci_slice_is_part_of_the_long_run_and_every_preset_is_refused() {
        let (ci, long) = (runs_in(Tier::Ci), runs_in(Tier::Long));
        assert_eq!(ci.len(), CI.len());
        assert!(ci.iter().all(|c| long.contains(c)));
        for preset in [Scenario::FinancialClose, Scenario::PostgresSink, Scenario::RedisSink, Scenario::RedisNoDedup] {
            assert!(matches!(
                verdict(Workload::Copy, Guarantee::ExactlyOncePerPartition, preset),
                Verdict::Inapplicable(_)
            ));
        }
    }

    #[test]
    fn the_review_holes_each_have_a_cell_that_runs() {
        // Hole 1 and 2: timers alone in a transaction, in both modes, under the faults that
        // leave a commit's outcome unknown or a member a zombie.
        for g in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
            for f in [Scenario::CoordinatorKill, Scenario::CoordinatorCut, Scenario::Stall, Scenario::MemberCut] {
                assert!(matches!(verdict(Workload::Timers, g, f), Verdict::Runs(_)), "{g:?} {f}");
            }
        }
        // The next review's finding 1: a zombie's reconcile after a new owner's commit of
        // timers alone, per partition, in the merge gate.
        let zombie = verdict(Workload::Timers, Guarantee::ExactlyOncePerPartition, Scenario::ZombieReconcile);
        assert_eq!(zombie, Verdict::Runs(Tier::Ci));
        // Hole 3: an exactly-once sink behind a rewind, per consumer, under a storm.
        let storm = verdict(Workload::Postgres, Guarantee::ExactlyOncePerConsumer, Scenario::RebalanceStorm);
        assert!(matches!(storm, Verdict::Runs(_)));
        // Hole 4: a restore behind a transaction left open, per consumer, state on disk too.
        for w in [Workload::Close, Workload::CloseDisk] {
            let stall = verdict(w, Guarantee::ExactlyOncePerConsumer, Scenario::Stall);
            assert!(matches!(stall, Verdict::Runs(_)), "{w}");
        }
    }

    #[test]
    fn card_velocity_runs_under_kills_of_instances_brokers_and_postgres_in_both_modes() {
        for g in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
            for f in [Scenario::ProcessKill, Scenario::BrokerKill, Scenario::SinkKill, Scenario::ProduceHeld] {
                assert!(matches!(verdict(Workload::Velocity, g, f), Verdict::Runs(_)), "{g:?} {f}");
            }
        }
        let ci = verdict(Workload::Velocity, Guarantee::ExactlyOncePerPartition, Scenario::ProcessKill);
        assert_eq!(ci, Verdict::Runs(Tier::Ci));
    }

    #[test]
    fn the_markdown_has_a_row_per_workload_and_fault_and_numbers_its_reasons() {
        let md = markdown();
        let rows = md.iter().filter(|l| l.starts_with("| ") && !l.starts_with("| workload")).count();
        assert_eq!(rows, Workload::ALL.len() * FAULTS.len());
        assert!(md.iter().any(|l| l.starts_with("1. ")));
        assert!(md.iter().all(|l| !l.contains("n/a (0)")));
    }
}
