//! What a cycle runs ([`Work`]: the processor, the state changes, the sink rows), where it
//! hands the sink its rows ([`SinkStep`]), and what it returns ([`CycleStats`], or a
//! [`CycleError`] for the task to classify).

use std::time::Duration;

use super::StepError;
use crate::record::{InputRecord, OutputRecord};
use crate::sink::erased::{AnyRow, ErasedSink, SinkFailure};
use crate::sink::{PartitionRange, SinkRow};

/// Why a cycle failed.
#[derive(Debug)]
pub(crate) enum CycleError {
    /// The processor failed on `batch[index]`; the transaction is still open (to abort).
    Processor { index: usize, error: crate::error::BoxError },
    /// A Kafka call failed.
    Kafka(StepError),
    /// The sink's write failed (before the offsets: the transaction is still open).
    Sink(SinkFailure),
    /// A timer that fired without a record failed; the transaction is still open.
    Timer(crate::error::BoxError),
}

impl From<StepError> for CycleError {
    fn from(e: StepError) -> Self {
        CycleError::Kafka(e)
    }
}

/// What a cycle runs: the processing of each record, then the batch's state changes.
pub(crate) trait Work {
    /// The outputs of one input record (in a buffer reused from record to record), or the
    /// processor's error.
    fn process(&mut self, record: &InputRecord) -> Result<&[OutputRecord], crate::error::BoxError>;
    /// The outputs of the timers due without a record (wall clock, idle partitions: see
    /// [`crate::timers`]), fired at the start of the transaction.
    fn fire_timers(&mut self) -> Result<&[OutputRecord], crate::error::BoxError> {
        Ok(&[])
    }
    /// The changelog records of the state changes the batch made.
    fn state_changes(&mut self) -> Vec<OutputRecord>;
    /// The sink rows the batch made, with their records (taken once per attempt).
    fn take_sink_rows(&mut self) -> Vec<SinkRow<AnyRow>>;
}

/// Where the cycle hands the batch's rows to the pipeline's sink ([`crate::sink`]).
pub(crate) enum SinkStep<'a> {
    /// The pipeline has no sink.
    None,
    /// Effectively-/at-least-once sink: written before the offsets join the transaction.
    BeforeOffsets(&'a mut dyn ErasedSink, &'a tokio::runtime::Handle),
    /// Exactly-once sink: only prepared; the caller writes it once the cycle committed.
    /// `anchors`: partitions the sink has no offset for yet, with `next_offset` = the
    /// batch's first offset; written (no rows) *before* the offsets join the transaction, so
    /// the sink never lacks a resume point that Kafka's committed offset is already past.
    AfterCommit { sink: &'a mut dyn ErasedSink, rt: &'a tokio::runtime::Handle, anchors: Vec<PartitionRange> },
}

/// What a cycle produced, and how long each phase took.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CycleStats {
    pub outputs: u64,
    /// Changelog records produced (state changes).
    pub changelog: u64,
    /// `begin_transaction`, the processor and enqueuing its outputs.
    pub process: Duration,
    /// Waiting for the last delivery report.
    pub await_acks: Duration,
    /// `send_offsets_to_transaction` + `commit_transaction` (zero for at-least-once).
    pub commit: Duration,
    /// `send_offsets_to_transaction`, the first part of `commit`.
    pub send_offsets: Duration,
    /// Writing the sink (an exactly-once sink's write is timed by the task).
    pub sink: Duration,
}
