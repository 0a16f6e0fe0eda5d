//! What happens to a record the processor fails on: retries with a backoff, then stop or
//! dead-letter.

use std::time::Duration;

/// What to do when the processor returns an error or panics on a record.
///
/// Whatever the policy, the transaction holding the failing record is aborted first, so
/// none of its outputs become visible, and the batch is replayed from the last committed
/// offset. The policy then decides the failing record's fate once it has failed
/// `retries + 1` times. Default: 2 retries (100 ms apart), then stop the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessorErrorPolicy {
    /// Replays of the batch before the record is given up on. Default 2.
    pub retries: u32,
    /// Pause before each replay. Default 100 ms.
    pub backoff: Duration,
    /// What happens to a record that failed every attempt.
    pub then: Exhausted,
}

/// The fate of a record that failed every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exhausted {
    /// Stop the pipeline with [`Error::Processor`](crate::Error::Processor); nothing of the failing batch is
    /// committed, so a restart resumes at that batch. Right when every record matters
    /// (a financial close) and a human should look.
    Stop,
    /// Write the input record, unchanged, to this topic **inside the transaction** (with
    /// headers `kafka-eos.error`, `kafka-eos.origin`, `kafka-eos.attempts`) and go on. Right
    /// when one poison record must not stall the partition.
    DeadLetter(String),
}

impl ProcessorErrorPolicy {
    /// Stop at the first failure (no retries).
    pub fn stop() -> Self {
        ProcessorErrorPolicy { retries: 0, backoff: Duration::from_millis(100), then: Exhausted::Stop }
    }

    /// Retry `n` times, then stop (chain [`then_dead_letter`](Self::then_dead_letter) to
    /// dead-letter instead).
    pub fn retry(n: u32) -> Self {
        ProcessorErrorPolicy { retries: n, ..Self::stop() }
    }

    /// After the retries, route the record to `topic` instead of stopping.
    pub fn then_dead_letter(mut self, topic: impl Into<String>) -> Self {
        self.then = Exhausted::DeadLetter(topic.into());
        self
    }

    /// Sets the pause before each replay.
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }
}

impl Default for ProcessorErrorPolicy {
    fn default() -> Self {
        ProcessorErrorPolicy::retry(2)
    }
}
