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
//! commit past the dropped ones.
//!
//! Not in place (the partitions go back to the group as before): partitions already lost,
//! an exactly-once sink (the partitions resume where the *sink* says, which only an
//! assignment applies), and a fresh producer that cannot be initialised either.

use super::Task;
use crate::observe::Interruption;
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
        let _ = self.control.send(Control::Rewind { task: self.id, partitions });
        true
    }
}
