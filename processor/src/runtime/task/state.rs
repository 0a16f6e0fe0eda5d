//! A task's state stores: restored before a partition's first record, and their overlays
//! discarded once a transaction is known aborted (merged by the batch once it is known
//! committed).

use std::time::{Duration, Instant, SystemTime};

use super::ledger::Read;
use super::Task;
use crate::error::Error;
use crate::state::changelog;
use crate::table::reader::TableReader;

impl Task {
    /// The transaction aborted: every partition's state overlay is forgotten.
    pub(super) fn discard_states(&mut self) {
        self.processing.discard_states();
    }

    /// Whether `partition` needs its stores restored or its tables read before its next
    /// record.
    pub(super) fn needs_restore(&self, partition: i32) -> bool {
        self.processing.needs_restore(partition) || self.processing.needs_tables(partition)
    }

    /// Rebuilds the stores of every owned partition that has none yet from their changelogs
    /// (see [`crate::state`]), and reads the [tables](crate::table) of those that have none:
    /// called before a partition's first record is processed, it restores the whole
    /// assignment of an instance task in one pass. The restored states' base (the committed
    /// offsets they reflect, [`crate::state::base`]) goes into the ledger. `Ok(false)`:
    /// another owner committed the partitions meanwhile, and they went back to the group
    /// ([`Task::stale_state`]).
    pub(super) fn restore(&mut self) -> Result<bool, Error> {
        let cfg = self.shared.cfg.clone();
        let deadline = Instant::now() + cfg.task_timeout;
        let mut partitions: Vec<i32> =
            self.owned.iter().map(|tp| tp.1).filter(|p| self.processing.needs_restore(*p)).collect();
        partitions.sort_unstable();
        partitions.dedup(); // co-partitioned inputs share partition n's state
        if !partitions.is_empty() {
            let standbys = self.shared.standbys.clone();
            let hand = move |p: i32| standbys.as_ref().map(|s| s.hand(p)).unwrap_or_default();
            let restored = changelog::restore(&cfg, &partitions, deadline, Some(&hand))?;
            if self.transactional_id.is_some() {
                let mut moved = restored.moved.clone();
                for (tp, at) in restored.base.iter().filter(|(tp, _)| self.owned.contains(*tp)) {
                    if self.ledger.learn(tp, at.clone()) == Read::Moved {
                        moved.push(tp.clone()); // read otherwise before the restore
                    }
                }
                if !moved.is_empty() {
                    self.stale_state(format!(
                        "{moved:?} committed by another transaction while their state was restored"
                    ));
                    return Ok(false);
                }
            }
            if let (Some(&(p, changes)), true) = (restored.without_offsets.first(), self.transactional_id.is_some()) {
                // Under at-least-once a change may commit without its offsets: no sign of loss.
                let partition = cfg.input_topics.iter().map(|t| format!("{t}-{p}")).collect::<Vec<_>>().join(", ");
                return Err(Error::StateWithoutOffsets { partition, changes });
            }
            self.shared.shutdown.stats().restored_records.add(restored.records);
            self.shared.shutdown.stats().standby_handovers.add(restored.handovers as u64);
            self.processing.restored(restored.states);
            for tp in self.owned.iter().filter(|tp| partitions.contains(&tp.1)) {
                self.processing.restored_partition(tp);
            }
        }
        let mut tables: Vec<i32> =
            self.owned.iter().map(|tp| tp.1).filter(|p| self.processing.needs_tables(*p)).collect();
        tables.sort_unstable();
        tables.dedup();
        if !tables.is_empty() {
            let reader = match self.tables.take() {
                Some(r) => r,
                None => TableReader::new(&cfg)?,
            };
            let read = reader.bootstrap(&cfg, &tables, self.processing.tables_mut(), deadline);
            self.tables = Some(reader);
            read?;
        }
        Ok(true)
    }

    /// Applies the table updates fetched since the last batch attempt, and takes the latest
    /// version of the global tables: what the attempt about to begin looks rows up in.
    pub(super) fn refresh_tables(&mut self) -> Result<(), Error> {
        if let Some(global) = &self.shared.global {
            self.processing.set_global(global.view()?);
        }
        match &self.tables {
            Some(reader) => reader.refresh(&self.shared.cfg, self.processing.tables_mut()),
            None => Ok(()),
        }
    }

    /// Stops reading the tables of revoked `partitions`.
    pub(super) fn release_tables(&mut self, partitions: &[crate::partition::TopicPartition]) {
        if let Some(reader) = &self.tables {
            let numbers: Vec<i32> = partitions.iter().map(|tp| tp.1).collect();
            reader.release(&self.shared.cfg, &numbers);
        }
    }

    /// Closes every processor instance and forgets every partition's state and tables: the
    /// partitions go back to the group (or are rewound), and are restored before their next
    /// record.
    pub(super) fn forget_partitions(&mut self) {
        self.processing.give_up_all();
        self.ledger.forget(None);
        self.tables = None;
    }

    /// How long the task may wait for its next message before a timer comes due without a
    /// record ([`crate::timers`]); `None`: no timer can. A pipeline with timers, or whose
    /// state is queried ([`crate::query`]), has its owned partitions' state restored here,
    /// as soon as it is idle after an assignment.
    pub(super) fn timer_wake(&mut self) -> Option<Duration> {
        if !self.processing.restores_at_assignment() || self.stopped || self.producer.is_none() {
            return None;
        }
        if self.owned.iter().any(|tp| self.needs_restore(tp.1)) {
            match self.restore() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.stop(e);
                    return None;
                }
            }
        }
        let at = self.processing.next_timer_wake()?;
        Some(at.duration_since(SystemTime::now()).unwrap_or_default())
    }
}
