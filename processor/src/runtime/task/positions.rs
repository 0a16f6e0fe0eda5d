//! Where a task's partitions stand, read from the group into the [ledger](super::ledger):
//! what a transaction of timers alone commits, what a reconcile compares with, and the floor
//! no record may be below ([`floor`](super::floor)), checked at each record here.
//!
//! A batch's transaction commits the batch's next offsets; a transaction of timers alone
//! commits where its partitions stand, with its own mark, so that its outcome can be read back
//! by the reconcile and, in per-consumer mode, the group generation fences it (KIP-447).

use std::collections::HashMap;
use std::time::Instant;

use rdkafka::TopicPartitionList;

use super::batch::Batch;
use super::floor::{Intake, REWINDS_BEFORE_STOP};
use super::ledger::Read;
use super::Task;
use crate::error::Error;
use crate::partition::{Resume, TopicPartition};
use crate::runtime::interrupt::Deadline;
use crate::runtime::Unread;

impl Task {
    /// Where the owned partitions stand ([`Ledger::standing`](super::ledger::Ledger::standing)),
    /// after reading the group's stable committed offsets of those not known yet, and the
    /// log's start of those the group has none for (one that cannot be read is left out).
    pub(super) fn standing(&mut self, deadline: Deadline<'_>) -> Result<TopicPartitionList, Error> {
        self.learn_unknown(deadline)?;
        let timeout = self.shared.cfg.call_timeout().min(deadline.remaining());
        let starts: HashMap<TopicPartition, i64> = self
            .ledger
            .nothing_committed(&self.owned)
            .into_iter()
            .filter_map(|tp| self.shared.log_start(&tp.0, tp.1, timeout).ok().map(|start| (tp, start)))
            .collect();
        Ok(self.ledger.standing(&self.owned, &starts))
    }

    /// Holds the timers of the partitions whose state the next transaction, which commits
    /// `committing`, must not change ([`Ledger::held`](super::ledger::Ledger::held)):
    /// transactional tasks with timers only. Owned partitions whose committed offset is not
    /// known yet are read first, when `deadline` is given (else held meanwhile).
    pub(super) fn hold_timers(&mut self, committing: impl Fn(&TopicPartition) -> bool, deadline: Option<Deadline<'_>>) {
        if self.transactional_id.is_none() || !self.processing.has_timers() {
            return;
        }
        if let Some(Err(e)) = deadline.map(|deadline| self.learn_unknown(deadline)) {
            tracing::debug!(task = self.id, error = %e, "their timers held: cannot read the group's offsets");
        }
        let held = self.ledger.held(&self.owned, committing);
        self.processing.hold_timers(held);
    }

    /// Reads the group's committed offsets of the owned partitions the ledger does not know
    /// yet, into the ledger.
    fn learn_unknown(&mut self, deadline: Deadline<'_>) -> Result<(), Error> {
        let unknown = self.ledger.unknown(&self.owned);
        if !unknown.is_empty() {
            let group = self.committed_marked(&unknown, deadline.instant(), "where the partitions stand")?;
            for tp in &unknown {
                self.ledger.learn(tp, group.get(tp).cloned()); // not known: always new
            }
        }
        Ok(())
    }

    /// `partitions` are moved to `resume` (an exactly-once sink's offsets) or, those not in
    /// it, to their committed offsets. A transactional task reads the group's committed
    /// offsets of the resumed ones, with their marks, into the ledger; if the read fails they
    /// stay unknown, and a reconcile there takes the group's offset for another owner's (the
    /// partitions go back to the group: a rejoin, never a wrong outcome).
    pub(super) fn resumed(&mut self, partitions: &[TopicPartition], resume: &Resume) {
        self.ledger.floors.moved(partitions, resume);
        if resume.is_empty() || self.transactional_id.is_none() {
            return;
        }
        let resumed: Vec<TopicPartition> = resume.iter().map(|(tp, _)| tp.clone()).collect();
        let deadline = Instant::now() + self.shared.cfg.task_timeout;
        match self.committed_marked(&resumed, deadline, "the group's offsets of the partitions resumed from the sink") {
            Ok(group) => {
                let moved: Vec<&TopicPartition> =
                    resumed.iter().filter(|tp| self.ledger.learn(tp, group.get(*tp).cloned()) == Read::Moved).collect();
                if !moved.is_empty() {
                    let why =
                        format!("{moved:?} committed by another transaction than the one this task's state reflects");
                    self.stale_state(why);
                }
            }
            Err(e) => {
                tracing::warn!(task = self.id, error = %e, "cannot read the group's offsets of the partitions resumed from the sink")
            }
        }
    }

    /// The group's stable committed offsets of `partitions` (those with one), each with its
    /// metadata (the mark of the transaction that committed it), read by the instance's
    /// offsets reader until `deadline`; `what` names the read in the error.
    fn committed_marked(
        &self,
        partitions: &[TopicPartition],
        deadline: Instant,
        what: &str,
    ) -> Result<HashMap<TopicPartition, (i64, String)>, Error> {
        let mut wanted = TopicPartitionList::new();
        for (topic, partition) in partitions {
            wanted.add_partition(topic, *partition);
        }
        let started = Instant::now();
        let committed = self.shared.stable_committed_offsets(&wanted, deadline).map_err(|unread| match unread {
            Unread::Refused(e) => e,
            Unread::Failed(last) => Error::TaskTimeout {
                what: format!("reading {what} for {}", self.who()),
                timeout: deadline.saturating_duration_since(started),
                last,
            },
        })?;
        Ok(committed
            .elements()
            .iter()
            .filter_map(|e| {
                let offset = e.offset().to_raw().filter(|o| *o >= 0)?;
                let tp = partitions.iter().find(|(t, p)| t.as_str() == e.topic() && *p == e.partition())?;
                Some((tp.clone(), (offset, e.metadata().to_string())))
            })
            .collect())
    }
}

impl Task {
    /// Whether `r` may be processed (see the module docs). `false`: it is dropped, the batch
    /// collected so far ended, and its partition rewound (or the pipeline stopped).
    pub(super) fn above_floor(&mut self, tp: &TopicPartition, offset: i64, batch: &mut Batch) -> bool {
        if self.transactional_id.is_none() {
            // At-least-once: a record read again is allowed. With an exactly-once sink (the
            // outbox's applier) the sink's offsets are the floors: a gap past them is not.
            if self.sink_is_exactly_once() {
                if let Intake::Past { floor } = self.ledger.floors.take(tp, offset) {
                    return self.past_floor(tp, offset, floor, batch);
                }
            }
            return true;
        }
        let floor = match self.ledger.floors.take(tp, offset) {
            Intake::Take => return true,
            Intake::Past { floor } => return self.past_floor(tp, offset, floor, batch),
            Intake::Below { floor } => floor,
            Intake::ReadFloor => match self.read_floor(tp) {
                Ok(Read::Moved) => {
                    let known = self.ledger.known(tp).cloned().flatten();
                    let why = format!(
                        "{tp:?} is committed by another transaction than the one this task's state reflects ({known:?})"
                    );
                    self.stale_state_dropping(batch, why);
                    return false;
                }
                // Read: the floor is known now.
                Ok(_) => match self.ledger.floors.take(tp, offset) {
                    Intake::Below { floor } => floor,
                    Intake::Past { floor } => return self.past_floor(tp, offset, floor, batch),
                    Intake::Take | Intake::ReadFloor => return true,
                },
                Err(e) => return self.unreadable(tp, "the committed offset", e.to_string(), batch),
            },
        };
        let times = self.ledger.floors.fell_below(tp);
        if times > REWINDS_BEFORE_STOP {
            self.stop(Error::OffsetReset { partition: format!("{}-{}", tp.0, tp.1), offset, committed: floor });
            return false;
        }
        tracing::warn!(
            task = self.id,
            partition = ?tp,
            offset,
            floor,
            times,
            "a record below the partition's committed offset (its position was reset): not processed; rewinding the partition"
        );
        self.rewind_below_floor(tp.clone(), batch);
        false
    }

    /// The first record of `tp` since its floor was set from a committed offset comes past
    /// it ([`Intake::Past`]): taken if the partition's log starts at or below the floor, else
    /// its records from the floor to the log's start were deleted unprocessed and the
    /// pipeline stops ([`Error::RecordsDeleted`]), or, told to skip them, warns and takes it.
    /// If the log's start cannot be read, the partition is rewound and checked again.
    fn past_floor(&mut self, tp: &TopicPartition, offset: i64, floor: i64, batch: &mut Batch) -> bool {
        let log_start = match self.shared.log_start(&tp.0, tp.1, self.shared.cfg.call_timeout()) {
            Ok(log_start) => log_start,
            Err(e) => return self.unreadable(tp, "where the log starts", e, batch),
        };
        if let Some((resume, log_start)) = super::floor::deleted(floor, log_start) {
            let partition = format!("{}-{}", tp.0, tp.1);
            if !self.shared.cfg.skip_deleted_records {
                self.stop(Error::RecordsDeleted { partition, resume, log_start });
                return false;
            }
            tracing::warn!(task = self.id, %partition, resume, log_start, "records deleted before they were processed: skipped (skip_deleted_records)");
        }
        self.ledger.floors.accept(tp, offset);
        true
    }

    /// A read `tp`'s check needs (`what`) failed with `error`: the partition is rewound and
    /// checked again, until its reads have failed for the task timeout; then the pipeline
    /// stops ([`Error::TaskTimeout`]) naming the partition and the read, rather than rewind
    /// forever. Always `false`: the record is not taken.
    fn unreadable(&mut self, tp: &TopicPartition, what: &str, error: String, batch: &mut Batch) -> bool {
        let timeout = self.shared.cfg.task_timeout;
        if self.ledger.floors.unreadable(tp, Instant::now()) >= timeout {
            let what = format!("reading {what} of partition {}-{} for {}", tp.0, tp.1, self.who());
            self.stop(Error::TaskTimeout { what, timeout, last: error });
            return false;
        }
        tracing::warn!(task = self.id, partition = ?tp, %error, "cannot read {what} of the partition; rewinding it");
        self.rewind_below_floor(tp.clone(), batch);
        false
    }

    /// Reads `tp`'s committed offset, as its floor and, with its mark, into the ledger. Its
    /// partition's alone: another owned partition's offset may still be unstable (a previous
    /// owner's transaction still open), and waiting for it would hold this one. Bounded by
    /// the call timeout: librdkafka has just read the same offset to start the partition.
    /// [`Read::Moved`]: another owner committed the partition since this task's state of it
    /// was made; the floor is left unknown.
    fn read_floor(&mut self, tp: &TopicPartition) -> Result<Read, Error> {
        let deadline = Deadline::interruptible(Instant::now() + self.shared.cfg.call_timeout(), &self.interrupt);
        let one = std::slice::from_ref(tp);
        let committed = self.committed_marked(one, deadline.instant(), "the committed offset")?;
        let read = self.ledger.learn(tp, committed.get(tp).cloned());
        if read != Read::Moved {
            let offsets: HashMap<TopicPartition, i64> = committed.iter().map(|(tp, (o, _))| (tp.clone(), *o)).collect();
            self.ledger.floors.read(one, &offsets);
        }
        Ok(read)
    }

    /// A read of the group found partitions committed by another transaction than the one
    /// this task's state of them reflects (see the [ledger](super::ledger)): another owner
    /// committed them since, and fenced this task's producer to do so. Nothing more is
    /// committed from the stale state: the producer and the partitions are given back to the
    /// group, whose next owner restores their state from the changelogs.
    pub(super) fn stale_state(&mut self, why: String) {
        if self.producer.is_none() {
            return; // given back already
        }
        tracing::warn!(task = self.id, %why, "another owner committed the partitions: this task's state of them is stale; the partitions go back to the group");
        self.shared.shutdown.stats().producers_fenced.inc();
        crate::metrics::producer_fenced(&self.shared.cfg.application_id);
        self.give_partitions_back(why);
    }

    /// [`stale_state`](Self::stale_state), dropping the batch collected so far (its open
    /// transaction aborted: it was processed on the stale state).
    fn stale_state_dropping(&mut self, batch: &mut Batch, why: String) {
        batch.abandon(self);
        batch.clear();
        self.stale_state(why);
    }

    /// Ends the batch collected so far (its records of `tp` are above the floor), so that the
    /// committed offset `tp` is rewound to includes them, then rewinds `tp`.
    fn rewind_below_floor(&mut self, tp: TopicPartition, batch: &mut Batch) {
        batch.end(self);
        if self.stopped || self.ledger.rewinds.holds(&tp) || !self.owned.contains(&tp) {
            return; // the batch's end stopped, rewound or handed back the partition already
        }
        self.rewind(vec![tp]);
    }
}
