//! Observing transactions: a hook called after every cycle, committed or not.
//!
//! Benchmarks read commit latencies from it, tests count outcomes, and applications can
//! export their own figures. The hook runs on the partition task's thread right after the
//! cycle, so it should be quick (record a number, send on a channel): a slow hook delays
//! the partition's next transaction.
//!
//! ```no_run
//! use kafka_eos::observe::{Outcome, TransactionEvent};
//! # fn b(builder: kafka_eos::PipelineBuilder) -> kafka_eos::PipelineBuilder {
//! builder.on_transaction(|e: &TransactionEvent| {
//!     if let Outcome::Committed = e.outcome {
//!         println!("{} records committed in {:?} (commit step {:?})", e.records, e.total, e.commit);
//!     }
//! })
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::error::ErrorClass;

/// How a cycle ended. New outcomes may be added: match with a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Outputs and offsets committed (at-least-once: outputs acknowledged).
    Committed,
    /// Aborted after a Kafka error of this class, or (`None`) a processor failure; the
    /// batch is replayed.
    Aborted {
        /// The Kafka error's class; `None` when the processor failed.
        class: Option<ErrorClass>,
        /// The error, for humans.
        reason: String,
    },
    /// The producer was fenced or became unusable; the batch was dropped and its
    /// partitions go back to the group.
    GaveUp {
        /// The error, for humans.
        reason: String,
    },
    /// The batch was still failing when the task had to let its partitions go: its
    /// transaction was aborted and the batch dropped, uncommitted. Nothing is lost: the
    /// partitions' next owner (this instance or another) resumes from the committed offset
    /// and processes the batch again.
    ///
    /// Reported once per dropped batch: as the outcome of the failed cycle after which it
    /// was dropped or, when the interruption came during the pause before a replay (that
    /// cycle already reported as [`Aborted`](Outcome::Aborted)), as an event of its own with
    /// zero timings. A batch whose partitions were lost before it was ever tried is only
    /// logged.
    Dropped {
        /// Why the task had to let go.
        because: Interruption,
        /// The last error, for humans.
        reason: String,
    },
    /// The transaction's outcome was unknown to the task — its commit step failed without a
    /// definite answer (a timeout), the producer turned fatal, or an abort was refused — so
    /// the task fenced that producer with a fresh one of the same transactional.id and read
    /// the outcome from the group's committed offsets, fetched as stable. No rebalance
    /// either way: on [`Reconciliation::Committed`] the batch counts as committed (it is
    /// not processed again); on [`Reconciliation::Aborted`] it is replayed with the fresh
    /// producer, and the replay is reported as a cycle of its own. See `docs/semantics.md`.
    Reconciled {
        /// What the committed offsets showed.
        found: Reconciliation,
        /// The error that left the outcome unknown, for humans.
        reason: String,
    },
}

/// What fence-and-reconcile found a transaction of unknown outcome to have become.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reconciliation {
    /// The group's committed offsets are the batch's next offsets, with the mark this
    /// transaction's offsets carried: it committed.
    Committed,
    /// The committed offsets are still where the batch began: it aborted (or never
    /// committed, and the fresh producer's `init_transactions` aborted it).
    Aborted,
}

impl Reconciliation {
    /// `committed` or `aborted`: the `outcome` label of
    /// `kafka_eos_transaction_reconciled_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reconciliation::Committed => "committed",
            Reconciliation::Aborted => "aborted",
        }
    }
}

impl std::fmt::Display for Reconciliation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a task stopped working on a batch before it could commit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Interruption {
    /// The partitions were lost (session timeout, fenced generation): the group already
    /// gave them to another member, so the batch is dropped at once, without another attempt.
    PartitionsLost,
    /// A rebalance revoked the partitions and the batch could not be committed within the
    /// revocation's deadline (the shutdown timeout): the group's rebalance waits for no
    /// longer than that.
    Revoked,
    /// The pipeline is shutting down and the batch could not be committed before the
    /// shutdown deadline.
    ShuttingDown,
}

impl Interruption {
    /// A short lowercase name, used in logs and span fields.
    pub fn as_str(self) -> &'static str {
        match self {
            Interruption::PartitionsLost => "partitions lost",
            Interruption::Revoked => "revoked",
            Interruption::ShuttingDown => "shutting down",
        }
    }
}

impl std::fmt::Display for Interruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One transaction cycle, as reported to [`PipelineBuilder::on_transaction`](crate::PipelineBuilder::on_transaction) hooks.
///
/// A task's time, cycle after cycle, is `idle` (no record to work on) → `collect` (the
/// batch fills for up to the commit interval) → the cycle (`process`, `await_acks`,
/// `commit`, adding up to about `total`): the timeline of `docs/benchmarks.md`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TransactionEvent {
    /// The producer's transactional.id (`None` under at-least-once).
    pub transactional_id: Option<String>,
    /// Input records in the batch.
    pub records: usize,
    /// The input partitions `(topic, partition)` the batch holds records of, sorted: which
    /// partitions a committed event moved forward (under
    /// [`ExactlyOncePerPartition`](crate::Guarantee::ExactlyOncePerPartition) always one).
    pub partitions: Vec<(String, i32)>,
    /// Outputs produced (0 if the cycle failed before the end).
    pub outputs: u64,
    /// `begin_transaction`, the processor and enqueuing the outputs (summed over the
    /// records when the batch was processed as it was collected: then inside `collect`).
    pub process: Duration,
    /// Waiting for the last output's acknowledgement.
    pub await_acks: Duration,
    /// The commit step: `send_offsets_to_transaction` + `commit_transaction`.
    pub commit: Duration,
    /// The whole cycle, from `begin_transaction` to the end of the commit (or the failure).
    /// A batch processed as it was collected
    /// ([`process_while_collecting`](crate::PipelineBuilder::process_while_collecting), the
    /// default) begins its transaction at its first record, so its `total` spans `collect`
    /// too.
    pub total: Duration,
    /// Collecting the batch: from its first record's arrival at the task to the start of
    /// the cycle, or of its closing steps (state changes, acknowledgements, commit) when the
    /// batch was processed as it was collected — at most the commit interval (see
    /// [`commit_interval`](crate::PipelineBuilder::commit_interval)), less once the batch is
    /// full. Zero for a replay.
    pub collect: Duration,
    /// Before the batch's first record arrived: since the task's previous cycle ended (or
    /// it started). Zero for a replay.
    pub idle: Duration,
    /// How it ended.
    pub outcome: Outcome,
}

pub(crate) type TransactionHook = Arc<dyn Fn(&TransactionEvent) + Send + Sync>;
