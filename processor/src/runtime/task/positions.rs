//! Where a task's partitions stand: what a transaction of timers alone commits.
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

use super::Task;
use crate::error::Error;
use crate::partition::TopicPartition;
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

    /// The group's stable committed offsets of `partitions` (those with one), read by the
    /// instance's offsets reader until `deadline`; `what` names the read in the error.
    pub(super) fn committed_offsets(
        &self,
        partitions: &[TopicPartition],
        deadline: Instant,
        what: &str,
    ) -> Result<HashMap<TopicPartition, i64>, Error> {
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
                Some((tp.clone(), offset))
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
                }
            }
            None => self.positions.clear(),
        }
        self.floors.forget(partitions);
    }
}
