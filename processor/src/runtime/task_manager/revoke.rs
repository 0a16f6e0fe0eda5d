//! Revocation: the revoked (or lost) partitions leave the routes and their tasks give them
//! up, committing what they collected (aborting it if lost). It runs inside librdkafka's
//! rebalance callback, which the whole group's rebalance waits for, so every wait on a task
//! is bounded and set up so that the task can answer in time: its interrupt is set before
//! the revocation is sent.

use std::collections::BTreeMap;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};

use super::start::send_bounded;
use super::{to_tpl, TaskManager};
use crate::config::Guarantee;
use crate::partition::TopicPartition;
use crate::runtime::protocol::{RevokeReply, TaskMsg};

impl TaskManager {
    /// Takes `partitions` from their tasks: each task's interrupt is set first, then the
    /// revocation sent and its answer awaited, bounded (see below); records waiting for room
    /// are dropped. Lost partitions are aborted at once and nothing is committed for them.
    pub(crate) fn on_revoke<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        partitions: Vec<TopicPartition>,
        lost: bool,
    ) {
        if let Some((fault, delay)) =
            self.shared.cfg.fault.as_ref().and_then(|f| Some((f, f.lost_relay_delay?))).filter(|_| lost)
        {
            tracing::warn!(?partitions, ?delay, "fault injection: relaying the lost partitions late");
            fault.set_relaying_lost(true);
            std::thread::sleep(delay);
            fault.set_relaying_lost(false);
        }
        tracing::info!(?partitions, lost, "partitions revoked");
        self.shared.shutdown.health_state().revoked(&partitions);
        let deadline = self.revoke_deadline();
        let mut by_task: BTreeMap<u64, Vec<TopicPartition>> = BTreeMap::new();
        let mut paused = Vec::new();
        {
            let mut reg = self.registry();
            for tp in partitions {
                // Records waiting for room were never given to the task: the next owner
                // reads them again from the committed offset.
                reg.pending.remove(&tp);
                if reg.unstarted.remove(&tp).is_some() {
                    self.note_served(&tp);
                }
                if reg.paused.remove(&tp) {
                    paused.push((tp.clone(), 0));
                }
                if let Some(id) = reg.routes.remove(&tp) {
                    by_task.entry(id).or_default().push(tp);
                }
            }
        }
        // An application pause is a flag on librdkafka's partition object, which can outlive
        // an eager reassignment of the same partition: lift it, so that a partition paused
        // now cannot stay silent once it is assigned again.
        if !paused.is_empty() {
            if let Err(e) = consumer.resume(&to_tpl(&paused)) {
                tracing::warn!(error = %e, "resuming revoked partitions failed");
            }
        }
        // A task busy retrying a failing batch reads its inbox only once the batch is done
        // with: the interrupt, set first, ends the retries by the task's own deadline — at
        // once if lost (the partitions are someone else's already); otherwise after the
        // shutdown timeout at most, so that the group's rebalance, which waits for this
        // callback, is not held up for a whole task timeout.
        let task_deadline = if lost { Instant::now() } else { self.task_deadline(deadline) };
        let mut waiting = Vec::new();
        for (id, tps) in by_task {
            let (reply_tx, reply_rx) = sync_channel(1);
            let reg = self.registry();
            let Some(task) = reg.tasks.get(&id) else { continue };
            task.interrupt.revoke(lost, task_deadline);
            if !send_bounded(&task.tx, TaskMsg::Revoke { partitions: tps, lost, reply: reply_tx }, deadline) {
                tracing::error!(
                    task = id,
                    "task did not take its revocation before the deadline; abandoning it to fencing"
                );
            }
            waiting.push((id, reply_rx));
        }
        let mut acked = Vec::new();
        let per_partition = self.shared.cfg.guarantee == Guarantee::ExactlyOncePerPartition;
        // A per-partition task that is still busy past its interrupt deadline plus the
        // longest a commit may take ([`crate::txn::watchdog::commit_bound`]) is hung: librdkafka's
        // send_offsets_to_transaction can block forever once the group coordinator's broker
        // has left the metadata (confluentinc/librdkafka#5456, #5511). The call's watchdog
        // (crate::txn::watchdog) lets the task go on; this is the second line: abandon the
        // task to fencing rather than hold the whole group's rebalance for the task timeout.
        // Workers are waited for until the deadline: they are long-lived, and their watchdog
        // frees them.
        let call_bound = crate::txn::watchdog::commit_bound(&self.shared.cfg);
        let reply_by = if per_partition { deadline.min(task_deadline + call_bound) } else { deadline };
        for (id, reply_rx) in waiting {
            let reply: Option<RevokeReply> =
                reply_rx.recv_timeout(reply_by.saturating_duration_since(Instant::now())).ok();
            match reply {
                Some(r) => {
                    acked.extend(r.acked_offsets);
                    // A per-partition task ends with its last partition (co-partitioned
                    // inputs may keep some).
                    let mut reg = self.registry();
                    if per_partition && !reg.owns_partitions(id) {
                        if let Some(h) = reg.tasks.remove(&id) {
                            drop(reg);
                            let _ = h.join.join();
                        }
                    }
                }
                None => {
                    tracing::error!(
                        task = id,
                        "task did not finish its transaction in time (hung in a librdkafka call, or past the task or shutdown timeout); abandoning it to fencing: the partitions' next owner fences its producer"
                    );
                    if per_partition {
                        self.registry().tasks.remove(&id);
                    }
                }
            }
        }
        if !lost && !acked.is_empty() {
            // Stored first: librdkafka then never commits an older stored offset over this
            // commit as it removes the partitions, and retries it there if this one fails.
            let _ = consumer.store_offsets(&to_tpl(&acked));
            if let Err(e) = consumer.commit(&to_tpl(&acked), CommitMode::Sync) {
                tracing::warn!(error = %e, "committing offsets on revocation failed; the next owner may reprocess (at-least-once)");
            }
        }
    }

    /// The deadline by which an interrupted task must let go of its batch, when this thread
    /// waits for it until `wait`: the shutdown timeout from now at most, and four fifths of
    /// the wait at most — the rest is left for the task's abort and reply, so that it
    /// answers before this thread gives up on it.
    pub(crate) fn task_deadline(&self, wait: Instant) -> Instant {
        let now = Instant::now();
        (now + self.shared.cfg.shutdown_timeout).min(now + wait.saturating_duration_since(now) * 4 / 5)
    }

    /// A revocation's deadline: the task timeout, or the shutdown deadline once shutting down.
    fn revoke_deadline(&self) -> Instant {
        let task = Instant::now() + self.shared.cfg.task_timeout;
        match *self.shutdown_deadline.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(d) => d.min(task),
            None => task,
        }
    }
}
