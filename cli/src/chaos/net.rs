//! Network faults: which broker a fault aims at, and the fault itself, through the fault
//! proxy of the suite's cluster (`kafka_eos_testkit::broker::FaultProxy`).
//!
//! Targets are resolved when the step runs, because coordinators and leaders move (a
//! broker restart in an earlier scenario moves leaderships). A coordinator is found with
//! `LocalCluster::coordinator` (a FindCoordinator request to a broker's direct listener,
//! checked against Kafka's placement rule by a testkit test); a partition leader from
//! metadata.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::plan::{KillTiming, NetFault, Target};
use super::rng::Rng;
use kafka_eos_testkit::admin;
use kafka_eos_testkit::broker::proxy::ProxyStats;
use kafka_eos_testkit::broker::{CoordinatorKind, LocalCluster};
use kafka_eos_testkit::process::{self, Signal};

/// What a network fault needs to know about the scenario.
pub(crate) struct Scope<'a> {
    pub client: &'a admin::Client,
    pub app: &'a str,
    pub input: &'a str,
    pub output: &'a str,
    pub partitions: i32,
    /// Per-partition transactional ids (`Guarantee::ExactlyOncePerPartition`); per-consumer mode's
    /// ids carry random instance ids the suite does not know.
    pub per_partition: bool,
}

impl Scope<'_> {
    /// The transactional.id of an input partition, as the runtime builds it
    /// (`PipelineConfig::partition_transactional_id`: `<app>:<topic>:<partition>`).
    fn transactional_id(&self, partition: i32) -> String {
        format!("{}:{}:{}", self.app, self.input, partition)
    }

    fn leaders(&self, topic: &str) -> Result<Vec<(i32, i32)>, String> {
        let probe: BaseConsumer = self.client.config().set("log_level", "2").create().map_err(|e| e.to_string())?;
        let md = probe.fetch_metadata(Some(topic), Duration::from_secs(10)).map_err(|e| format!("metadata: {e}"))?;
        let t = md.topics().first().ok_or("no metadata for the output topic")?;
        Ok(t.partitions().iter().map(|p| (p.id(), p.leader())).collect())
    }
}

/// The network faults of a running scenario.
pub(crate) struct Net {
    /// Nodes whose trigger the last fault armed, with their counters before it.
    armed: Vec<(i32, ProxyStats)>,
    /// Faults whose trigger never fired (their request never came before the heal).
    pub unfired: u64,
    /// The aimed kill after an `EndTxn` freezes the other brokers from the release to the
    /// kill, so that whatever the coordinator appends (a `PrepareCommit`) is not replicated.
    unreplicated: bool,
}

impl Net {
    pub(crate) fn new(unreplicated: bool) -> Net {
        Net { armed: Vec::new(), unfired: 0, unreplicated }
    }

    /// Injects `fault`; returns what it did, for the timeline.
    pub(crate) fn apply(
        &mut self,
        cluster: &LocalCluster,
        scope: &Scope<'_>,
        fault: NetFault,
        rng: &mut Rng,
    ) -> Result<String, String> {
        let proxy = cluster.proxy().ok_or("a network scenario needs the suite's cluster with its fault proxy")?;
        let (nodes, why) = match fault {
            NetFault::Hold { target, .. } | NetFault::CutOn { target, .. } | NetFault::Slow { target } => {
                self.resolve(cluster, scope, target, rng)?
            }
            NetFault::HealAll => {
                // A trigger fired if it held or cut a connection since it was armed.
                let fired = self.armed.is_empty()
                    || self.armed.iter().any(|(n, before)| {
                        let now = proxy.stats(*n);
                        now.held > before.held || now.cut > before.cut
                    });
                let nodes: Vec<i32> = self.armed.iter().map(|(n, _)| *n).collect();
                let what = if fired {
                    "healed".to_string()
                } else {
                    self.unfired += 1;
                    format!("healed; the trigger on node(s) {nodes:?} never fired")
                };
                self.armed.clear();
                proxy.heal_all();
                return Ok(what);
            }
        };
        let before: Vec<(i32, ProxyStats)> = nodes.iter().map(|&n| (n, proxy.stats(n))).collect();
        for &node in &nodes {
            match fault {
                NetFault::Hold { apis, transactional_only, count, .. } => {
                    proxy.hold_next(node, apis, transactional_only, count)
                }
                NetFault::CutOn { apis, how, .. } => proxy.cut_on(node, apis, how),
                NetFault::Slow { .. } => proxy.jitter(node, Duration::from_millis(50), Duration::from_millis(500)),
                NetFault::HealAll => {}
            }
        }
        if !matches!(fault, NetFault::Slow { .. }) {
            self.armed = before;
        }
        Ok(format!("node(s) {nodes:?} ({why})"))
    }

    /// The brokers `target` names now, and why.
    fn resolve(
        &self,
        cluster: &LocalCluster,
        scope: &Scope<'_>,
        target: Target,
        rng: &mut Rng,
    ) -> Result<(Vec<i32>, String), String> {
        let coordinator = |p: i32| {
            let id = scope.transactional_id(p);
            cluster.coordinator(&id, CoordinatorKind::Transaction).map_err(|e| format!("coordinator of {id}: {e}"))
        };
        Ok(match target {
            Target::Node(n) => (vec![n], "chosen at random".into()),
            Target::TxnCoordinator if !scope.per_partition => {
                (cluster.node_ids(), "every broker: per-consumer transactional ids are the instances' own".into())
            }
            Target::TxnCoordinator => {
                let p = rng.below(scope.partitions.max(1) as usize) as i32;
                (vec![coordinator(p)?], format!("transaction coordinator of {}", scope.transactional_id(p)))
            }
            Target::GroupCoordinator => {
                let node = cluster
                    .coordinator(scope.app, CoordinatorKind::Group)
                    .map_err(|e| format!("group coordinator of {}: {e}", scope.app))?;
                (vec![node], format!("group coordinator of {}", scope.app))
            }
            Target::OutputLeader => {
                let leaders = scope.leaders(scope.output)?;
                let mut apart = Vec::new();
                if scope.per_partition {
                    for &(p, leader) in &leaders {
                        if coordinator(p)? != leader {
                            apart.push((p, leader));
                        }
                    }
                }
                let (pool, note) = if apart.is_empty() {
                    (&leaders, "its coordinator may be the same broker")
                } else {
                    (&apart, "its transaction coordinator is another broker")
                };
                let (p, leader) =
                    *pool.get(rng.below(pool.len().max(1))).ok_or("the output topic has no partitions")?;
                (vec![leader], format!("leader of {}-{p}; {note}", scope.output))
            }
        })
    }
}

impl Net {
    /// The aimed coordinator kill: arms a hold on the next EndTxn to the transaction coordinator
    /// of a random input partition (every broker in per-consumer mode), waits up to `wait`
    /// for a commit to reach it, and SIGKILLs that broker mid-commit as `timing` says.
    /// Returns the node killed (`None`: no commit came, nothing was killed) and a note for
    /// the timeline. The broker is restarted by a later step.
    pub(crate) fn kill_coordinator_mid_commit(
        &mut self,
        cluster: &mut LocalCluster,
        scope: &Scope<'_>,
        timing: KillTiming,
        wait: Duration,
        rng: &mut Rng,
    ) -> Result<(Option<i32>, String), String> {
        let (nodes, why) = self.resolve(cluster, scope, Target::TxnCoordinator, rng)?;
        let proxy =
            cluster.proxy().ok_or("the aimed coordinator kill needs the suite's cluster and its fault proxy")?;
        let before: Vec<(i32, u64)> = nodes.iter().map(|&n| (n, proxy.stats(n).held)).collect();
        for &n in &nodes {
            proxy.hold_next(n, &[kafka_eos_testkit::broker::proxy::api::END_TXN], false, 1);
        }
        let deadline = std::time::Instant::now() + wait;
        let fired = loop {
            if let Some(&(n, _)) = before.iter().find(|(n, held)| proxy.stats(*n).held > *held) {
                break Some(n);
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let Some(node) = fired else {
            proxy.heal_all();
            self.unfired += 1;
            return Ok((None, format!("no EndTxn reached node(s) {nodes:?} ({why}) within {wait:?}: nothing killed")));
        };
        // The other armed nodes stop holding; the fired node's EndTxn is still held.
        for &(n, _) in before.iter().filter(|(n, _)| *n != node) {
            proxy.heal(n);
        }
        let mut also = "";
        match timing {
            KillTiming::BeforeEndTxn => {
                cluster.kill_node(node).map_err(|e| format!("killing broker {node}: {e}"))?;
                cluster.proxy().expect("checked above").heal(node);
            }
            KillTiming::AfterEndTxn(ms) => {
                // SIGSTOPped for milliseconds, the followers miss nothing the controller sees.
                let frozen: Vec<u32> = if self.unreplicated {
                    cluster.node_ids().into_iter().filter(|&n| n != node).filter_map(|n| cluster.pid(n)).collect()
                } else {
                    Vec::new()
                };
                for &pid in &frozen {
                    let _ = process::signal(pid, Signal::SIGSTOP);
                }
                proxy.heal(node);
                std::thread::sleep(Duration::from_millis(ms));
                let killed = cluster.kill_node(node).map_err(|e| format!("killing broker {node}: {e}"));
                for &pid in &frozen {
                    let _ = process::signal(pid, Signal::SIGCONT);
                }
                killed?;
                if !frozen.is_empty() {
                    also = ", the others SIGSTOPped meanwhile";
                }
            }
        }
        Ok((Some(node), format!("node {node} SIGKILLed {timing:?}{also} ({why})")))
    }
}
