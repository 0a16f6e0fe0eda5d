//! Counts: the runtime's monotonically increasing counters and what operators tally, the
//! vocabulary of the [`Summary`](crate::Summary) and the exported metrics.

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        self.add(1)
    }
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What operators count; committed with the transaction (so replays do not count twice) and
/// exported as metrics and in the [`Summary`](crate::Summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Tally {
    /// Records dropped by [`Dedup`](crate::operators::Dedup).
    Duplicate,
    /// Records routed to a late-records topic by a window operator, or refused as late by
    /// a [`StreamJoin`](crate::operators::StreamJoin).
    Late,
    /// Window results changed after their window closed (a late record within the
    /// retention): corrections emitted and session results retracted by a merge.
    Correction,
}
