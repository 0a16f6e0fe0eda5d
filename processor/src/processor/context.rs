//! What a processor sees besides the record: its partition, its stores, where outputs go.

use crate::record::{InputRecord, OutputRecord, Topic};
use crate::sink::erased::AnyRow;
use crate::sink::SinkHandle;
use crate::state::{PartitionState, Store, StoreMut, StoreRef, Tally};
use crate::table::{Table, TableRef, TableViews};

/// The context of one [`process`](super::Processor::process) call: the record's partition,
/// its state stores, and the output buffer of the open transaction.
///
/// Outputs go into a buffer the runtime reuses from record to record (no allocation per
/// input); they are produced, in order, after the call returns `Ok` — and discarded with
/// the rest of the attempt when it fails.
pub struct Context<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) state: Option<&'a mut PartitionState>,
    pub(crate) tables: TableViews<'a>,
    pub(crate) out: &'a mut Vec<OutputRecord>,
    pub(crate) rows: &'a mut Vec<AnyRow>,
}

impl<'a> Context<'a> {
    /// The input topic of the record (and of this processor instance).
    pub fn topic(&self) -> &str {
        self.topic
    }

    /// The input partition of the record, whose state the stores hold.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// Writes `record` in this record's transaction.
    pub fn emit(&mut self, record: OutputRecord) {
        self.out.push(record);
    }

    /// Writes a copy of `record` to `topic`: key, value, timestamp and headers unchanged
    /// ([`OutputRecord::copy_of`]); the partition is the producer's choice by key.
    pub fn forward(&mut self, record: &InputRecord, topic: &Topic) {
        self.out.push(OutputRecord::copy_of(record, topic));
    }

    /// Hands `row` to the pipeline's sink, in this record's batch ([`crate::sink`]). Like
    /// outputs, rows are kept only if the call returns `Ok`, and written once per batch.
    pub fn sink<R: Send + 'static>(&mut self, sink: &SinkHandle<R>, row: R) {
        let _ = sink;
        self.rows.push(Box::new(row));
    }

    /// The view of `store` for this record's partition, for this transaction.
    ///
    /// # Panics
    /// If the handle was declared on another pipeline's builder (a programming error: the
    /// panic becomes a processor error naming the store).
    pub fn store<K, V>(&mut self, store: &Store<K, V>) -> StoreMut<'_, K, V> {
        match self.state.as_deref_mut() {
            Some(state) => state.store_mut(store),
            None => panic!("store {:?} is not declared on this pipeline's builder", store.name()),
        }
    }

    /// The view of `table`: a co-partitioned table's rows of this record's partition, or all
    /// of a global table's rows, as of the start of the batch attempt (see [`crate::table`]).
    /// A table declared on another pipeline's builder (or a pipeline without tables) finds
    /// nothing.
    pub fn table<'c, V: 'static>(&'c self, table: &'c Table<V>) -> TableRef<'c, V> {
        TableRef::new(table, self.tables)
    }

    pub(crate) fn tally(&mut self, what: Tally, store: &str, n: u64) {
        if let Some(state) = self.state.as_deref_mut() {
            state.tally(what, store, n);
        }
    }
}

/// What the [`init`](super::Processor::init) and [`close`](super::Processor::close) hooks
/// see: the instance's partition and read-only views of its stores.
pub struct HookContext<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) state: Option<&'a PartitionState>,
}

impl HookContext<'_> {
    /// The instance's input topic.
    pub fn topic(&self) -> &str {
        self.topic
    }

    /// The instance's input partition.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The committed state of `store` for this partition, read-only.
    ///
    /// # Panics
    /// If the handle was declared on another pipeline's builder.
    pub fn store<K, V>(&self, store: &Store<K, V>) -> StoreRef<'_, K, V> {
        match self.state {
            Some(state) => state.store_ref(store),
            None => panic!("store {:?} is not declared on this pipeline's builder", store.name()),
        }
    }
}
