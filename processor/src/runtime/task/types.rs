//! What a partition task is made of: the task and its fields.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use super::floor::Floors;
use super::rewind::Rewinds;
use super::sink::TaskSink;
use crate::metrics::TaskMetrics;
use crate::partition::TopicPartition;
use crate::processing::Processing;
use crate::runtime::interrupt::Interrupt;
use crate::runtime::protocol::Control;
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
    pub(super) control: Sender<Control>,
    /// Set by the consumer thread on revocation and shutdown: bounds the retries of a
    /// failing batch (see [`interrupt`](super::interrupt)).
    pub(super) interrupt: Arc<Interrupt>,
    /// `topic-partition` for a per-partition task; for a worker, `all` (the only one) or
    /// `worker-<k>`: the `partition` label of its metrics and spans.
    pub(super) label: String,
    pub(super) metrics: TaskMetrics,
    /// The pipeline's sink, if it has one, and where it has the partitions start.
    pub(super) sink: Option<TaskSink>,
    /// The partitions whose records are dropped until the consumer rewinds them.
    pub(super) rewinds: Rewinds,
    /// When the previous cycle ended: the `idle` time of the next batch's
    /// [`TransactionEvent`](crate::observe::TransactionEvent).
    pub(super) last_cycle_end: Instant,
    /// Failed attempts of the timers firing without a record, in the batch in flight.
    pub(super) timer_attempts: u32,
    /// The consumers of the pipeline's [tables](crate::table), made at the first
    /// partition that needs them.
    pub(super) tables: Option<crate::table::reader::TableReader>,
    /// Where the owned partitions stand: the next offset each is committed at, as this
    /// task's own transactions (or a read of the group's offsets) left it
    /// ([`positions`](super::positions)).
    pub(super) positions: HashMap<TopicPartition, i64>,
    /// The partitions an exactly-once sink resumed below the group's committed offset, with
    /// that offset and its mark, until this task commits there: a reconcile finding them
    /// unchanged knows that nothing committed since ([`decide`](crate::runtime::reconcile::decide)).
    pub(super) below_group: HashMap<TopicPartition, (i64, String)>,
    /// The lowest offset each owned partition's next record may have ([`floor`]).
    pub(super) floors: Floors,
    /// The offsets the batch in flight commits, kept for its reconcile.
    pub(super) offsets: rdkafka::TopicPartitionList,
    /// Per-partition mode: counted by the transaction slots while the task lives (the bound
    /// is engaged only past as many tasks as slots: [`crate::runtime::slots`]).
    pub(super) _member: Option<crate::runtime::slots::Member>,
}
