//! A batch whose transaction outcome is unknown: fence the producer, reconcile, go on
//! ([`Task::fence_and_reconcile`]; the algorithm is [`reconcile`]).

use std::time::{Duration, Instant};

use super::end::Next;
use super::failed::give_up;
use super::Task;
use crate::observe::{Interruption, Outcome, Reconciliation};
use crate::record::InputRecord;
use crate::runtime::interrupt::Deadline;
use crate::runtime::reconcile;
use crate::txn::{CycleStats, StepError};

impl Task {
    /// The batch's transaction has an unknown outcome: the producer is dropped, never to be
    /// used again, and [`reconcile::reconcile`] fences it with a fresh producer of the same
    /// transactional.id and reads the outcome from the stable committed offsets (see
    /// [`reconcile`] for the hazard and why this is safe). Committed: the batch's state
    /// overlays are merged and it is counted, like any committed batch. Aborted: they are
    /// discarded and the batch is replayed with the fresh producer. No rebalance.
    ///
    /// Only while the task owns the partitions and has time left: partitions reported lost
    /// are someone else's (our `init_transactions` would fence the new owner), so then — or
    /// if the reconcile cannot finish by the deadline — the producer is given up: the
    /// partitions go back to the group, whose next owner resolves the transaction.
    pub(super) fn fence_and_reconcile(
        &mut self,
        batch: &[InputRecord],
        e: StepError,
        deadline: Deadline<'_>,
        stats: CycleStats,
    ) -> (Outcome, Next) {
        // What this attempt's offsets carried: the reconcile takes the batch as committed
        // only if the committed offsets carry it.
        let mark = self.producer.as_ref().and_then(|p| p.offsets_mark().map(str::to_owned));
        self.producer = None;
        let not_owner = matches!(self.interrupt.current(), Some((Interruption::PartitionsLost, _)));
        let injected = self.shared.cfg.fault.as_ref().is_some_and(|f| f.unreconciled);
        let (Some(id), false, false, false) = (self.transactional_id.clone(), not_owner, deadline.passed(), injected)
        else {
            self.discard_states();
            let why = match (not_owner, injected) {
                (true, _) => "the partitions were lost",
                (_, true) => "fault injection: the reconcile fails",
                _ => "no time left",
            };
            return give_up(e, Some(why.into()), false);
        };
        tracing::warn!(task = self.id, error = %e, "transaction outcome unknown: fencing the producer and reconciling");
        let started = Instant::now();
        let spans = reconcile::spans(batch, self.ledger.in_flight());
        let before = self.ledger.before(&spans);
        let found = match reconcile::reconcile(
            &self.shared.cfg,
            &id,
            &self.label,
            &spans,
            mark.as_deref(),
            &before,
            deadline,
        ) {
            Ok((fresh, found)) => {
                self.producer = Some(fresh);
                found
            }
            Err(why) => {
                self.discard_states();
                let replaced = why.another_owner();
                return give_up(e, Some(why.to_string()), replaced);
            }
        };
        self.metrics.reconciled(found);
        tracing::warn!(
            task = self.id,
            outcome = %found,
            records = batch.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "transaction reconciled"
        );
        let outcome = Outcome::Reconciled { found, reason: e.to_string() };
        match found {
            Reconciliation::Committed => {
                self.commit_states();
                (outcome, Next::End(self.committed(batch, stats, mark.as_deref())))
            }
            Reconciliation::Aborted => {
                self.discard_states();
                self.shared.shutdown.stats().transactions_aborted.inc();
                (outcome, Next::Replay(Duration::ZERO))
            }
        }
    }
}
