//! Sinks: where a pipeline's effects land outside Kafka (a database, a cache), with a
//! guarantee per sink.
//!
//! A processor hands rows to the pipeline's sink with [`Context::sink`](crate::Context::sink);
//! the runtime writes each batch's rows in one [`Sink::write`] call, at a point of the
//! transaction cycle that depends on what the sink promises ([`SinkGuarantee`]):
//!
//! ```text
//! ExactlyOnce        process -> [Kafka transaction: outputs, offsets, commit] -> write(rows + next offsets)
//!                    on assignment: on_assigned() -> the stored next offsets; the partition is read from there
//! EffectivelyOnce    process -> produce -> write(rows, deduplicated per input record) -> offsets -> commit
//! AtLeastOnce        process -> produce -> write(rows) -> offsets -> commit
//! ```
//!
//! - **ExactlyOnce** sinks (`kafka-eos-postgres`) store the batch's next input offsets in the
//!   same database transaction as its rows and hand them back on assignment, so the database,
//!   not the consumer group, says where a partition resumes: every input record's rows land
//!   once, with or without a Kafka transaction. The write comes *after* the Kafka commit
//!   (if the pipeline also produces to Kafka): a crash between the two replays the batch,
//!   which rewrites identical Kafka outputs (same keys, later in the log) and upserts the same
//!   rows. The other order would lose Kafka outputs for good. A failed write is retried with
//!   the *same* rows until the task timeout (never re-processed): the batch's Kafka outputs
//!   and state are already committed.
//! - **EffectivelyOnce** sinks (`kafka-eos-redis`) deduplicate per input record for a
//!   window (a TTL): the write comes before the offsets are committed, so a crash replays
//!   the batch, and the sink drops what it has already applied within the window.
//! - **AtLeastOnce** sinks: written before the offsets commit; a replay applies again.
//!
//! Pipelines with state stores cannot write an ExactlyOnce sink in their cycle: the stores'
//! changelogs commit with the Kafka transaction, before the sink's offsets, so a replay after
//! a crash between the two would apply the batch to state that already holds it. They write
//! it through an outbox topic instead
//! ([`PipelineBuilder::outbox_sink`](crate::PipelineBuilder::outbox_sink)).
//!
//! # Threads
//! Sink calls run on the partition task's own OS thread (`Handle::block_on`), never on an
//! async worker and never inside a rebalance callback; every call is bounded by the task
//! timeout. Each task makes its own sink instance with the factory given to
//! [`PipelineBuilder::sink`](crate::PipelineBuilder::sink) (a connection per task: one per
//! input partition under [`Guarantee::ExactlyOncePerPartition`](crate::Guarantee::ExactlyOncePerPartition), one per
//! instance otherwise).
//!
//! The contract of each guarantee is in `docs/semantics.md`; the sinks and their figures in
//! `docs/sinks.md`.

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

pub use crate::partition::PartitionRange;
use crate::record::Topic;

pub(crate) mod erased;
pub(crate) mod outbox;
#[cfg(test)]
pub(crate) mod test_sinks;

/// What a sink promises; decides who owns the input offsets and when the sink is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SinkGuarantee {
    /// The sink stores each batch's next input offsets atomically with its rows and returns
    /// them on assignment; the partition is read from there. Kafka's committed offsets are
    /// still written (for lag monitoring) but only used where the sink has none stored.
    ExactlyOnce,
    /// Effects are deduplicated per input record for `window`; offsets are committed to
    /// Kafka after the write. A replay within the window changes nothing; past it, the
    /// replayed records apply again.
    EffectivelyOnce {
        /// How long a record's effect is remembered (the dedup keys' TTL).
        window: Duration,
    },
    /// Written before the offsets commit; a replay applies again.
    AtLeastOnce,
}

/// One row a processor handed the sink, with the input record it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkRow<R> {
    /// The input record's topic.
    pub topic: Topic,
    /// The input record's partition.
    pub partition: i32,
    /// The input record's offset: with topic and partition, a stable id of the record across
    /// replays (what an effectively-once sink deduplicates by).
    pub offset: i64,
    /// The row.
    pub row: R,
}

/// One batch: every input partition it covers and the rows made of its records, in input
/// order. A write that failed is retried with the same batch: writes must be idempotent.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkBatch<R> {
    /// The batch's input range per partition (every partition with records in the batch,
    /// also those whose records made no rows).
    pub partitions: Vec<PartitionRange>,
    /// The rows, in input order.
    pub rows: Vec<SinkRow<R>>,
}

/// What the runtime does after a failed sink call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SinkErrorClass {
    /// Another owner took the partition (an exactly-once sink's epoch): the task gives its
    /// partitions back to the group, as when its producer is fenced.
    Fenced,
    /// The write may or may not have been applied (connection lost during the commit):
    /// [`Sink::recover`], then the same batch is written again (idempotent).
    OutcomeUnknown,
    /// Not applied; [`Sink::recover`], then retry the same batch, with backoff, until the
    /// task timeout.
    Retriable,
    /// Refused for its data (a constraint, a type): the pipeline stops with the error; the
    /// batch's offsets are not stored, so it is read again after a fix.
    Rejected,
    /// The sink is unusable: the pipeline stops.
    Fatal,
}

/// A sink's error type: says what the runtime should do ([`SinkErrorClass`]).
pub trait SinkError: std::error::Error + Send + Sync + 'static {
    /// The error's class.
    fn class(&self) -> SinkErrorClass;
}

/// A system outside Kafka that a pipeline writes to. See the [module docs](self) for when
/// each call happens. Implementations: `kafka_eos_postgres::PostgresSink` (exactly-once),
/// `kafka_eos_redis::RedisCounterSink` (effectively-once, or at-least-once without dedup).
pub trait Sink: Send + 'static {
    /// What a processor hands the sink per row.
    type Row: Send + 'static;
    /// The sink's errors.
    type Error: SinkError;

    /// What the sink promises.
    fn guarantee(&self) -> SinkGuarantee;

    /// On assignment, before the partitions are read. Exactly-once sinks claim them (fencing
    /// earlier owners) and return where each resumes, in the order given (`None`: nothing
    /// stored, the group's committed offset applies); others return `None`s.
    fn on_assigned(
        &mut self,
        partitions: &[(Topic, i32)],
    ) -> impl Future<Output = Result<Vec<Option<i64>>, Self::Error>> + Send;

    /// Writes one batch; returns once it is durable (exactly-once: with the next offsets).
    fn write(&mut self, batch: &SinkBatch<Self::Row>) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// After a [`Retriable`](SinkErrorClass::Retriable) or
    /// [`OutcomeUnknown`](SinkErrorClass::OutcomeUnknown) failure, before the batch is
    /// written again: reconnect if the connection is gone. Must keep the partitions'
    /// ownership as it was (never claim anew: a zombie that re-claims would fence the real
    /// owner). Default: nothing.
    fn recover(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        async { Ok(()) }
    }

    /// On revocation, after the partitions' last batch was written or dropped: release
    /// per-partition state. Never needed for correctness. Default: nothing.
    fn on_revoked(&mut self, partitions: &[(Topic, i32)]) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = partitions;
        async { Ok(()) }
    }
}

/// The handle a processor writes the pipeline's sink rows with (from
/// [`PipelineBuilder::sink`](crate::PipelineBuilder::sink)): it carries the row type, so a
/// row of the wrong type does not compile. Cheap to clone.
pub struct SinkHandle<R> {
    _row: PhantomData<fn(R)>,
}

impl<R> SinkHandle<R> {
    pub(crate) fn new() -> Self {
        SinkHandle { _row: PhantomData }
    }
}

impl<R> Clone for SinkHandle<R> {
    fn clone(&self) -> Self {
        SinkHandle::new()
    }
}

impl<R> std::fmt::Debug for SinkHandle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SinkHandle<{}>", std::any::type_name::<R>())
    }
}
