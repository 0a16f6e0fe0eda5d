//! **Not a stable API: the surface `kafka-eos-testkit`'s `TestDriver` is built on** (feature
//! `test-hooks`, outside semver). Use the driver (`kafka_eos_testkit::driver`), not this
//! module.
//!
//! It exposes the runtime's own processing so the driver cannot drift from it: an
//! [`Engine`] is the processing half of a partition task (the crate's `processing` module) — the
//! processor instances (one per input partition, made after the partition's state is
//! restored), the state overlays, the dead-letter route and the error policy's bookkeeping —
//! run over a batch by the same `process_batch` the transaction cycle runs, with the
//! changelog decoded on restore by the same `decode_change` the Kafka restore uses. What
//! the engine does *not* have is Kafka: the driver keeps the committed topics and
//! changelogs in memory and decides when a batch commits, aborts or crashes.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::runtime::Handle;

use crate::config::PipelineConfig;
use crate::error::{BoxError, Result};
use crate::processing::process_batch;
pub use crate::processing::AfterFailure;
use crate::processing::Processing;
use crate::record::{InputRecord, OutputRecord, ORIGIN_HEADER};
use crate::state::backend::Location;
use crate::state::{changelog, changelog_topic, PartitionState, StateError, Store, StoreRef, Tally};
use crate::txn::CycleError;
use crate::PipelineBuilder;

/// An output an attempt wrote, with the `(partition, offset)` of the input it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The output, with the origin header if the pipeline adds it.
    pub record: OutputRecord,
    /// The input record's partition and offset; `(-1, -1)` for the outputs of a timer that
    /// fired without a record.
    pub input: (i32, i64),
}

/// What one successful attempt of a batch wrote (not yet committed).
#[derive(Debug, Default)]
pub struct Attempt {
    /// The outputs, in the order they would be produced.
    pub outputs: Vec<Written>,
    /// The changelog records of the batch's state changes.
    pub changelog: Vec<OutputRecord>,
    /// The rows handed to the pipeline's sink, with their records (boxed: the driver is not
    /// generic over the row type; downcast with the handle's type).
    pub sink_rows: Vec<crate::sink::SinkRow<Box<dyn std::any::Any + Send>>>,
}

/// The processor failed on `batch[index]`; the attempt's state changes are still in the
/// overlay (abort them).
#[derive(Debug)]
pub struct Failure {
    /// The failed record's index in the batch.
    pub index: usize,
    /// The processor's error.
    pub error: BoxError,
}

/// What a committed batch counted, as the runtime's [`Summary`](crate::Summary) would.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tallies {
    /// Changelog records committed.
    pub changelog_records: u64,
    /// Records dropped by `Dedup`.
    pub duplicates_dropped: u64,
    /// Records routed to a late-records topic.
    pub late_records: u64,
    /// Window results corrected or retracted after their window closed.
    pub window_corrections: u64,
}

/// A changelog record as the driver keeps it: offset, key, value (`None`: a tombstone).
pub type ChangelogEntry = (i64, Vec<u8>, Option<Vec<u8>>);

/// A table topic's record as the driver keeps it: key, value (`None`: a tombstone).
pub type TableRecord = (Vec<u8>, Option<Vec<u8>>);

/// A store's committed entries (encoded keys and values), in key byte order.
pub type Entries = crate::state::Entries;

/// Every store's committed entries, by (store, partition).
pub type Snapshot = BTreeMap<(String, i32), Entries>;

/// The processing half of a partition task, without Kafka. See the [module docs](self).
pub struct Engine {
    processing: Processing,
}

impl Engine {
    /// The engine of the pipeline `builder` describes (validated as `build` would, except
    /// that bootstrap servers and an application id may be missing). Async processors are
    /// driven on `rt`, which must be a multi-thread runtime.
    pub fn new(builder: PipelineBuilder, rt: Handle) -> Result<Engine> {
        let (cfg, factory, _hooks) = builder.validate_for_driver()?;
        let mut processing = Processing::new(Arc::new(cfg), rt, factory);
        processing.keep_outbox_rows();
        Ok(Engine { processing })
    }

    /// The validated configuration.
    pub fn config(&self) -> &PipelineConfig {
        self.processing.config()
    }

    /// The input topics' partition count, among which records sent to a repartition topic
    /// are placed by key (default 1).
    pub fn set_input_partitions(&mut self, n: i32) {
        self.processing.set_input_partitions(n);
    }

    /// Whether `partition`'s state must be restored before its next record.
    pub fn needs_restore(&self, partition: i32) -> bool {
        self.processing.needs_restore(partition)
    }

    /// Rebuilds `partition`'s stores from `changelog(topic)` — that changelog topic's
    /// committed records of `partition`, in offset order — checking and migrating each
    /// record as the Kafka restore does. Returns the records read.
    pub fn restore(&mut self, partition: i32, changelog: impl Fn(&str) -> Vec<ChangelogEntry>) -> Result<u64> {
        let cfg = self.processing.config();
        let mut state = PartitionState::new(&cfg.application_id, &cfg.stores, partition);
        let mut read = 0;
        for (i, spec) in cfg.stores.iter().enumerate() {
            let topic = changelog_topic(&cfg.application_id, &spec.name);
            let mut batch = Vec::new();
            for (offset, key, value) in changelog(&topic) {
                batch.push(changelog::decode_change(spec, &topic, partition, offset, &key, value.as_deref())?);
                read += 1;
            }
            // The simulated changelog has no offsets to continue from: whatever a
            // persistent backend kept is cleared and rebuilt, like a store without checkpoint.
            let backend = state.backend_mut(i);
            let at = Location { application_id: &cfg.application_id, store: &spec.name, partition };
            if let Err(e) = backend.open(&at) {
                tracing::debug!(store = %spec.name, partition, error = %e, "local store damaged; cleared");
            }
            backend
                .clear()
                .and_then(|()| backend.write_checkpointed(batch, None))
                .map_err(|source| StateError::Backend { store: spec.name.to_string(), partition, source })?;
        }
        let topic = crate::record::Topic::new(&cfg.input_topics[0]);
        self.processing.restored([state]);
        self.processing.restored_partition(&(topic, partition));
        Ok(read)
    }

    /// Whether `partition`'s [tables](crate::table) must be read before its next record.
    pub fn needs_tables(&self, partition: i32) -> bool {
        self.processing.needs_tables(partition)
    }

    /// Reads `partition`'s tables from `rows(topic)` — that table topic's records of
    /// `partition` (key, value; `None`: a tombstone), in offset order — as an assignment
    /// reads them. Returns the records read.
    pub fn load_tables(&mut self, partition: i32, rows: impl Fn(&str) -> Vec<TableRecord>) -> u64 {
        let cfg = self.processing.config().clone();
        let mut tables = crate::table::PartitionTables::new(cfg.tables.len());
        let mut read = 0;
        for (index, def) in cfg.tables.iter().enumerate() {
            for (key, value) in rows(&def.topic) {
                tables.apply(def, index, &key, value.as_deref());
                read += 1;
            }
        }
        self.processing.tables_mut().insert(partition, tables);
        read
    }

    /// A record committed to table `topic`'s `partition`, as the table's reader applies it
    /// before the next batch: to the partition's tables if they are read already (else
    /// [`load_tables`](Self::load_tables) will read it). `false` if `topic` is no table of
    /// the pipeline.
    ///
    /// A global table's record is applied to the one copy every partition sees, whatever
    /// its `partition`; it outlives a crash, as a restarted instance reads the same rows.
    pub fn table_update(&mut self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> bool {
        let cfg = self.processing.config();
        if let Some(index) = cfg.global_tables.iter().position(|t| t.topic == topic) {
            let def = cfg.global_tables[index].clone();
            self.processing.global_mut().apply(&def, index, key, value);
            return true;
        }
        let Some(index) = cfg.tables.iter().position(|t| t.topic == topic) else { return false };
        let def = cfg.tables[index].clone();
        if let Some(tables) = self.processing.tables_mut().get_mut(&partition) {
            tables.apply(&def, index, key, value);
        }
        true
    }

    /// Makes timers ([`crate::timers`]) follow `now` instead of the machine's clock.
    pub fn set_wall_clock(&mut self, now: std::time::SystemTime) {
        self.processing.set_clock(now);
    }

    /// One attempt of a transaction of the timers due without a record (wall-clock timers,
    /// idle partitions' event-time timers), as the runtime runs it when no record comes:
    /// their outputs (with `input` = `(-1, -1)`: no record), then the state changes.
    pub fn attempt_timers(&mut self) -> std::result::Result<Attempt, BoxError> {
        let mut attempt = Attempt::default();
        let mut work = self.processing.work();
        let fired = crate::txn::Work::fire_timers(&mut work)?;
        attempt.outputs.extend(fired.iter().map(|record| Written { record: record.clone(), input: (-1, -1) }));
        attempt.changelog = crate::txn::Work::state_changes(&mut work);
        Ok(attempt)
    }

    /// One attempt of `batch`: every record through the processor (or the dead-letter
    /// route), then the batch's state changes — by the transaction cycle's own
    /// `process_batch`. The state changes stay in the overlay until [`commit`](Self::commit)
    /// or [`abort`](Self::abort).
    pub fn attempt(&mut self, batch: &[InputRecord]) -> std::result::Result<Attempt, Failure> {
        let origin_header = self.processing.config().origin_header;
        let mut attempt = Attempt::default();
        let mut work = self.processing.work();
        let result = process_batch(batch, &mut work, |out, origin| {
            match origin {
                Some(input) => {
                    let mut record = out.clone();
                    if origin_header {
                        record.headers.push((ORIGIN_HEADER.to_string(), Some(input.origin().into_bytes())));
                    }
                    attempt.outputs.push(Written { record, input: (input.partition, input.offset) });
                }
                None => attempt.changelog.push(out.clone()),
            }
            Ok(())
        });
        attempt.sink_rows = crate::txn::Work::take_sink_rows(&mut work);
        match result {
            Ok(_) => Ok(attempt),
            Err(CycleError::Processor { index, error }) => Err(Failure { index, error }),
            Err(CycleError::Kafka(e)) => unreachable!("the driver's send does not fail: {e}"),
            Err(CycleError::Sink(e)) => unreachable!("the driver writes no sink: {e}"),
            Err(CycleError::Timer(e)) => unreachable!("the driver fires no timer without a record: {e}"),
        }
    }

    /// The batch committed: the overlays become committed state. Returns what it counted.
    pub fn commit(&mut self) -> Tallies {
        let mut t = Tallies::default();
        for committed in self.processing.commit_states(&Default::default()) {
            t.changelog_records += committed.changes.iter().map(|(_, n)| n).sum::<u64>();
            for ((tally, _), n) in committed.tallies {
                match tally {
                    Tally::Duplicate => t.duplicates_dropped += n,
                    Tally::Late => t.late_records += n,
                    Tally::Correction => t.window_corrections += n,
                }
            }
        }
        t
    }

    /// The batch aborted: the overlays are forgotten.
    pub fn abort(&mut self) {
        self.processing.discard_states();
    }

    /// The processor failed on `record`: the error policy's verdict, as the runtime's
    /// (with the attempts so far).
    pub fn processor_failed(&mut self, record: &InputRecord, error: BoxError) -> (u32, AfterFailure) {
        self.processing.processor_failed(record, error)
    }

    /// The records the batch in flight routes to the dead-letter topic (by origin).
    pub fn dead_lettered(&self) -> usize {
        self.processing.dead_lettered().count()
    }

    /// The batch is done with: its failure counts are forgotten.
    pub fn batch_done(&mut self) {
        self.processing.batch_done();
    }

    /// A crash: every instance is dropped without its `close` hook, every state with it.
    pub fn crash(&mut self) {
        self.processing.crash();
    }

    /// Closes every instance (the pipeline stops).
    pub fn close_all(&mut self) {
        self.processing.close_all();
    }

    /// The committed state of `store` in `partition`, if the partition has state.
    pub fn store<K, V>(&self, store: &Store<K, V>, partition: i32) -> Option<StoreRef<'_, K, V>> {
        self.processing.state(partition).map(|s| s.store_ref(store))
    }

    /// The handle of the store declared as `name`, typed by the caller (a wrong type shows
    /// as a decode error on read): for pipelines that do not hand their handles out.
    pub fn store_handle<K, V>(&self, name: &str) -> Option<Store<K, V>>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        let stores = &self.processing.config().stores;
        stores.iter().position(|d| d.name() == name).map(|i| Store::new(i, stores[i].name.clone()))
    }

    /// Every store's committed entries (encoded), by (store, partition).
    pub fn snapshot(&self) -> Snapshot {
        let mut out = BTreeMap::new();
        for state in self.processing.states() {
            for (store, entries) in state.committed_entries() {
                out.insert((store.to_string(), state.partition()), entries);
            }
        }
        out
    }
}
