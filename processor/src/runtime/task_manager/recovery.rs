//! Failures kept local to their partitions: a task that replaced its producer in
//! place gets its partitions rewound ([`TaskManager::rewind`]); a partition whose task could
//! not start on assignment, or that per-partition mode's task bound left waiting for room,
//! is paused and its task retried ([`TaskManager::start_unstarted`]).
//! Both move partitions to where they resume (their committed offsets, or the offsets an
//! exactly-once sink stored) from the consumer thread, with no poll between the seek and the
//! routing that depends on it.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use super::start::{by_task, give_up_start, send_bounded, spawn_partition_task, wait_ready, Unstarted};
use super::{to_tpl, Registry, TaskManager};
use crate::error::Error;
use crate::partition::TopicPartition;
use crate::runtime::protocol::TaskMsg;

impl TaskManager {
    /// Moves a task's partitions back to where `resume` says (an exactly-once sink's
    /// offsets), the others to their committed offsets ([`Control::Rewind`](crate::runtime::protocol::Control::Rewind); see
    /// `task/rewind.rs`), then tells it so. The records waiting for room are dropped (they
    /// follow the old position); partitions no longer routed to the task are left alone
    /// (revoked meanwhile). `Err` if the offsets cannot be read or applied: the caller falls
    /// back to leaving the group.
    pub(crate) fn rewind<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        task: u64,
        partitions: Vec<TopicPartition>,
        resume: &[(TopicPartition, i64)],
    ) -> Result<(), String> {
        let (tx, mine, paused) = {
            let mut reg = self.registry();
            let mine: Vec<TopicPartition> =
                partitions.into_iter().filter(|tp| reg.routes.get(tp) == Some(&task)).collect();
            let mut paused = Vec::new();
            for tp in &mine {
                reg.pending.remove(tp);
                if reg.paused.remove(tp) {
                    paused.push((tp.clone(), 0));
                }
            }
            (reg.tasks.get(&task).map(|t| t.tx.clone()), mine, paused)
        };
        let Some(tx) = tx.filter(|_| !mine.is_empty()) else { return Ok(()) };
        seek_to_start(consumer, &mine, resume)?;
        if !paused.is_empty() {
            if let Err(e) = consumer.resume(&to_tpl(&paused)) {
                tracing::warn!(error = %e, "resuming rewound partitions failed");
            }
            self.wake(paused.into_iter().map(|(tp, _)| tp));
        }
        tracing::info!(task, partitions = ?mine, ?resume, "partitions rewound to their committed offsets (or the sink's)");
        let deadline = Instant::now() + self.shared.cfg.task_timeout;
        if !send_bounded(&tx, TaskMsg::Rewound { partitions: mine }, deadline) {
            return Err("the task did not take the rewind".into());
        }
        Ok(())
    }

    /// Pauses the assigned partitions whose task could not start, so that librdkafka stops
    /// fetching what nobody would process.
    pub(crate) fn pause_unstarted<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>) {
        let mut reg = self.registry();
        let Registry { unstarted, paused, .. } = &mut *reg;
        let newly: Vec<_> =
            unstarted.keys().filter(|tp| paused.insert((*tp).clone())).map(|tp| (tp.clone(), 0)).collect();
        drop(reg);
        if !newly.is_empty() {
            if let Err(e) = consumer.pause(&to_tpl(&newly)) {
                tracing::warn!(error = %e, "pausing partitions whose task could not start failed");
            }
        }
    }

    /// Retries the tasks of unstarted partitions that are due (see [`Unstarted`]). A task
    /// that starts gets its partition moved to where it resumes before it is routed any
    /// record, then resumed: the offset its exactly-once sink stored, if its claim returned
    /// one, the committed offset otherwise. A partition still failing after the task
    /// timeout stops the pipeline, with the last error.
    ///
    /// The sink's offset matters: its write follows the Kafka commit, so the group's
    /// committed offset can be ahead of it (the previous owner's write failed, or it
    /// crashed in between); seeking there would skip the batches in between for good.
    ///
    /// Under the task bound ([`Shared::max_tasks`](crate::runtime::Shared::max_tasks)) at
    /// most as many start as there is room for; a failed partition due while there is none
    /// waits for room like the others, its task timeout restarting at its next attempt.
    pub(crate) fn start_unstarted<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>) {
        let cfg = &self.shared.cfg;
        // Due partitions, with their co-partitioned siblings (one task starts for them all).
        let (due, mut room): (Vec<TopicPartition>, Option<usize>) = {
            let mut reg = self.registry();
            if reg.unstarted.is_empty() {
                return;
            }
            let now = Instant::now();
            let room = self.shared.max_tasks.map(|b| b.saturating_sub(reg.tasks.len()));
            if let (Some(0), Some(bound)) = (room, self.shared.max_tasks) {
                let due: Vec<TopicPartition> = reg
                    .unstarted
                    .iter()
                    .filter(|(_, u)| !u.waiting && u.next <= now)
                    .map(|(tp, _)| tp.clone())
                    .collect();
                for tp in due {
                    self.leave_waiting(&mut reg, tp, bound);
                }
                return;
            }
            let tasks: std::collections::HashSet<(String, i32)> =
                (reg.unstarted.iter()).filter(|(_, u)| u.due(now)).map(|(tp, _)| cfg.task_of(&tp.0, tp.1)).collect();
            (reg.unstarted.keys().filter(|tp| tasks.contains(&cfg.task_of(&tp.0, tp.1))).cloned().collect(), room)
        };
        for group in by_task(cfg, due) {
            match room.as_mut() {
                Some(0) => break, // the rest wait for the next room (converted above next time)
                Some(r) => *r -= 1,
                None => {}
            }
            let id = self.registry().next_id();
            let mut previous = None;
            let started = spawn_partition_task(&self.shared, id, &group).and_then(|(handle, ready)| {
                match wait_ready(ready, Instant::now() + cfg.task_timeout) {
                    Ok(resume) => Ok((handle, resume)),
                    Err(e) => {
                        previous = Some(give_up_start(handle));
                        Err(e)
                    }
                }
            });
            let result = started.map_err(|e| e.to_string()).and_then(|(handle, resume)| {
                match seek_to_start(consumer, &group, &resume) {
                    Ok(()) => Ok(handle),
                    Err(e) => {
                        previous = Some(give_up_start(handle));
                        Err(e)
                    }
                }
            });
            let mut reg = self.registry();
            if group.iter().any(|tp| !reg.unstarted.contains_key(tp)) {
                continue; // revoked meanwhile (the task, if any, ends with its inbox)
            }
            match result {
                Ok(handle) => {
                    let mut resume = Vec::new();
                    for tp in &group {
                        reg.unstarted.remove(tp);
                        self.note_served(tp);
                        reg.routes.insert(tp.clone(), id);
                        if reg.paused.remove(tp) {
                            resume.push((tp.clone(), 0));
                        }
                    }
                    reg.tasks.insert(id, handle);
                    drop(reg);
                    tracing::info!(partitions = ?group, "the partition's task started after all");
                    if !resume.is_empty() {
                        if let Err(e) = consumer.resume(&to_tpl(&resume)) {
                            tracing::warn!(error = %e, "resuming a started partition failed");
                        }
                        self.wake(resume.into_iter().map(|(tp, _)| tp));
                    }
                }
                Err(last) => {
                    let u = reg.unstarted.get_mut(&group[0]).expect("checked above");
                    if !u.waiting && u.since.elapsed() >= cfg.task_timeout {
                        let what = format!("starting the task of {group:?}");
                        drop(reg);
                        return self.set_fatal(Error::TaskTimeout { what, timeout: cfg.task_timeout, last });
                    }
                    tracing::warn!(partitions = ?group, error = %last, "the partition's task still cannot start; retrying");
                    for tp in &group {
                        if let Some(u) = reg.unstarted.get_mut(tp) {
                            u.failed_again(last.clone(), previous.clone());
                            self.note_unserved(tp, &last);
                        }
                    }
                }
            }
        }
    }

    /// Leaves the assigned `tp` without a task until the task bound `bound` has room.
    pub(super) fn leave_waiting(&self, reg: &mut Registry, tp: TopicPartition, bound: usize) {
        let waiting = Unstarted::waiting(bound);
        self.note_unserved(&tp, &waiting.last);
        reg.unstarted.insert(tp, waiting);
    }

    /// `tp` is assigned without a task, for `reason`: `/health` lists it, the gauge counts it.
    pub(super) fn note_unserved(&self, tp: &TopicPartition, reason: &str) {
        let n = self.shared.shutdown.health_state().unserved(tp, reason);
        crate::metrics::partitions_unserved(&self.shared.cfg.application_id, n);
    }

    /// `tp` got its task, or was revoked.
    pub(super) fn note_served(&self, tp: &TopicPartition) {
        let n = self.shared.shutdown.health_state().served(tp);
        crate::metrics::partitions_unserved(&self.shared.cfg.application_id, n);
    }
}

/// Moves `partitions` (assigned) to the offsets `resume` gives (an exactly-once sink's),
/// the others to their committed offsets; no poll may come between this and the routing
/// that depends on it. `Err` says why not.
fn seek_to_start<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[TopicPartition],
    resume: &[(TopicPartition, i64)],
) -> Result<(), String> {
    let timeout = Duration::from_secs(10);
    let mut seek = TopicPartitionList::with_capacity(partitions.len());
    let mut wanted = TopicPartitionList::with_capacity(partitions.len());
    for tp @ (t, p) in partitions {
        match resume.iter().find(|(r, _)| r == tp) {
            Some((_, offset)) => {
                seek.add_partition_offset(t, *p, Offset::Offset(*offset)).map_err(|e| e.to_string())?;
            }
            None => {
                wanted.add_partition(t, *p);
            }
        }
    }
    let committed = match wanted.count() {
        0 => wanted,
        _ => consumer.committed_offsets(wanted, timeout).map_err(|e| format!("committed offsets: {e}"))?,
    };
    for e in committed.elements() {
        let offset = resume_at(e.offset(), e.error().err().as_ref())
            .map_err(|why| format!("committed offset of {}-{}: {why}", e.topic(), e.partition()))?;
        seek.add_partition_offset(e.topic(), e.partition(), offset).map_err(|e| e.to_string())?;
    }
    let sought = consumer.seek_partitions(seek, timeout).map_err(|e| format!("seek: {e}"))?;
    match sought.elements().iter().find_map(|e| e.error().err()) {
        Some(e) => Err(format!("seek: {e}")),
        None => Ok(()),
    }
}

/// Where a partition resumes from the group's answer for it: its committed offset, or its
/// start when the group has none (as `auto.offset.reset=earliest` does). A per-partition
/// error (an unstable offset, a coordinator loading) is no answer: seeking to the start on
/// it would replay everything the partition ever committed.
fn resume_at(committed: Offset, error: Option<&rdkafka::error::KafkaError>) -> Result<Offset, String> {
    match (committed, error) {
        (_, Some(e)) => Err(e.to_string()),
        (Offset::Offset(o), None) if o >= 0 => Ok(Offset::Offset(o)),
        _ => Ok(Offset::Beginning),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    #[test]
    fn a_partition_resumes_at_its_committed_offset_or_its_start_and_never_on_an_error() {
        let unstable = KafkaError::OffsetFetch(RDKafkaErrorCode::UnstableOffsetCommit);
        let loading = KafkaError::OffsetFetch(RDKafkaErrorCode::CoordinatorLoadInProgress);
        for offset in [Offset::Offset(0), Offset::Offset(41), Offset::Invalid, Offset::Beginning, Offset::End] {
            for e in [&unstable, &loading] {
                assert!(resume_at(offset, Some(e)).is_err(), "{offset:?} with {e}");
            }
        }
        assert_eq!(resume_at(Offset::Offset(41), None), Ok(Offset::Offset(41)));
        assert_eq!(resume_at(Offset::Offset(0), None), Ok(Offset::Offset(0)));
        for none in [Offset::Invalid, Offset::Stored, Offset::Offset(-1001)] {
            assert_eq!(resume_at(none, None), Ok(Offset::Beginning), "{none:?}");
        }
    }
}
