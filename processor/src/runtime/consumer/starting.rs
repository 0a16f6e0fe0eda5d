//! Per-partition tasks started without holding up the rebalance callback (issue 11).
//!
//! A new partition's task must initialise its producer (`init_transactions`, which fences
//! the previous owner of the transactional.id and resolves its open transaction) and claim
//! the partition in the sink before any record of the partition is routed to it. That used
//! to happen inside the assign callback, which waited for every new task. Past the
//! transaction slot bound each `init_transactions` waits for a slot
//! ([`crate::runtime::slots`]), and an assignment of 512 partitions took 41.2 s (256:
//! 14.6–16.6 s; 1,024 partitions, one instance on the shared 2-core machine). Under the
//! incremental protocols librdkafka pauses every partition of the instance while the
//! callback runs, and no new partition could begin before the last one was ready.
//!
//! Now the callback spawns the tasks and applies the assignment at once. The new
//! partitions are paused (`pause_unstarted`) and routed nowhere while their task starts.
//! The consumer loop picks up each task as soon as it is ready ([`Rebalancer::finish_starts`]),
//! with no poll in between: it moves the partitions to where they resume (the offset an
//! exactly-once sink stored, or the committed offset, read only now that `init_transactions`
//! has resolved the previous owner's transaction, and read as stable), routes them, and
//! resumes them. A start that fails is retried as an unstarted partition (`recovery.rs`);
//! one that would fail for every partition (configuration, authorisation) stops the
//! pipeline, as before.
//!
//! # Hazards
//! - **Records fetched before the seek.** librdkafka may fetch from the committed offset as
//!   soon as the partition is assigned. Those records find no route and are dropped. The
//!   seek discards whatever is still queued (it bumps the partition's fetch version).
//! - **Fencing order on a revocation.** A start abandoned when its partitions are revoked
//!   would finish its `init_transactions` on its own, possibly *after* the next owner's,
//!   and fence the next owner. So a revocation (not a loss) waits for the start, within the
//!   revocation's deadline, before dropping it. The group cannot hand the partitions to
//!   the next owner before the callback returns. Lost partitions are someone else's
//!   already: the start is dropped at once, as a task of lost partitions would be.
//! - **Co-partitioned siblings.** Partition *n* of another input can arrive while
//!   partition *n*'s task starts: that start is finished first (blocking, as before), then
//!   the task takes its sibling.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::recovery::{seek_each, seek_to_start};
use super::Rebalancer;
use crate::error::Error;
use crate::runtime::registry::{retry_later, to_tpl, wait_ready, Ready, Starting, TaskHandle, Unstarted};
use crate::runtime::task::Resume;
use crate::runtime::TopicPartition;

/// How soon a seek that librdkafka refused is tried again.
const SEEK_RETRY: Duration = Duration::from_millis(200);

impl Rebalancer {
    /// Registers a start under way (the callback, or a retry): its partitions are paused
    /// once the assignment is applied, and [`finish_starts`](Self::finish_starts) takes it
    /// from there.
    pub(super) fn add_start(&self, id: u64, group: Vec<TopicPartition>, handle: TaskHandle, ready: Ready) {
        let since = Instant::now();
        let deadline = since + self.shared.cfg.task_timeout;
        self.registry()
            .starting
            .insert(id, Starting { group, handle, ready, resume: None, seek_after: since, deadline, since });
    }

    /// From the consumer loop: every start that has ended, successfully or not, is settled
    /// (see the [module docs](self)). Never waits for a start.
    pub(super) fn finish_starts(&self, consumer: &BaseConsumer<Self>) {
        let ended: Vec<(u64, Starting, Result<Resume, Error>)> = {
            let mut reg = self.registry();
            if reg.starting.is_empty() {
                return;
            }
            let now = Instant::now();
            let ids: Vec<u64> = reg.starting.keys().copied().collect();
            let mut ended = Vec::new();
            for id in ids {
                let s = &reg.starting[&id];
                if s.resume.is_some() && s.seek_after > now {
                    continue;
                }
                let result = match s.resume.clone().map(Ok).or_else(|| s.ready.poll()) {
                    Some(r) => r,
                    None if now >= s.deadline => Err(s.ready.timed_out(now - s.since)),
                    None => continue,
                };
                let s = reg.starting.remove(&id).expect("listed above");
                ended.push((id, s, result));
            }
            ended
        };
        // One offset fetch and one seek for every start that is ready: 512 partitions
        // starting at once are 512 starts, not 512 round trips.
        let (mut ready, mut resume, mut partitions) = (Vec::new(), Vec::new(), Vec::new());
        for (id, mut start, result) in ended {
            match result {
                Ok(r) => {
                    resume.extend(r.iter().cloned());
                    partitions.extend(start.group.iter().cloned());
                    start.resume = Some(r);
                    ready.push((id, start));
                }
                Err(e) => self.settle_start(consumer, id, start.group, start.handle, Err(e)),
            }
        }
        if ready.is_empty() {
            return;
        }
        let refused = seek_each(consumer, &partitions, &resume);
        for (id, mut start) in ready {
            let why = match &refused {
                Ok(refused) => refused.iter().find(|(tp, _)| start.group.contains(tp)).map(|(_, e)| e.clone()),
                Err(e) => Some(e.clone()),
            };
            match why {
                None => self.settle_start(consumer, id, start.group, start.handle, Ok(())),
                Some(e) if Instant::now() >= start.deadline => {
                    let e = Error::Internal(format!("moving to the resume offsets: {e}"));
                    self.settle_start(consumer, id, start.group, start.handle, Err(e));
                }
                Some(_) => {
                    // Usually a partition whose fetch librdkafka has not started yet
                    // (`Local: Erroneous state`, right after a large assignment): the task
                    // is ready, only the seek is tried again, shortly.
                    start.seek_after = Instant::now() + SEEK_RETRY;
                    self.registry().starting.insert(id, start);
                }
            }
        }
    }

    /// Finishes the start of task `id` now, waiting for it until `deadline`: a co-partitioned
    /// sibling is about to be handed to it. `false` if it did not start (its partitions are
    /// then unstarted, or the pipeline is stopping).
    pub(super) fn finish_start_now(&self, consumer: &BaseConsumer<Self>, id: u64, deadline: Instant) -> bool {
        let Some(start) = self.registry().starting.remove(&id) else { return false };
        let resume = match start.resume {
            Some(r) => Ok(r),
            None => wait_ready(start.ready, deadline.min(start.deadline)),
        };
        let result = resume.and_then(|resume| {
            seek_to_start(consumer, &start.group, &resume)
                .map_err(|e| Error::Internal(format!("moving to the resume offsets: {e}")))
        });
        self.settle_start(consumer, id, start.group, start.handle, result);
        self.registry().tasks.contains_key(&id)
    }

    /// A start has ended with `result` (its partitions moved to where they resume, if it
    /// succeeded): on success they are routed to the task and resumed; on failure retried.
    fn settle_start(
        &self,
        consumer: &BaseConsumer<Self>,
        id: u64,
        group: Vec<TopicPartition>,
        handle: TaskHandle,
        result: Result<(), Error>,
    ) {
        let mut reg = self.registry();
        match result {
            Ok(()) => {
                let mut resume = Vec::new();
                let mut retried = false;
                for tp in &group {
                    if reg.unstarted.remove(tp).is_some() {
                        self.note_served(tp);
                        retried = true;
                    }
                    reg.routes.insert(tp.clone(), id);
                    if reg.paused.remove(tp) {
                        resume.push((tp.clone(), 0));
                    }
                }
                reg.tasks.insert(id, handle);
                drop(reg);
                if retried {
                    tracing::info!(partitions = ?group, "the partition's task started after all");
                }
                if !resume.is_empty() {
                    if let Err(e) = consumer.resume(&to_tpl(&resume)) {
                        tracing::warn!(error = %e, "resuming a started partition failed");
                    }
                    self.wake(resume.into_iter().map(|(tp, _)| tp));
                }
            }
            Err(e) if !retry_later(&e) => {
                drop(reg);
                self.set_fatal(e);
            }
            Err(e) => {
                // The task ends with its inbox; the partitions stay paused and are retried.
                drop(handle);
                let last = e.to_string();
                let cfg = &self.shared.cfg;
                if let Some(u) = reg.unstarted.get(&group[0]) {
                    if !u.waiting && u.since.elapsed() >= cfg.task_timeout {
                        let what = format!("starting the task of {group:?}");
                        drop(reg);
                        return self.set_fatal(Error::TaskTimeout { what, timeout: cfg.task_timeout, last });
                    }
                    tracing::warn!(partitions = ?group, error = %last, "the partition's task still cannot start; retrying");
                } else {
                    // One partition's trouble must not stop the others.
                    tracing::warn!(partitions = ?group, error = %last, "the partition's producer cannot be initialised; retrying it while the others run");
                }
                for tp in &group {
                    match reg.unstarted.get_mut(tp) {
                        Some(u) => u.failed_again(last.clone()),
                        None => {
                            reg.unstarted.insert(tp.clone(), Unstarted::new(last.clone()));
                        }
                    }
                    self.note_unserved(tp, &last);
                }
            }
        }
    }

    /// On a revocation: drops the starts of `revoked` partitions, after waiting for them
    /// until `deadline` unless `lost` (see the [module docs](self)). The rest of a
    /// co-partitioned start's group stays assigned, unstarted, and is retried.
    pub(super) fn drop_starts(&self, revoked: &[TopicPartition], lost: bool, deadline: Instant) {
        let starts: Vec<Starting> = {
            let mut reg = self.registry();
            let mut ids: Vec<u64> = revoked.iter().filter_map(|tp| reg.starting_of(tp)).collect();
            ids.sort_unstable();
            ids.dedup();
            let starts: Vec<Starting> = ids.iter().filter_map(|id| reg.starting.remove(id)).collect();
            for s in &starts {
                for tp in s.group.iter().filter(|tp| !revoked.contains(tp)) {
                    reg.unstarted.insert(
                        tp.clone(),
                        Unstarted::new("its co-partitioned sibling was revoked while the task started".into()),
                    );
                }
            }
            starts
        };
        Self::end_starts(starts, lost, deadline);
    }

    /// At shutdown: every start still under way is dropped, as on a revocation.
    pub(super) fn drop_all_starts(&self, deadline: Instant) {
        let starts: Vec<Starting> = self.registry().starting.drain().map(|(_, s)| s).collect();
        Self::end_starts(starts, false, deadline);
    }

    /// Ends `starts`: a start still waiting for a transaction slot gives up at once (its
    /// interrupt), one inside `init_transactions` is waited for until `deadline` unless
    /// `lost`; then its inbox is closed and its thread ends by itself.
    fn end_starts(starts: Vec<Starting>, lost: bool, deadline: Instant) {
        for s in &starts {
            s.handle.interrupt.revoke(lost, Instant::now());
        }
        for s in starts {
            // A start that is ready (only its seek is pending) has finished its
            // init_transactions: nothing to wait for.
            if !lost && s.resume.is_none() {
                let _ = wait_ready(s.ready, deadline);
            }
            drop(s.handle);
        }
    }
}
