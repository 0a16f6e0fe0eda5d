//! The first attempt of a batch that is processed as it is collected: open, or failed
//! with the result the batch's commit then starts from.

use std::time::Instant;

use crate::record::InputRecord;
use crate::runtime::interrupt::Deadline;
use crate::txn::{CommitTo, Cycle, CycleError, CycleStats, SinkStep};

/// The first attempt of the batch being collected.
pub(super) enum Streamed {
    /// Begun at `started`, its records processed so far.
    Open { cycle: Cycle, started: Instant },
    /// Begun at `started`, it failed: the batch is committed at once, with this as its first
    /// attempt's result.
    Failed { error: CycleError, started: Instant },
}

impl Streamed {
    /// The attempt's end: commits the open cycle, or gives the failure. Returns the result
    /// and when the attempt began.
    pub(super) fn close(
        self,
        producer: &mut crate::txn::TxnProducer,
        batch: &[InputRecord],
        work: &mut dyn crate::txn::Work,
        commit_to: CommitTo<'_>,
        deadline: Deadline<'_>,
        sink: SinkStep<'_>,
    ) -> (Result<CycleStats, CycleError>, Instant) {
        match self {
            Streamed::Open { cycle, started } => {
                (cycle.commit(producer, batch, work, commit_to, deadline, sink), started)
            }
            Streamed::Failed { error, started } => (Err(error), started),
        }
    }
}
