//! A failed producer replaced in place ([`Task::recover_in_place`]): when it failed on its own
//! (an unknown outcome not reconciled, a fatal producer) rather than being replaced by someone
//! else ([`reconcile::replaced`], then [`Control::Fenced`]), a fresh producer fences the old
//! epoch, the partitions' state is dropped and the consumer seeks them back to their committed
//! offsets ([`Control::Rewind`]), with no rebalance. Until it answers
//! [`TaskMsg::Rewound`](crate::runtime::protocol::TaskMsg::Rewound), inbox records of those partitions are dropped.
//! Also serves a worker's batch dropped on a revocation ([`Task::rewind_dropped`]). Not in
//! place: partitions already lost, an exactly-once sink, a fresh producer that fails too.

use super::Task;
use crate::observe::Interruption;
use crate::partition::TopicPartition;
use crate::runtime::protocol::Control;
use crate::runtime::reconcile;
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
