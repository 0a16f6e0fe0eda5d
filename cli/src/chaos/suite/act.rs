//! One step of a plan: the fault it injects (an instance killed, stalled or bounced, a
//! broker down or back, a network fault, the sink's server crashed), marked on the timeline.

use std::time::{Duration, Instant};

use super::{wait_full_isr, Run, STOP_TIMEOUT};
use crate::chaos::net::Scope;
use crate::chaos::plan::{Action, StallAt};
use kafka_eos::Guarantee;
use kafka_eos_testkit::process::Signal;

impl Run<'_, '_> {
    pub(super) fn act(&mut self, action: Action) -> Result<(), String> {
        tracing::info!(?action, "chaos step");
        self.mark(&format!("{action:?}"));
        // Faults hit an instance that is processing (see Fleet::pick_busy), waiting for one
        // as long as a rebalance after a crash may take (session timeout, then the join).
        let pick_timeout = Duration::from_secs(60);
        match action {
            Action::KillInstance | Action::BounceInstance => {
                let Some(idx) = self.fleet.pick_within(self.rng, pick_timeout) else {
                    return Err(format!("no running instance to {action:?} within {pick_timeout:?}"));
                };
                let id = self.fleet.id(idx);
                self.mark(&format!("  instance {id}"));
                if action == Action::KillInstance {
                    self.fleet.kill(idx);
                } else {
                    self.fleet.terminate(idx, STOP_TIMEOUT);
                }
                self.fleet.start()?;
            }
            Action::BrokerDown { node, hard } => {
                let cluster = self.cluster.as_mut().ok_or("a broker scenario needs the suite's own cluster")?;
                let r = if hard { cluster.kill_node(node) } else { cluster.stop_node(node) };
                r.map_err(|e| format!("taking broker {node} down: {e}"))?;
                if hard {
                    self.crashed_at.insert(node, Instant::now());
                }
            }
            Action::BrokerUp { node } => self.broker_up(node)?,
            Action::RestartDownBrokers => {
                let cluster = self.cluster.as_mut().ok_or("a broker scenario needs the suite's own cluster")?;
                let down: Vec<i32> = cluster.node_ids().into_iter().filter(|&n| !cluster.is_running(n)).collect();
                for node in down {
                    self.broker_up(node)?;
                }
            }
            Action::Scale(n) => self.fleet.scale_to(n, STOP_TIMEOUT)?,
            Action::Stall { at } => {
                let Some(idx) = self.fleet.pick_within(self.rng, pick_timeout) else {
                    return Err(format!("no running instance to stall within {pick_timeout:?}"));
                };
                let id = self.fleet.id(idx);
                self.mark(&format!("  instance {id}"));
                let before = self.fleet.status_of(id).and_then(|s| s.summary).unwrap_or_default();
                let asked = match at {
                    StallAt::Anywhere => None,
                    StallAt::InTransaction => Some((Signal::SIGUSR1, "processed no record")),
                    StallAt::AfterCommit => Some((Signal::SIGUSR2, "committed nothing")),
                };
                match asked {
                    None => self.fleet.stop_now(idx),
                    Some((signal, what)) => {
                        if !self.fleet.stop_itself(idx, signal, Duration::from_secs(30)) {
                            self.note(format!("instance {id} {what} within 30 s of {signal:?}: stopped where it was"));
                        }
                    }
                }
                self.zombies.push((id, before));
            }
            Action::Resume => self.fleet.resume_all(),
            Action::SinkRestart => {
                let server = self.sink.as_mut().ok_or("a sink scenario without its server")?;
                server.crash(Duration::from_secs(2))?;
            }
            Action::Net(_) | Action::KillCoordinatorMidCommit { .. } => {
                let cluster = self.cluster.as_deref_mut().ok_or("a network scenario needs the suite's own cluster")?;
                let scope = Scope {
                    client: self.ctx.client,
                    app: &self.app,
                    input: &self.input_topic,
                    output: &self.output_topic,
                    partitions: self.ctx.cfg.partitions,
                    per_partition: self.cell.guarantee == Guarantee::ExactlyOncePerPartition,
                };
                let what = match action {
                    Action::KillCoordinatorMidCommit { timing } => {
                        // A commit every commit interval per partition: 20 s is plenty.
                        let wait = Duration::from_secs(20);
                        let (killed, what) =
                            self.net.kill_coordinator_mid_commit(cluster, &scope, timing, wait, self.rng)?;
                        if let Some(node) = killed {
                            self.crashed_at.insert(node, Instant::now());
                        }
                        what
                    }
                    Action::Net(fault) => self.net.apply(cluster, &scope, fault, self.rng)?,
                    _ => unreachable!("matched above"),
                };
                self.mark(&format!("  {what}"));
            }
        }
        self.mark("  done");
        Ok(())
    }

    /// Starts broker `node` (a no-op if it runs) and waits until every partition has its
    /// full ISR back; a slow resync is noted, not an error.
    ///
    /// A crashed broker is restarted only once the controller has fenced it (metadata no
    /// longer lists it, so its leaderships have moved), unless the suite runs with
    /// `restart_unfenced`: back within its broker session, it would lead its partitions
    /// again at the same leader epoch, and a transaction coordinator among them loads its
    /// log past the high watermark and acts on what it never replicated — the broker-side
    /// split transaction of `docs/reliability.md`. A graceful stop fenced the broker
    /// already: the wait ends at once. With `restart_delay`, a crashed broker comes back
    /// that long after its crash and no sooner, whatever the metadata says: the
    /// supervisor's recipe of `docs/operations.md`, tested as a supervisor applies it.
    fn broker_up(&mut self, node: i32) -> Result<(), String> {
        let cfg = self.ctx.cfg;
        let crashed_at = self.crashed_at.remove(&node);
        if let (Some(delay), Some(at)) = (cfg.restart_delay, crashed_at) {
            self.pause((at + delay).saturating_duration_since(Instant::now()))?;
            self.mark(&format!("  {delay:?} after the crash, as a supervisor's restart delay"));
        }
        let cluster = self.cluster.as_mut().ok_or("a broker scenario needs the suite's own cluster")?;
        if !cfg.restart_unfenced && cfg.restart_delay.is_none() && !cluster.is_running(node) {
            let waited = Instant::now();
            let fenced = cluster.wait_ready(Duration::from_secs(60));
            match fenced {
                Ok(()) => self.mark(&format!("  fenced by the controller {:.1?} later", waited.elapsed())),
                Err(e) => {
                    let e = e.to_string();
                    let first = e.lines().next().unwrap_or_default();
                    self.note(format!(
                        "broker {node} not fenced within 60 s of the restart's turn, restarted anyway: {first}"
                    ));
                    self.mark("  not fenced within 60 s: restarted anyway");
                }
            }
        }
        let cluster = self.cluster.as_mut().ok_or("a broker scenario needs the suite's own cluster")?;
        cluster.start_node(node).map_err(|e| format!("restarting broker {node}: {e}"))?;
        let started = Instant::now();
        if let Err(e) = wait_full_isr(self.ctx.client, Duration::from_secs(120)) {
            self.note(format!("after broker {node} restarted: {e}"));
        } else {
            tracing::info!(node, elapsed = ?started.elapsed(), "replicas back in sync");
        }
        Ok(())
    }
}
