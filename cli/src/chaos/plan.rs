//! The scenarios, and the fault schedule each one turns into.
//!
//! A `Plan` is a list of `Step`s at *virtual* times (see the `pace` module): the suite
//! executes each step when the virtual clock reaches it. Times are drawn from the suite's
//! seed, so a failing run can be replayed with `--seed`.

use std::time::Duration;

use super::rng::Rng;
use super::workload::Workload;
use kafka_eos_testkit::broker::proxy::api;
use kafka_eos_testkit::broker::OnRequest;

/// One class of fault, run as one scenario of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Processor crash: an instance is SIGKILLed at a random instant (at least 10 times) and
    /// restarted at once. Its open transaction is left dangling until the partition's next
    /// owner fences it with `init_transactions`; nothing of it may ever become visible.
    ProcessKill,
    /// Processor clean bounce: an instance gets SIGTERM (at least 5 times), shuts down
    /// gracefully (commits its collected batches, leaves the group) and is restarted.
    ProcessBounce,
    /// Broker crash: each broker is SIGKILLed once mid-run and restarted. Leaders,
    /// transaction and group coordinators move; in-flight produces and commits time out.
    BrokerKill,
    /// Broker clean bounce: each broker is stopped gracefully (controlled shutdown moves its
    /// leaderships first) mid-run and restarted.
    BrokerBounce,
    /// Rebalance storm: the number of instances goes 1 → 3 → 1 → 2 during the run, each
    /// step moving partitions between instances (under the instances' rebalance protocol).
    RebalanceStorm,
    /// Random aborts: about 1 transaction in 3 is aborted on purpose by the processor
    /// failing on a random record, then replayed; aborted outputs must stay invisible.
    RandomAborts,
    /// Stall: an instance is SIGSTOPped for longer than both the session timeout and the
    /// transaction timeout, then SIGCONTed. The group and the transaction coordinator have
    /// moved on: it must be fenced, and nothing it writes after waking may become visible.
    Stall,
    /// The stateful financial close (dedup, daily windows, state stores with changelogs)
    /// under processor SIGKILLs and one broker SIGKILL: the final totals must equal the
    /// batch recomputation from the raw payments to the cent, each merchant-day emitted once.
    FinancialClose,
    /// An EndTxn held past the client's timeout, then released. The fault proxy holds the
    /// connection that carries the next EndTxn to a partition's transaction coordinator for
    /// 12 s: the commit call times out (8 s) with its outcome unknown, the task fences its
    /// producer and reconciles, and only then does the old EndTxn reach the coordinator.
    /// Hazard: under the classic protocol a late EndTxn of an old transaction lands in a
    /// later transaction of the same producer epoch and commits it half-done (KAFKA-17754);
    /// the epoch bump of the task's `init_transactions` must fence it.
    EndTxnHeld,
    /// A produce request held until its transaction has ended, then released: the fault
    /// proxy holds the next transactional Produce to the leader of an output partition whose
    /// transaction coordinator is another broker (the coordinator stays fast) for 12 s. The
    /// records time out, the transaction is aborted (by the task or by the coordinator's
    /// timeout), the batch is replayed, and the held request arrives after all that.
    /// Hazard (KAFKA-17754's shape): the late produce lands in a later transaction of the
    /// same epoch and commits records of an aborted one (a duplicate, or an aborted read).
    ProduceHeld,
    /// The transaction coordinator cut off from the client mid-commit: when the next EndTxn
    /// reaches a partition's coordinator, the connection is closed (after the request was
    /// forwarded: the coordinator commits, the client never hears) or reset (before: it
    /// never commits), and the coordinator refuses new connections for 8 s. Hazard: the
    /// task guesses the outcome — replaying a committed batch duplicates it, dropping an
    /// aborted one loses it.
    CoordinatorCut,
    /// The transaction coordinator SIGKILLed mid-commit (the aimed fault): the next
    /// EndTxn to the coordinator of a random input partition's transactional.id is held,
    /// and that broker is SIGKILLed before the EndTxn reaches it or 0–30 ms after; it
    /// restarts 3–8 s later. The coordinator fails over to another broker with the
    /// transaction open, prepared, or complete, and the client's commit call fails or
    /// times out. Hazard: a commit whose outcome the client never hears, guessed wrong (a
    /// duplicate or a loss), and the broker-side split transaction of `docs/reliability.md`
    /// when the broker comes back before it is fenced.
    CoordinatorKill,
    /// The group coordinator cut off until the session expires, with a transaction open:
    /// every group request (heartbeat, join, sync, offsets) to the app's group coordinator
    /// is held for the session timeout plus 5 s. The group expels the members and hands
    /// their partitions out again while their transactions are open. Hazard: a zombie
    /// member commits its batch after another member took the partitions over (a
    /// duplicate), or the new owner starts from offsets the zombie later moves.
    GroupCoordinatorCut,
    /// One member cut off from the group coordinator until its session expires, the others
    /// not: the proxy holds the first connection that sends a group request (one member's
    /// heartbeats) for the session timeout plus 5 s. The group gives that member's
    /// partitions to the others while it still runs, fetches and produces: a zombie that
    /// has not heard it lost them. Hazard: a transaction of the zombie commits what the new
    /// owner also commits (in per-consumer mode only the group generation, carried by
    /// `TxnOffsetCommit`, can fence it: a transaction of timers alone must carry it too).
    MemberCut,
    /// A zombie that reconciles: as `member-cut`, one member's group requests held past its
    /// session (twice), and its tasks told they lost their partitions only 20 s after its
    /// client noticed (a test-only fault: a poll thread held up elsewhere); every commit
    /// meanwhile ends with its outcome unknown, every other one from the first (a test-only
    /// fault: not made, reported timed out after the call timeout), so that the group
    /// gives the partitions to the others, which restore, fire their timers and commit,
    /// before the zombie's tasks fence their producers and reconcile. Hazard: a reconcile takes a new owner's commit at its batch's first offset (a
    /// transaction of timers alone) for its own aborted transaction and replays the batch
    /// on its own state: outputs twice, the new owner's state changes lost.
    ZombieReconcile,
    /// One slow broker: 50–500 ms added to every request to one broker, for the whole run.
    /// Hazard: timeouts that fire on slowness rather than failure (a commit, a produce, a
    /// heartbeat) and their retries, on every path at once.
    SlowBroker,
    /// Kafka → PostgreSQL through the exactly-once sink (`kafka_eos_postgres`): instances
    /// SIGKILLed mid-batch, and the database SIGKILLed and restarted mid-run. Checked from
    /// the database: every input record's row exactly once, nothing else, and the stored
    /// offsets at the partitions' ends.
    PostgresSink,
    /// Kafka → Redis counters through the effectively-once sink (dedup keys with a TTL):
    /// the same faults, Redis SIGKILLed and restarted (AOF, fsync per write). Every counter
    /// must be exact.
    RedisSink,
    /// The same without the dedup step (at-least-once): counters may only drift upwards; the
    /// drift is reported, a counter below its input count is a loss.
    RedisNoDedup,
    /// The sink's server crash, for any sink workload: instances SIGKILLed mid-batch, the
    /// server SIGKILLed and restarted between them (the sink presets' plan).
    SinkKill,
}

impl Scenario {
    /// Every scenario, in the order the suite runs them.
    pub const ALL: [Scenario; 20] = [
        Scenario::ProcessKill,
        Scenario::ProcessBounce,
        Scenario::BrokerKill,
        Scenario::BrokerBounce,
        Scenario::RebalanceStorm,
        Scenario::RandomAborts,
        Scenario::Stall,
        Scenario::FinancialClose,
        Scenario::EndTxnHeld,
        Scenario::ProduceHeld,
        Scenario::CoordinatorCut,
        Scenario::CoordinatorKill,
        Scenario::GroupCoordinatorCut,
        Scenario::SlowBroker,
        Scenario::PostgresSink,
        Scenario::RedisSink,
        Scenario::RedisNoDedup,
        Scenario::SinkKill,
        Scenario::MemberCut,
        Scenario::ZombieReconcile,
    ];

    /// The name used on the command line and in result rows.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::ProcessKill => "process-kill",
            Scenario::ProcessBounce => "process-bounce",
            Scenario::BrokerKill => "broker-kill",
            Scenario::BrokerBounce => "broker-bounce",
            Scenario::RebalanceStorm => "rebalance-storm",
            Scenario::RandomAborts => "random-aborts",
            Scenario::Stall => "stall",
            Scenario::FinancialClose => "financial-close",
            Scenario::EndTxnHeld => "endtxn-held",
            Scenario::ProduceHeld => "produce-held",
            Scenario::CoordinatorCut => "coordinator-cut",
            Scenario::CoordinatorKill => "coordinator-kill",
            Scenario::GroupCoordinatorCut => "group-coord-cut",
            Scenario::SlowBroker => "slow-broker",
            Scenario::PostgresSink => "postgres-sink",
            Scenario::RedisSink => "redis-sink",
            Scenario::RedisNoDedup => "redis-no-dedup",
            Scenario::SinkKill => "sink-kill",
            Scenario::MemberCut => "member-cut",
            Scenario::ZombieReconcile => "zombie-reconcile",
        }
    }

    /// The workload a preset scenario names with its fault (`financial-close`, the sink
    /// scenarios); `None` for a fault alone, which runs the workload the suite is given.
    pub fn preset(self) -> Option<Workload> {
        match self {
            Scenario::FinancialClose => Some(Workload::Close),
            Scenario::PostgresSink => Some(Workload::Postgres),
            Scenario::RedisSink => Some(Workload::Redis),
            Scenario::RedisNoDedup => Some(Workload::RedisNoDedup),
            _ => None,
        }
    }

    /// Whether the scenario stops and starts brokers or injects network faults, which only
    /// a cluster started by the suite allows (not one given with `--bootstrap`).
    pub fn needs_broker_control(self) -> bool {
        matches!(self, Scenario::BrokerKill | Scenario::BrokerBounce | Scenario::CoordinatorKill) || self.network()
    }

    /// Whether the scenario's faults are network faults, injected by the fault proxy.
    pub fn network(self) -> bool {
        matches!(
            self,
            Scenario::EndTxnHeld
                | Scenario::ProduceHeld
                | Scenario::CoordinatorCut
                | Scenario::GroupCoordinatorCut
                | Scenario::MemberCut
                | Scenario::ZombieReconcile
                | Scenario::SlowBroker
        )
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL.into_iter().find(|sc| sc.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
            format!("unknown scenario {s:?}; one of: {}", names.join(", "))
        })
    }
}

/// What the suite does at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// SIGKILL a random running instance and start a replacement at once.
    KillInstance,
    /// SIGTERM a random running instance, wait for its graceful exit, start a replacement.
    BounceInstance,
    /// Take a broker down: SIGKILL (`hard`) or graceful stop.
    BrokerDown { node: i32, hard: bool },
    /// Start the broker again and wait until every partition has its full ISR back.
    BrokerUp { node: i32 },
    /// Start or gracefully stop instances until this many run.
    Scale(usize),
    /// SIGSTOP a random instance, at the instant `at` says.
    Stall { at: StallAt },
    /// SIGCONT the stalled instance.
    Resume,
    /// A network fault through the fault proxy (see the `net` module).
    Net(NetFault),
    /// SIGKILL the sink's server (PostgreSQL, Redis) and start it again 2 s later.
    SinkRestart,
    /// SIGKILL the transaction coordinator of a partition's transactional.id while that
    /// partition's commit is in flight (its EndTxn held by the fault proxy), as `timing` says.
    KillCoordinatorMidCommit { timing: KillTiming },
    /// Start every broker that is down and wait until every partition has its full ISR back.
    RestartDownBrokers,
}

/// When a stall stops its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StallAt {
    /// At a random instant (SIGSTOP from the suite).
    Anywhere,
    /// From inside its processor, in the middle of an open transaction whose first outputs
    /// have been sent (SIGUSR1: the instance stops itself).
    InTransaction,
    /// Right after a commit, before the next transaction begins (SIGUSR2: the instance stops
    /// itself from its transaction hook). Nothing of it is open for the coordinator to abort
    /// at the transaction timeout, so its producer is not fenced by that: on waking, its
    /// first transaction (timers alone, under the timers workload, whose timers are all due
    /// by then) can only be refused by the group generation its offsets carry.
    AfterCommit,
}

/// Which broker a network fault aims at, resolved when the step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The transaction coordinator of a random input partition's transactional.id (every
    /// broker in per-consumer mode, whose ids are the instances' own).
    TxnCoordinator,
    /// The leader of a random output partition whose transaction coordinator is another
    /// broker, when there is one.
    OutputLeader,
    /// The coordinator of the application's consumer group.
    GroupCoordinator,
    /// This broker.
    Node(i32),
}

/// How the aimed coordinator kill (`Net::kill_coordinator_mid_commit`) times its SIGKILL against the held EndTxn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KillTiming {
    /// Kill, then release the held EndTxn into the dead broker: the coordinator never sees
    /// it; the transaction stays open until the failed-over coordinator aborts it.
    BeforeEndTxn,
    /// Release the EndTxn, then kill after this many milliseconds: the coordinator may have
    /// written nothing, `PrepareCommit`, or the markers too — the client never hears.
    AfterEndTxn(u64),
}

/// A network fault (see `kafka_eos_testkit::broker::FaultProxy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetFault {
    /// Hold the next `count` connections to the target that send one of `apis` (only
    /// requests with a transactional.id if `transactional_only`).
    Hold { target: Target, apis: &'static [i16], transactional_only: bool, count: u32 },
    /// Cut the next connection to the target that sends one of `apis`, as `how` says; the
    /// target refuses connections until healed.
    CutOn { target: Target, apis: &'static [i16], how: OnRequest },
    /// Every request to the target waits 50–500 ms.
    Slow { target: Target },
    /// Heal every broker: release what is held, clear every fault.
    HealAll,
}

/// One step: an action at a virtual time; `fault` says whether it counts as an injected
/// fault (a restart that completes a fault, or a scale-down setting up the next, does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub at: Duration,
    pub action: Action,
    pub fault: bool,
}

/// A scenario's schedule.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Instances started before the first step.
    pub instances: usize,
    /// The instances' `--abort-one-in` (0: no deliberate aborts).
    pub abort_one_in: u32,
    /// The instances' `--zombie-for-ms` (see [`Scenario::ZombieReconcile`]).
    pub zombie_for: Option<Duration>,

    pub steps: Vec<Step>,
    /// Virtual length of the run: the input is spread over it.
    pub duration: Duration,
}

/// What a plan depends on besides the scenario.
#[derive(Debug, Clone)]
pub(crate) struct PlanParams {
    /// 1 normally; `--soak` multiplies every fault count by this.
    pub scale: usize,
    /// Broker node ids.
    pub nodes: Vec<i32>,
    /// How long a stall lasts.
    pub stall: Duration,
    /// The instances' consumer session timeout.
    pub session: Duration,
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Appends steps separated by random gaps; keeps the running virtual time.
struct Schedule<'a> {
    rng: &'a mut Rng,
    now: Duration,
    steps: Vec<Step>,
}

impl Schedule<'_> {
    fn after(&mut self, lo: u64, hi: u64, action: Action, fault: bool) {
        self.now += self.rng.between(secs(lo), secs(hi));
        self.steps.push(Step { at: self.now, action, fault });
    }
    fn after_exactly(&mut self, d: Duration, action: Action, fault: bool) {
        self.now += d;
        self.steps.push(Step { at: self.now, action, fault });
    }
}

impl Plan {
    /// The schedule of `scenario`. Gaps are long enough for the previous fault's effects
    /// (a session timeout of 6 s, a broker restart) to be under way, and short enough that
    /// faults overlap with the recovery from the previous one now and then.
    pub(crate) fn new(scenario: Scenario, p: &PlanParams, rng: &mut Rng) -> Plan {
        let scale = p.scale.max(1);
        let mut s = Schedule { rng, now: Duration::ZERO, steps: Vec::new() };
        let (mut instances, mut abort_one_in, mut zombie_for) = (2, 0, None);
        match scenario {
            Scenario::ProcessKill => {
                for _ in 0..10 * scale {
                    s.after(2, 6, Action::KillInstance, true);
                }
            }
            Scenario::ProcessBounce => {
                for _ in 0..5 * scale {
                    s.after(3, 7, Action::BounceInstance, true);
                }
            }
            Scenario::BrokerKill | Scenario::BrokerBounce => {
                let hard = scenario == Scenario::BrokerKill;
                for _ in 0..scale {
                    for node in s.rng.shuffled(p.nodes.clone()) {
                        s.after(4, 8, Action::BrokerDown { node, hard }, true);
                        // Due back 3-12 s later. A crashed broker whose controller has not
                        // fenced it yet (broker.session.timeout.ms 9 s) is restarted once it
                        // has (`Run::broker_up`, unless `restart_unfenced`); a stopped one
                        // at once: its controlled shutdown moved its leaders already.
                        s.after(3, 12, Action::BrokerUp { node }, false);
                    }
                }
            }
            Scenario::RebalanceStorm => {
                instances = 1;
                let mut current = 1;
                for round in 0..scale {
                    let targets: Vec<usize> = if round == 0 {
                        vec![3, 1, 2]
                    } else {
                        (0..3)
                            .map(|_| {
                                let choices: Vec<usize> = (1..=3).filter(|n| *n != current).collect();
                                current = choices[s.rng.below(choices.len())];
                                current
                            })
                            .collect()
                    };
                    for n in targets {
                        current = n;
                        s.after(6, 12, Action::Scale(n), true);
                    }
                }
            }
            Scenario::RandomAborts => {
                abort_one_in = 3;
                s.now = secs(30 * scale as u64);
            }
            Scenario::Stall => {
                // Per round: a stall at a random instant, one inside an open transaction and
                // one right after a commit, each with a second instance that takes the
                // partitions over (fencing by the new owner's init_transactions, or by the
                // group generation); then one inside a transaction with the stalled instance
                // alone (no takeover: the coordinator aborts the transaction on its timeout
                // and the instance must recover by itself).
                for round in 0..scale {
                    if round > 0 {
                        s.after(2, 4, Action::Scale(2), false);
                    }
                    let stalls = [
                        (StallAt::Anywhere, false),
                        (StallAt::InTransaction, false),
                        (StallAt::AfterCommit, false),
                        (StallAt::InTransaction, true),
                    ];
                    for (at, alone) in stalls {
                        if alone {
                            s.after(2, 4, Action::Scale(1), false);
                        }
                        s.after(4, 8, Action::Stall { at }, true);
                        s.after_exactly(p.stall, Action::Resume, false);
                    }
                }
            }
            Scenario::FinancialClose => {
                // SIGKILLs, a broker crash in the middle (when the suite runs the cluster),
                // more SIGKILLs: state restored from changelogs after every kill, and the
                // changelogs' partitions move with the broker's leaderships.
                for half in 0..2 {
                    for _ in 0..4 * scale {
                        s.after(2, 5, Action::KillInstance, true);
                    }
                    if half == 0 && !p.nodes.is_empty() {
                        let node = p.nodes[s.rng.below(p.nodes.len())];
                        s.after(2, 4, Action::BrokerDown { node, hard: true }, true);
                        s.after(3, 8, Action::BrokerUp { node }, false);
                    }
                }
            }
            Scenario::EndTxnHeld | Scenario::ProduceHeld => {
                let (apis, transactional_only, target): (&'static [i16], bool, Target) =
                    if scenario == Scenario::EndTxnHeld {
                        (&[api::END_TXN], false, Target::TxnCoordinator)
                    } else {
                        (&[api::PRODUCE], true, Target::OutputLeader)
                    };
                for _ in 0..3 * scale {
                    let hold = NetFault::Hold { target, apis, transactional_only, count: 1 };
                    s.after(3, 5, Action::Net(hold), true);
                    // Past the commit call's and the records' timeout (the transaction
                    // timeout, 8 s) and the coordinator's own abort of it.
                    s.after_exactly(secs(12), Action::Net(NetFault::HealAll), false);
                }
            }
            Scenario::CoordinatorCut => {
                for round in 0..3 * scale {
                    let how = if round % 3 == 1 { OnRequest::ResetBefore } else { OnRequest::CutAfter };
                    let cut = NetFault::CutOn { target: Target::TxnCoordinator, apis: &[api::END_TXN], how };
                    s.after(3, 5, Action::Net(cut), true);
                    s.after_exactly(secs(8), Action::Net(NetFault::HealAll), false);
                }
            }
            Scenario::CoordinatorKill => {
                for round in 0..3 * scale {
                    let timing = match round % 3 {
                        0 => KillTiming::BeforeEndTxn,
                        _ => KillTiming::AfterEndTxn(s.rng.below(31) as u64),
                    };
                    s.after(3, 6, Action::KillCoordinatorMidCommit { timing }, true);
                    s.after(3, 8, Action::RestartDownBrokers, false);
                }
            }
            Scenario::GroupCoordinatorCut | Scenario::MemberCut | Scenario::ZombieReconcile => {
                // Every member's group connection, or the first one's alone.
                let count = if scenario == Scenario::GroupCoordinatorCut { u32::MAX } else { 1 };
                if scenario == Scenario::ZombieReconcile {
                    // Told 20 s late: after the heal below, before the next cut.
                    zombie_for = Some(secs(20));
                }
                for round in 0..2 * scale {
                    if round > 0 {
                        // The next zombie only once the last one's tasks have been told
                        // (its session, then the delay, after its cut).
                        s.now += zombie_for.unwrap_or_default().saturating_sub(secs(5));
                    }
                    let hold = NetFault::Hold {
                        target: Target::GroupCoordinator,
                        apis: &api::GROUP,
                        transactional_only: false,
                        count,
                    };
                    // Long enough after the last heal for the group to be stable again, with
                    // transactions flowing: a hold during the rejoin would hit no transaction.
                    s.after(8, 12, Action::Net(hold), true);
                    s.after_exactly(p.session + secs(5), Action::Net(NetFault::HealAll), false);
                }
            }
            Scenario::PostgresSink | Scenario::RedisSink | Scenario::RedisNoDedup | Scenario::SinkKill => {
                // Instance crashes mid-batch, the server's crash between them, more crashes.
                for half in 0..2 {
                    for _ in 0..3 * scale {
                        s.after(2, 5, Action::KillInstance, true);
                    }
                    if half == 0 {
                        s.after(2, 4, Action::SinkRestart, true);
                    }
                }
            }
            Scenario::SlowBroker => {
                let node = p.nodes.get(s.rng.below(p.nodes.len().max(1))).copied().unwrap_or(1);
                s.after(1, 2, Action::Net(NetFault::Slow { target: Target::Node(node) }), true);
                s.after_exactly(secs(30 * scale as u64), Action::Net(NetFault::HealAll), false);
            }
        }
        let tail = secs(5);
        Plan { instances, abort_one_in, zombie_for, duration: s.now + tail, steps: s.steps }
    }

    /// Faults the plan injects (deliberate aborts are counted by the instances instead).
    #[cfg(test)]
    pub(crate) fn faults(&self) -> usize {
        self.steps.iter().filter(|s| s.fault).count()
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
