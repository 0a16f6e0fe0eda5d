//! What a partition task is made of: the task and its fields.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use super::ledger::Ledger;
use super::sink::TaskSink;
use crate::metrics::TaskMetrics;
use crate::partition::TopicPartition;
use crate::processing::Processing;
use crate::runtime::interrupt::Interrupt;
use crate::runtime::Shared;
use crate::txn::TxnProducer;

pub(crate) struct Task {
    pub(crate) id: u64,
    pub(super) shared: Arc<Shared>,
    pub(super) producer: Option<TxnProducer>,
    pub(super) transactional_id: Option<String>,
    pub(super) owned: HashSet<TopicPartition>,
    /// At-least-once: next offset acknowledged per partition.
    pub(super) acked: HashMap<TopicPartition, i64>,
    /// The processor instances, the partitions' state and the error policy's bookkeeping:
    /// the part of the task the test driver runs too (see [`crate::processing`]).
    pub(super) processing: Processing,
    pub(super) stopped: bool,
    /// Set by the consumer thread on revocation and shutdown: bounds the retries of a
    /// failing batch (see [`interrupt`](super::interrupt)).
    pub(super) interrupt: Arc<Interrupt>,
    /// `topic-partition` for a per-partition task; for a worker, `all` (the only one) or
    /// `worker-<k>`: the `partition` label of its metrics and spans.
    pub(super) label: String,
    pub(super) metrics: TaskMetrics,
    /// The pipeline's sink, if it has one, and where it has the partitions start.
    pub(super) sink: Option<TaskSink>,
    /// When the previous cycle ended: the `idle` time of the next batch's
    /// [`TransactionEvent`](crate::observe::TransactionEvent).
    pub(super) last_cycle_end: Instant,
    /// Failed attempts of the timers firing without a record, in the batch in flight.
    pub(super) timer_attempts: u32,
    /// The consumers of the pipeline's [tables](crate::table), made at the first
    /// partition that needs them.
    pub(super) tables: Option<crate::table::reader::TableReader>,
    /// What the task knows of each owned partition: the group's committed offset and its
    /// mark, the floor, the rewinds waited for, the offsets in flight ([`Ledger`]).
    pub(super) ledger: Ledger,
    /// Per-partition mode: counted by the transaction slots while the task lives (the bound
    /// is engaged only past as many tasks as slots: [`crate::runtime::slots`]).
    pub(super) _member: Option<crate::runtime::slots::Member>,
}
