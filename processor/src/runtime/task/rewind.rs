//! A failed producer replaced in place: the partitions stay with this instance, only the
//! batch is lost, and they resume from their committed offsets ([`Task::recover_in_place`]).
//!
//! A producer is given up for one of two kinds of reasons:
//! - **someone else took over** ([`reconcile::replaced`]): fenced by a newer owner of its
//!   transactional.id, or the group no longer knows this member. The partitions belong
//!   elsewhere: the task reports [`Control::Fenced`] and the group hands them out again.
//! - **its own failure**: an unknown outcome that could not be reconciled, a producer
//!   librdkafka marked fatal. The partitions are still this instance's: making the group
//!   move them would pause every partition of the instance (every member, under eager
//!   rebalancing) for one producer's trouble. Instead the task creates a fresh producer
//!   (its `init_transactions` fences the old epoch and completes or aborts its open
//!   transaction, so the committed offsets are final), drops its partitions' state (restored
//!   from the changelogs on their next record), and asks the consumer thread to move the
//!   partitions back to their committed offsets ([`Control::Rewind`]). Until the consumer
//!   thread answers [`TaskMsg::Rewound`](super::TaskMsg::Rewound), every record of those
//!   partitions in the inbox predates the rewind and is dropped: the consumer thread seeks
//!   and then sends the answer without polling in between, so the records after the answer
//!   are exactly those from the committed offsets on.
//!
//! The same rewind serves a worker whose batch was dropped on a revocation (it kept
//! failing): the batch also held partitions the worker keeps, whose later records must not
//! commit past the dropped ones ([`Task::rewind_dropped`]; with an exactly-once sink they go
//! back to the sink's offsets, not the committed ones).
//!
//! Not in place (the partitions go back to the group as before): partitions already lost,
//! an exactly-once sink (the partitions resume where the *sink* says, which only an
//! assignment applies), and a fresh producer that cannot be initialised either.

use super::Task;
use crate::observe::Interruption;
use crate::partition::TopicPartition;
use crate::runtime::reconcile;
use crate::runtime::Control;
use crate::txn::StepError;

impl Task {
    /// Replaces the given-up producer in place, if `e` allows (see the [module docs](self));
    /// `false` when the partitions must go back to the group instead.
    pub(super) fn recover_in_place(&mut self, e: &StepError) -> bool {
        let lost = matches!(self.interrupt.current(), Some((Interruption::PartitionsLost, _)));
        if reconcile::replaced(e) || lost || self.sink_is_exactly_once() || self.owned.is_empty() {
            return false;
        }
        self.producer = None;
        self.forget_partitions();
        if let Err(init) = self.ensure_producer() {
            tracing::warn!(task = self.id, error = %init, "a fresh producer cannot be initialised either");
            return false;
        }
        let partitions: Vec<_> = self.owned.iter().cloned().collect();
        tracing::warn!(
            task = self.id,
            error = %e,
            ?partitions,
            "producer replaced in place; its batch was dropped and its partitions resume from their committed offsets"
        );
        self.rewinding.extend(partitions.iter().cloned());
        let _ = self.control.send(Control::Rewind { task: self.id, partitions, resume: Vec::new() });
        true
    }

    /// Moves the partitions this task keeps of a batch dropped by an interruption back to
    /// where they must resume: their committed offsets — or, with an exactly-once sink, the
    /// offsets the sink stored, asked again by claiming them: the dropped batch's Kafka side
    /// may have committed before its rows were written (the write is what the interruption
    /// dropped), and the committed offset would skip those rows for good. Runs after the
    /// revocation is answered: the sink may be down (its failure is what dropped the write),
    /// so the claim is retried ([`Task::claim_retrying`]). Until then the kept partitions'
    /// records are dropped as they come (`rewinding`). Interrupted again, the partitions
    /// stay there, for their next owner to claim; if the sink never answers, the pipeline
    /// stops.
    pub(super) fn rewind_dropped(&mut self) {
        let kept: Vec<TopicPartition> =
            std::mem::take(&mut self.dropped).into_iter().filter(|tp| self.owned.contains(tp)).collect();
        if kept.is_empty() || self.producer.is_none() {
            return;
        }
        if !self.sink_is_exactly_once() {
            let _ = self.control.send(Control::Rewind { task: self.id, partitions: kept, resume: Vec::new() });
            return;
        }
        match self.claim_retrying(&kept) {
            Ok(resume) => {
                let _ = self.control.send(Control::Rewind { task: self.id, partitions: kept, resume });
            }
            Err(e) if self.interrupt.expired().is_some() => {
                tracing::warn!(task = self.id, error = %e, partitions = ?kept, "interrupted while asking the sink where the kept partitions of a dropped batch resume; their records stay dropped until they are revoked");
            }
            Err(e) => self.stop(e),
        }
    }
}
