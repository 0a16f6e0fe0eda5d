//! Where a task's partitions stand: what a transaction of timers alone commits, and the
//! floor no record may be below ([`floor`](super::floor)), checked at each record here.
//!
//! A batch's transaction commits the batch's next offsets; a transaction of timers alone
//! commits where its partitions stand, with its own mark, so that its outcome can be read back
//! by the reconcile and, in per-consumer mode, the group generation fences it (KIP-447). The
//! positions are what this task's committed transactions left, else the group's stable
//! committed offsets; they are forgotten with the partitions and whenever a producer is given
//! up (its last transaction may have committed unseen).

use std::collections::HashMap;
use std::time::Instant;

use rdkafka::{Offset, TopicPartitionList};

use super::batch::Batch;
use super::floor::{Intake, REWINDS_BEFORE_STOP};
use super::Task;
use crate::error::Error;
use crate::partition::{Resume, TopicPartition};
use crate::runtime::interrupt::Deadline;

impl Task {
    /// Where the owned partitions stand: the known positions, or, if none is known, the
    /// group's stable committed offsets of every owned partition.
    pub(super) fn standing(&mut self, deadline: Deadline<'_>) -> Result<TopicPartitionList, Error> {
        let mut known: Vec<(&TopicPartition, i64)> =
            self.owned.iter().filter_map(|tp| self.positions.get(tp).map(|o| (tp, *o))).collect();
        if known.is_empty() {
            let fetched = self.fetch_positions(deadline.instant())?;
            self.positions.extend(fetched);
            known = self.owned.iter().filter_map(|tp| self.positions.get(tp).map(|o| (tp, *o))).collect();
        }
        known.sort();
        let mut tpl = TopicPartitionList::with_capacity(known.len());
        for ((topic, partition), offset) in known {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(offset));
        }
        Ok(tpl)
    }

    /// The group's stable committed offsets of the owned partitions (those with one).
    fn fetch_positions(&self, deadline: Instant) -> Result<HashMap<TopicPartition, i64>, Error> {
        let owned: Vec<TopicPartition> = self.owned.iter().cloned().collect();
        self.committed_offsets(&owned, deadline, "where the partitions stand")
    }

    /// `partitions` are moved to `resume` (an exactly-once sink's offsets) or, those not in
    /// it, to their committed offsets. A transactional task notes the partitions resumed
    /// below the group's committed offset, with that offset's mark (`below_group`); if the
    /// read fails, none is noted, and a reconcile there takes the group's offset for another
    /// owner's (the partitions go back to the group: a rejoin, never a wrong outcome).
    pub(super) fn resumed(&mut self, partitions: &[TopicPartition], resume: &Resume) {
        self.floors.moved(partitions, resume);
        if resume.is_empty() || self.transactional_id.is_none() {
            return;
        }
        let resumed: Vec<TopicPartition> = resume.iter().map(|(tp, _)| tp.clone()).collect();
        let deadline = Instant::now() + self.shared.cfg.task_timeout;
        match self.committed_marked(&resumed, deadline, "the group's offsets of the partitions resumed from the sink") {
            Ok(group) => {
                for (tp, at) in resume {
                    match group.get(tp) {
                        Some((o, mark)) if o > at => self.below_group.insert(tp.clone(), (*o, mark.clone())),
                        _ => self.below_group.remove(tp),
                    };
                }
            }
            Err(e) => {
                tracing::warn!(task = self.id, error = %e, "cannot read the group's offsets of the partitions resumed from the sink")
            }
        }
    }

    /// The group's stable committed offsets of `partitions` (those with one), read by the
    /// instance's offsets reader until `deadline`; `what` names the read in the error.
    pub(super) fn committed_offsets(
        &self,
        partitions: &[TopicPartition],
        deadline: Instant,
        what: &str,
    ) -> Result<HashMap<TopicPartition, i64>, Error> {
        let marked = self.committed_marked(partitions, deadline, what)?;
        Ok(marked.into_iter().map(|(tp, (offset, _))| (tp, offset)).collect())
    }

    /// [`committed_offsets`](Self::committed_offsets), each with its metadata (the mark of
    /// the transaction that committed it).
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
        let committed = self.shared.stable_committed_offsets(&wanted, deadline).map_err(|last| Error::TaskTimeout {
            what: format!("reading {what} for {}", self.who()),
            timeout: deadline.saturating_duration_since(started),
            last,
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

    /// Forgets where `partitions` stand, and their floors (revoked), or every partition's
    /// (`None`: a producer given up; the partitions are rewound or handed back).
    pub(super) fn forget_positions(&mut self, partitions: Option<&[TopicPartition]>) {
        match partitions {
            Some(partitions) => {
                for tp in partitions {
                    self.positions.remove(tp);
                    self.below_group.remove(tp);
                }
            }
            None => {
                self.positions.clear();
                self.below_group.clear();
            }
        }
        self.floors.forget(partitions);
    }
}

impl Task {
    /// Whether `r` may be processed (see the module docs). `false`: it is dropped, the batch
    /// collected so far ended, and its partition rewound (or the pipeline stopped).
    pub(super) fn above_floor(&mut self, tp: &TopicPartition, offset: i64, batch: &mut Batch) -> bool {
        if self.transactional_id.is_none() {
            return true; // at-least-once: a record read again is allowed
        }
        let floor = match self.floors.take(tp, offset) {
            Intake::Take => return true,
            Intake::Below { floor } => floor,
            Intake::ReadFloor => match self.read_floor(tp) {
                // Read: the floor is known now.
                Ok(()) => match self.floors.take(tp, offset) {
                    Intake::Below { floor } => floor,
                    _ => return true,
                },
                Err(e) => {
                    tracing::warn!(task = self.id, partition = ?tp, error = %e, "cannot read the partition's committed offset; rewinding it");
                    self.rewind_below_floor(tp.clone(), batch);
                    return false;
                }
            },
        };
        let times = self.floors.fell_below(tp);
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

    /// Reads `tp`'s committed offset, as its floor. Its partition's alone: another owned
    /// partition's offset may still be unstable (a previous owner's transaction still open),
    /// and waiting for it would hold this one. Bounded by the call timeout: librdkafka has
    /// just read the same offset to start the partition.
    fn read_floor(&mut self, tp: &TopicPartition) -> Result<(), Error> {
        let deadline = Deadline::interruptible(Instant::now() + self.shared.cfg.call_timeout(), &self.interrupt);
        let one = std::slice::from_ref(tp);
        let committed = self.committed_offsets(one, deadline.instant(), "the committed offset")?;
        self.floors.read(one, &committed);
        Ok(())
    }

    /// Ends the batch collected so far (its records of `tp` are above the floor), so that the
    /// committed offset `tp` is rewound to includes them, then rewinds `tp`.
    fn rewind_below_floor(&mut self, tp: TopicPartition, batch: &mut Batch) {
        batch.end(self);
        if self.stopped || self.rewinds.holds(&tp) || !self.owned.contains(&tp) {
            return; // the batch's end stopped, rewound or handed back the partition already
        }
        self.rewind(vec![tp]);
    }
}
