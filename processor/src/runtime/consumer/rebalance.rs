//! The rebalance callbacks, on the consumer's poll thread: start the tasks of assigned
//! partitions, let revoked ones commit what they collected (see the parent module's
//! "Rebalances"), and apply the assignment with the sink's resume offsets.

use std::collections::BTreeMap;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use super::Rebalancer;
use crate::config::Guarantee;
use crate::error::Error;
use crate::partition::TopicPartition;
use crate::runtime::limits;
use crate::runtime::protocol::{RevokeReply, TaskMsg};
use crate::runtime::registry::{
    by_task, give_up_start, retry_later, send_bounded, spawn_partition_task, to_tpl, wait_ready, Ready, Unstarted,
};
use crate::runtime::task::Resume;

impl Rebalancer {
    fn on_assign(&self, partitions: Vec<TopicPartition>) {
        let shared = &self.shared;
        shared.shutdown.stats().rebalances.inc();
        crate::metrics::rebalance(&shared.cfg.application_id);
        tracing::info!(?partitions, "partitions assigned");
        shared.shutdown.health_state().assigned(&partitions);
        let deadline = Instant::now() + shared.cfg.task_timeout;
        if shared.cfg.guarantee == Guarantee::ExactlyOnce {
            let groups = by_task(&shared.cfg, partitions);
            // A producer per partition: say so before the process runs out of open files
            // (a bound above the limit, or none where the limit is unknown).
            let (producers, mut room) = {
                let reg = self.registry();
                let wanted = reg.tasks.len() + reg.unstarted.len() + groups.len();
                (
                    wanted.min(shared.max_tasks.unwrap_or(usize::MAX)),
                    shared.max_tasks.map(|b| b.saturating_sub(reg.tasks.len())),
                )
            };
            if let Some(m) = limits::over_limit(producers, shared.brokers, limits::open_files_limit()) {
                tracing::error!("{m}");
            }
            let mut pending = Vec::new();
            let mut unserved = Vec::new();
            for group in groups {
                // Co-partitioned inputs: partition n of another input may be running
                // already (an incremental protocol assigns in steps): its task takes it.
                let sharing = self.registry().task_sharing(&shared.cfg, &group[0]);
                if let Some(id) = sharing {
                    if let Err(e) = self.hand_over(id, group, deadline) {
                        return self.set_fatal(e);
                    }
                    continue;
                }
                // Past the task bound the partition stays assigned but unserved (paused
                // once the assignment is applied), until a revocation makes room.
                if room == Some(0) {
                    unserved.extend(group);
                    continue;
                }
                if let Some(r) = room.as_mut() {
                    *r -= 1;
                }
                let id = self.registry().next_id();
                match spawn_partition_task(shared, id, &group) {
                    Ok((handle, ready)) => pending.push((id, group, handle, ready)),
                    Err(e) => return self.set_fatal(e),
                }
            }
            for (id, group, handle, ready) in pending {
                match wait_ready(ready, deadline) {
                    Ok(resume) => {
                        self.resume_at(resume);
                        let mut reg = self.registry();
                        for tp in group {
                            reg.routes.insert(tp, id);
                        }
                        reg.tasks.insert(id, handle);
                    }
                    Err(e) if retry_later(&e) => {
                        // One partition's trouble must not stop the others: paused once
                        // assigned, retried from the loop (`start_unstarted`).
                        tracing::warn!(partitions = ?group, error = %e, "the partition's producer cannot be initialised; retrying it while the others run");
                        let previous = give_up_start(handle);
                        let mut reg = self.registry();
                        for tp in group {
                            self.note_unserved(&tp, &e.to_string());
                            reg.unstarted.insert(tp, Unstarted::new(e.to_string()).after(previous.clone()));
                        }
                    }
                    Err(e) => self.set_fatal(e),
                }
            }
            if let (false, Some(bound)) = (unserved.is_empty(), shared.max_tasks) {
                let configured = shared.cfg.max_partition_tasks.is_some();
                tracing::error!("{}", limits::unserved_message(unserved.len(), bound, shared.brokers, configured));
                let mut reg = self.registry();
                for tp in unserved {
                    self.leave_waiting(&mut reg, tp, bound);
                }
            }
        } else {
            // Each new partition goes to the worker with the fewest, and stays there while
            // assigned: under incremental rebalancing the others keep theirs. Co-partitioned
            // inputs' partition n go to one worker together (they share its state).
            let mut reg = self.registry();
            let mut load: BTreeMap<u64, usize> = reg.tasks.keys().map(|id| (*id, 0)).collect();
            if load.is_empty() {
                drop(reg);
                return self.set_fatal(Error::Internal("the instance's workers are missing".into()));
            }
            for id in reg.routes.values() {
                *load.entry(*id).or_default() += 1;
            }
            let mut shares: BTreeMap<u64, Vec<TopicPartition>> = BTreeMap::new();
            for group in by_task(&shared.cfg, partitions) {
                let id = match reg.task_sharing(&shared.cfg, &group[0]) {
                    Some(id) => id,
                    None => *load.iter().min_by_key(|(id, n)| (**n, **id)).expect("not empty").0,
                };
                *load.entry(id).or_default() += group.len();
                shares.entry(id).or_default().extend(group);
            }
            let mut replies = Vec::new();
            for (id, share) in shares {
                let (reply, claimed) = sync_channel(1);
                let msg = TaskMsg::Assign { partitions: share.clone(), reply };
                let Some(task) = reg.tasks.get(&id).filter(|h| send_bounded(&h.tx, msg, deadline)) else {
                    drop(reg);
                    return self.set_fatal(Error::Internal("a worker did not accept its assignment".into()));
                };
                replies.push(Ready::new(claimed, task));
                for tp in share {
                    reg.routes.insert(tp, id);
                }
            }
            drop(reg);
            // Only a sink can move where partitions start; without one the workers are not
            // waited for (they never wait for this thread, so waiting would be safe too).
            if shared.cfg.sink.is_some() {
                for claimed in replies {
                    match wait_ready(claimed, deadline) {
                        Ok(resume) => self.resume_at(resume),
                        Err(e) => self.set_fatal(e),
                    }
                }
            }
        }
    }

    /// Hands `partitions` to the running per-partition task `id`, which owns their
    /// co-partitioned siblings already, and waits for its claim.
    fn hand_over(&self, id: u64, partitions: Vec<TopicPartition>, deadline: Instant) -> Result<(), Error> {
        let (reply, claimed) = sync_channel(1);
        let ready = {
            let mut reg = self.registry();
            let msg = TaskMsg::Assign { partitions: partitions.clone(), reply };
            let Some(task) = reg.tasks.get(&id).filter(|h| send_bounded(&h.tx, msg, deadline)) else {
                return Err(Error::Internal(format!("the task of {partitions:?} did not accept them")));
            };
            let ready = Ready::new(claimed, task);
            for tp in partitions {
                reg.routes.insert(tp, id);
            }
            ready
        };
        self.resume_at(wait_ready(ready, deadline)?);
        Ok(())
    }

    fn on_revoke(&self, consumer: &BaseConsumer<Self>, partitions: Vec<TopicPartition>, lost: bool) {
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
        let per_partition = self.shared.cfg.guarantee == Guarantee::ExactlyOnce;
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
            if let Err(e) = consumer.commit(&to_tpl(&acked), CommitMode::Sync) {
                tracing::warn!(error = %e, "committing offsets on revocation failed; the next owner may reprocess (at-least-once)");
            }
        }
    }

    /// The deadline by which an interrupted task must let go of its batch, when this thread
    /// waits for it until `wait`: the shutdown timeout from now at most, and four fifths of
    /// the wait at most — the rest is left for the task's abort and reply, so that it
    /// answers before this thread gives up on it.
    pub(super) fn task_deadline(&self, wait: Instant) -> Instant {
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

    fn resume_at(&self, resume: Resume) {
        self.resume.lock().unwrap_or_else(|p| p.into_inner()).extend(resume);
    }
}

impl ConsumerContext for Rebalancer {
    /// rust-rdkafka's own `rebalance`, with two steps added: after `on_assign` started the
    /// partitions' tasks (which claimed them in the sink), the assignment gets the sink's
    /// offsets, so the partitions are fetched from there and never from the group's offset;
    /// and under incremental protocols (cooperative-sticky, KIP-848) the lists are the
    /// partitions that move, applied with `incremental_assign`/`incremental_unassign` while
    /// every other partition keeps its task.
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let tps = |tpl: &TopicPartitionList| -> Vec<TopicPartition> {
            tpl.elements().iter().map(|e| (self.topic(e.topic()), e.partition())).collect()
        };
        let incremental = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        // Under the incremental protocols librdkafka pauses every assigned partition while
        // this callback runs, so its duration is a pause of the partitions that stay put.
        let started = Instant::now();
        let step = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => "assign",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => "revoke",
            _ => "error",
        };
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if tpl.count() > 0 {
                    self.on_assign(tps(tpl));
                }
                for ((topic, partition), offset) in
                    std::mem::take(&mut *self.resume.lock().unwrap_or_else(|p| p.into_inner()))
                {
                    if let Err(e) = tpl.set_partition_offset(&topic, partition, Offset::Offset(offset)) {
                        tracing::warn!(%topic, partition, offset, error = %e, "cannot set the sink's resume offset");
                    }
                }
                let applied = if incremental { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                if let Err(e) = &applied {
                    // Tasks were started for partitions librdkafka did not take: stop them,
                    // so the registry matches the assignment.
                    tracing::error!(error = %e, "applying the assignment failed: dropping its tasks");
                    self.on_revoke(consumer, tps(tpl), true);
                } else {
                    self.pause_unstarted(consumer);
                }
                applied
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if tpl.count() > 0 {
                    self.on_revoke(consumer, tps(tpl), consumer.assignment_lost());
                }
                if incremental {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                // The registry follows what librdkafka is told: the callback's partitions
                // (incremental) or the whole assignment (eager `unassign`) are dropped.
                tracing::warn!(error = ?other, "rebalance error: giving up the partitions");
                let dropped = if incremental { tps(tpl) } else { self.registry().routes.keys().cloned().collect() };
                self.on_revoke(consumer, dropped, true);
                if incremental {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
        };
        let took = started.elapsed();
        crate::metrics::rebalance_callback(&self.shared.cfg.application_id, step, took);
        tracing::info!(step, partitions = tpl.count(), took_ms = took.as_millis() as u64, "rebalance callback done");
        match result {
            Err(e) => tracing::error!(error = %e, "applying the rebalance failed"),
            // librdkafka paused every assigned partition for the callback and has just
            // resumed them (those this runtime paused stay paused): wake their fetchers.
            Ok(()) if incremental => {
                let reg = self.registry();
                let resumed: Vec<TopicPartition> =
                    reg.routes.keys().filter(|tp| !reg.paused.contains(*tp)).cloned().collect();
                drop(reg);
                self.wake(resumed);
            }
            Ok(()) => {}
        }
    }
}
