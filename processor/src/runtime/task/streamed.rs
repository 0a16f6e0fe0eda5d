//! A batch processed as it is collected
//! ([`PipelineBuilder::process_while_collecting`](crate::PipelineBuilder::process_while_collecting)):
//! the first attempt begins its transaction at the first record and produces each record's
//! outputs as it arrives; a failure ends it, and the batch goes the way of any failed attempt
//! ([`Task::commit_batch`]). A revocation commits the open transaction (records are whole);
//! lost partitions abort it ([`Task::abandon_streamed`]). A restore ends the batch first (it
//! may outlast `transaction.timeout.ms`), and per-partition mode does not stream while its slot
//! bound ([`crate::runtime::slots`]) is engaged: the slot would be held all interval.

use std::time::Instant;

use super::first_attempt::Streamed;
use super::{Flush, Task};
use crate::record::InputRecord;
use crate::runtime::interrupt::{Deadline, ABORT_GRACE};
use crate::txn::Cycle;

impl Task {
    /// Whether the next batch's first attempt runs as it is collected. Not once the task's
    /// interrupt has expired: such a batch is dropped before its first attempt
    /// ([`Task::commit_batch`]), and no transaction should be opened for it.
    fn streams(&self) -> bool {
        self.shared.cfg.process_while_collecting
            && self.shared.slots.as_ref().is_none_or(|s| !s.engaged())
            && self.producer.is_some()
            && !self.stopped
            && self.interrupt.expired().is_none()
    }

    /// Runs the record just added to `batch` through the batch's open attempt (begun at the
    /// batch's first record). Returns `false` once that attempt failed: the caller commits
    /// the batch at once, which handles the failure as any attempt's.
    pub(super) fn stream(&mut self, batch: &[InputRecord]) -> bool {
        if batch.len() == 1 && self.streams() {
            // Read once per attempt, like a replay's; a failure is met again there.
            if self.refresh_tables().is_ok() {
                self.begin_streamed();
            }
        }
        let (Some(Streamed::Open { cycle, started }), Some(producer)) =
            (self.streamed.as_mut(), self.producer.as_mut())
        else {
            return !matches!(self.streamed, Some(Streamed::Failed { .. }));
        };
        let deadline = Deadline::interruptible(Instant::now() + self.shared.cfg.task_timeout, &self.interrupt);
        let (started, last) = (*started, batch.len() - 1);
        let mut work = self.processing.continued_work();
        match cycle.process(producer, &batch[last..], last, &mut work, deadline) {
            Ok(()) => true,
            Err(error) => {
                self.streamed = Some(Streamed::Failed { error, started });
                false
            }
        }
    }

    fn begin_streamed(&mut self) {
        let Some(producer) = self.producer.as_mut() else { return };
        let started = Instant::now();
        let deadline = Deadline::interruptible(started + self.shared.cfg.task_timeout, &self.interrupt);
        self.streamed = Some(match Cycle::begin(producer, &mut self.processing.work(), deadline) {
            Ok(cycle) => Streamed::Open { cycle, started },
            Err(error) => Streamed::Failed { error, started },
        });
    }

    /// Aborts the batch's open attempt, if any, without replaying it: its partitions were
    /// lost, or the pipeline stops. The state overlays go with it; what the batch still
    /// holds is processed again by its next attempt. Returns `false` if the abort failed:
    /// the producer is then given up (or replaced, its partitions rewound), and the batch
    /// must be dropped whole.
    pub(super) fn abandon_streamed(&mut self) -> bool {
        if self.streamed.take().is_none() {
            return true;
        }
        self.discard_states();
        let Some(producer) = self.producer.as_mut() else { return false };
        let deadline = Deadline::interruptible(Instant::now() + self.shared.cfg.task_timeout, &self.interrupt);
        let aborted = producer.abort(deadline.with_grace(ABORT_GRACE));
        match aborted {
            Ok(()) => {
                self.shared.shutdown.stats().transactions_aborted.inc();
                tracing::debug!(task = self.id, "open transaction of the collecting batch aborted");
                true
            }
            // Its fate unknown: the producer cannot be trusted with the next batch.
            Err(e) => {
                self.settle(Flush::GaveUp { error: Box::new(e), replaced: false }, &[]);
                false
            }
        }
    }
}
