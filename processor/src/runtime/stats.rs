//! What a pipeline counts while it runs, and the [`Summary`] of those counts that `run` and
//! the shutdown handle return.

use crate::counters::Counter;

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub records_in: Counter,
    pub records_out: Counter,
    pub transactions_committed: Counter,
    pub transactions_aborted: Counter,
    pub dead_lettered: Counter,
    pub producers_fenced: Counter,
    pub rebalances: Counter,
    pub changelog_records: Counter,
    pub restored_records: Counter,
    pub duplicates_dropped: Counter,
    pub late_records: Counter,
    pub window_corrections: Counter,
    pub records_handed_back: Counter,
    pub standby_handovers: Counter,
    pub standby_records: Counter,
}

/// What a pipeline did, as counted when `run` returned (or so far, from
/// [`ShutdownHandle::summary`](crate::ShutdownHandle::summary)). New counters may be added,
/// so it cannot be built with a struct literal outside this crate.
///
/// The counts are of batches this instance *knows* committed. A batch whose commit ended
/// in an unknown state is fenced and reconciled (see `docs/semantics.md`): counted once if
/// the committed offsets show it committed. Only if that reconcile cannot finish is the
/// producer given up and the batch not counted, although the coordinator may still have
/// committed it: then the outputs hold more than the counts say, never less.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Input records whose batch committed (replays after aborts are not counted twice).
    pub records_in: u64,
    /// Output records committed (dead-letter records included).
    pub records_out: u64,
    /// Committed transactions (at-least-once: acknowledged batches).
    pub transactions_committed: u64,
    /// Aborted transactions (at-least-once: failed batches that were re-sent).
    pub transactions_aborted: u64,
    /// Input records routed to the dead-letter topic.
    pub dead_lettered: u64,
    /// Producers given up (partitions sent back to the group): fenced by a newer owner, or
    /// an unknown outcome that could not be reconciled.
    pub producers_fenced: u64,
    /// Rebalances (assignments) this instance went through.
    pub rebalances: u64,
    /// Changelog records committed (state changes: one per key changed per transaction).
    pub changelog_records: u64,
    /// Changelog records read to restore state on assignment.
    pub restored_records: u64,
    /// Records dropped as duplicates by [`Dedup`](crate::operators::Dedup), committed.
    pub duplicates_dropped: u64,
    /// Records routed to a late-records topic by a window operator
    /// ([`TumblingWindows`](crate::operators::TumblingWindows) and the other kinds), or refused
    /// as late by a [`StreamJoin`](crate::operators::StreamJoin), committed.
    pub late_records: u64,
    /// Window results changed after their window had closed, committed: corrections (a
    /// late record within the window's retention, see `docs/state.md`) and session results
    /// retracted because a late record merged their session into an earlier one.
    pub window_corrections: u64,
    /// Input records of revoked partitions handed back uncommitted, for their next owner to
    /// read again (per-partition mode past the transaction slot bound: a batch that had
    /// begun no transaction is not committed inside the rebalance; `docs/scaling.md`).
    pub records_handed_back: u64,
    /// Partitions whose restore continued a standby copy kept by this instance
    /// ([`PipelineBuilder::standby_replicas`](crate::PipelineBuilder::standby_replicas)),
    /// reading only the changelog's tail.
    pub standby_handovers: u64,
    /// Changelog records this instance's standby copies applied.
    pub standby_records: u64,
}

impl Stats {
    pub(super) fn summary(&self) -> Summary {
        Summary {
            records_in: self.records_in.get(),
            records_out: self.records_out.get(),
            transactions_committed: self.transactions_committed.get(),
            transactions_aborted: self.transactions_aborted.get(),
            dead_lettered: self.dead_lettered.get(),
            producers_fenced: self.producers_fenced.get(),
            rebalances: self.rebalances.get(),
            changelog_records: self.changelog_records.get(),
            restored_records: self.restored_records.get(),
            duplicates_dropped: self.duplicates_dropped.get(),
            late_records: self.late_records.get(),
            window_corrections: self.window_corrections.get(),
            records_handed_back: self.records_handed_back.get(),
            standby_handovers: self.standby_handovers.get(),
            standby_records: self.standby_records.get(),
        }
    }
}
