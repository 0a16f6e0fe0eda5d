//! How a batch ends ([`BatchEnd`]) or goes on after an attempt ([`Next`]): the vocabulary the
//! batch, its failure paths and the sink share.

use std::time::Duration;

use crate::error::Error;
use crate::observe::Interruption;
use crate::txn::StepError;

/// How a batch ended.
pub(super) enum BatchEnd {
    Committed,
    /// The producer was fenced (or its unknown outcome could not be reconciled): it is
    /// dropped, the batch with it, and the partitions go back to the group — or stay, for
    /// a failure of its own, unless a reconcile found another owner (`replaced`).
    GaveUp {
        error: Box<StepError>,
        replaced: bool,
    },
    /// The task was interrupted (see [`interrupt`](crate::runtime::interrupt)): the batch's
    /// transaction is aborted and the batch dropped; the producer stays.
    Dropped {
        because: Interruption,
        reason: String,
    },
    /// The pipeline must stop.
    Stop(Error),
    /// An exactly-once sink refused the batch for an owner that claimed the partitions
    /// since: like a fenced producer, the partitions go back to the group.
    SinkFenced(String),
    /// The producer had to be replaced (a late `EndTxn` of a retried call could end its
    /// next transaction) and no fresh one could be initialised: the partitions go back.
    NoProducer(String),
}

/// What an attempt leads to.
pub(super) enum Next {
    /// The batch ended.
    End(BatchEnd),
    /// Replay the batch after this pause.
    Replay(Duration),
}
