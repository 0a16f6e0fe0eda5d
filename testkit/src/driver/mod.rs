//! A test driver for kafka-eos processors: no broker, no Java, milliseconds per test.
//!
//! [`TestDriver`] takes the very [`PipelineBuilder`] the application ships and runs its
//! processor as the runtime does — the same code, not a model of it (see "Same code as the
//! runtime" below) — over records the test pipes into chosen input partitions. The test
//! then reads the committed output topics (decoded through codecs), the state stores
//! (through the same typed handles), the dead-letter and late-records topics.
//!
//! ```
//! use kafka_eos::{codec::Json, OutputRecord, Pipeline};
//! use kafka_eos_testkit::driver::{TestDriver, TestInput};
//!
//! let mut builder = Pipeline::builder().input_topic("payments");
//! let totals = builder.store::<String, i64>("totals");
//! let out = builder.output_topic("totals");
//! let handle = totals.clone();
//! let builder = builder.processor(move |ctx, rec| {
//!     let merchant = String::from_utf8(rec.key.clone().unwrap_or_default())?;
//!     let total = ctx.store(&totals).get(&merchant)?.unwrap_or(0) + rec.value_as::<i64>(&Json)?;
//!     ctx.store(&totals).put(&merchant, &total)?;
//!     ctx.emit(OutputRecord::to(&out).key(&merchant).encode_value(&Json, &total)?);
//!     Ok(())
//! });
//! let mut driver = TestDriver::new(builder)?;
//! driver.pipe(TestInput::new().key("m1").encode_value(&Json, &250i64)?)?;
//! driver.pipe(TestInput::new().key("m1").encode_value(&Json, &100i64)?)?;
//! assert_eq!(driver.values::<i64>("totals", &Json)?, vec![250, 350]);
//! assert_eq!(driver.store(&handle, 0).get(&"m1".to_string())?, Some(350));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Transactions, simulated
//! - **Batches.** Piped records are processed and committed in batches, like the runtime's
//!   transactions: every [`batch_size`](TestDriver::batch_size) records (default 1: each
//!   record is its own transaction, as Kafka Streams' `TopologyTestDriver` does), or when
//!   the test calls [`commit`](TestDriver::commit). Only committed outputs are readable
//!   (`read_committed`). Under `ExactlyOncePerPartition` each input partition's records form their own
//!   batch (one transaction per partition, as one task per partition does).
//! - **Processor errors** abort the batch — its outputs and state changes disappear — and
//!   replay it under the pipeline's [`ProcessorErrorPolicy`](kafka_eos::ProcessorErrorPolicy):
//!   retries, then the dead-letter topic or a stop (the error is returned). The policy's
//!   backoff is not slept.
//! - **Crashes.** [`crash_and_restore`](TestDriver::crash_and_restore) drops every processor
//!   instance (no `close` hook) and every state, rebuilds the state from the simulated
//!   changelog topics, and leaves the uncommitted records to be processed again.
//! - **Time.** The driver has a clock ([`advance_time`](TestDriver::advance_time)): it
//!   stamps piped records that carry no timestamp. Operators run on *event* time taken from
//!   the records, so windows close and dedup ids expire when a record (or a heartbeat
//!   record) moves the partition's watermark — as in production. kafka-eos has no
//!   wall-clock punctuation, so there is nothing else for the clock to fire.
//!
//! The one-call check that a processor is replay-safe is [`check_replay_safe`].
//!
//! # Same code as the runtime
//! The driver runs `kafka_eos::testing::Engine`, which is the processing half of the
//! runtime's partition task itself: processor instances per partition, state overlays
//! merged on commit and discarded on abort, changelog records, the dead-letter route and the
//! error policy's bookkeeping, driven by the transaction cycle's own `process_batch`; a
//! restore decodes (and migrates) the changelog with the Kafka restore's own function.
//!
//! # Not simulated
//! Kafka itself: partitioning of outputs without an explicit partition (the record keeps
//! `partition: None`), producer timestamps, broker errors and their retries, fencing,
//! rebalances (partitions never move), the commit interval (batches end by count or by
//! call), transaction hooks and metrics, an [outbox sink](kafka_eos::PipelineBuilder::outbox_sink)'s
//! topic and applier (its records are shown as committed sink rows, `sink_rows::<W>()`).
//! Those are the integration tests' and the chaos suite's business; `tests/it/equivalence.rs`
//! shows the driver and a real broker agree.
//!
//! Call the driver from plain `#[test]` functions: an async processor whose future has to
//! wait is driven to completion on the driver's own runtime with `Handle::block_on`, which
//! panics on a thread that is already running async code. (Sync processors, and async ones
//! that never wait, work from async tests too.)

#[cfg(test)]
mod outbox_tests;
mod record;
#[cfg(test)]
mod repartition_tests;
mod replay;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod trigger_tests;

use std::collections::BTreeMap;

use kafka_eos::codec::{Codec, DecodeError};
use kafka_eos::state::{Store, StoreRef};
use kafka_eos::testing::{AfterFailure, ChangelogEntry, Engine, Failure};
use kafka_eos::PipelineConfig;
use kafka_eos::{Error, Exhausted, Guarantee, InputRecord, PipelineBuilder, Topic};

pub use record::{TestInput, TestRecord};
pub use replay::{check_replay_safe, ReplayCheck, ReplayReport, ReplayViolation};

/// Every store's committed entries (encoded keys and values, in key byte order), by
/// (store, partition): what [`TestDriver::state_snapshot`] returns.
pub type Snapshot = BTreeMap<(String, i32), Vec<(Vec<u8>, Vec<u8>)>>;

/// What the driver has done so far: the counters of the runtime's `Summary`, plus the
/// simulated faults.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverStats {
    /// Input records whose batch committed.
    pub records_in: u64,
    /// Output records committed (dead-letter and late records included).
    pub records_out: u64,
    /// Committed batches.
    pub transactions_committed: u64,
    /// Aborted attempts (processor errors and injected aborts).
    pub transactions_aborted: u64,
    /// Crashes (called or injected).
    pub crashes: u64,
    /// Input records routed to the dead-letter topic.
    pub dead_lettered: u64,
    /// Changelog records committed.
    pub changelog_records: u64,
    /// Changelog records read by restores.
    pub restored_records: u64,
    /// Records dropped by `Dedup`.
    pub duplicates_dropped: u64,
    /// Records routed to a late-records topic.
    pub late_records: u64,
    /// Window results corrected or retracted after their window closed.
    pub window_corrections: u64,
}

/// Faults injected between an attempt and its commit (see [`check_replay_safe`]).
pub(crate) struct Faults {
    pub(crate) rng: replay::Rng,
    pub(crate) abort: f64,
    pub(crate) crash: f64,
    /// At most this many faults per batch, so every batch ends.
    pub(crate) per_batch: u32,
}

/// Runs a pipeline's processor over piped records, with simulated transactions, changelogs
/// and crashes. See the [module docs](self).
pub struct TestDriver {
    // Declared before the runtime, so instances are dropped while it still exists.
    engine: Engine,
    /// Taken on drop, to shut down in the background (a test may drop the driver inside an
    /// async context, where a blocking shutdown panics).
    rt: Option<tokio::runtime::Runtime>,
    /// Made once: every piped record shares it, as the runtime's records do.
    input_topic: Topic,
    next_offset: BTreeMap<i32, i64>,
    /// Piped, not yet committed, in pipe order.
    pending: Vec<InputRecord>,
    /// Committed records of the repartition topics, not yet processed, and each topic's
    /// next offset per partition.
    repartitioned: Vec<InputRecord>,
    repartition_offsets: BTreeMap<(Topic, i32), i64>,
    batch_size: Option<usize>,
    clock_ms: i64,
    topics: BTreeMap<String, Vec<TestRecord>>,
    /// Committed changelog records per (changelog topic, partition).
    changelogs: BTreeMap<(String, i32), Vec<ChangelogEntry>>,
    /// Records of the pipeline's table topics per (topic, partition): key, value.
    tables: BTreeMap<(String, i32), Vec<kafka_eos::testing::TableRecord>>,
    /// Committed sink rows, boxed (the driver is not generic over the row type).
    sink_rows: Vec<kafka_eos::sink::SinkRow<Box<dyn std::any::Any + Send>>>,
    stats: DriverStats,
    pub(crate) faults: Option<Faults>,
}

impl TestDriver {
    /// A driver for the pipeline `builder` describes, validated as `build()` would
    /// (bootstrap servers and an application id may be left out: nothing connects). Its
    /// first input topic is the one records are piped into.
    pub fn new(builder: PipelineBuilder) -> Result<TestDriver, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-driver")
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("test driver runtime: {e}")))?;
        let engine = Engine::new(builder, rt.handle().clone())?;
        let input_topic = Topic::new(&engine.config().input_topics[0]);
        Ok(TestDriver {
            engine,
            rt: Some(rt),
            input_topic,
            next_offset: BTreeMap::new(),
            pending: Vec::new(),
            repartitioned: Vec::new(),
            repartition_offsets: BTreeMap::new(),
            batch_size: Some(1),
            clock_ms: 0,
            topics: BTreeMap::new(),
            changelogs: BTreeMap::new(),
            tables: BTreeMap::new(),
            sink_rows: Vec::new(),
            stats: DriverStats::default(),
            faults: None,
        })
    }

    /// Commits every `n` piped records (default 1); `None`: only on [`commit`](Self::commit).
    pub fn batch_size(mut self, n: Option<usize>) -> TestDriver {
        self.batch_size = n.map(|n| n.max(1));
        self
    }

    /// The partition count of the input topics, among which records sent to a
    /// [repartition topic](kafka_eos::PipelineBuilder::repartition) are placed by key, as
    /// the runtime places them among the cluster's partitions (default 1).
    pub fn partitions(mut self, n: i32) -> TestDriver {
        self.engine.set_input_partitions(n);
        self
    }

    /// The validated configuration (error policy, topics, stores).
    pub fn config(&self) -> &PipelineConfig {
        self.engine.config()
    }

    /// Pipes one record into its partition of the input topic; commits if the batch is full.
    /// `Err` if the batch hit a processor error its policy stops on (the batch is dropped).
    pub fn pipe(&mut self, input: TestInput) -> Result<(), Error> {
        let offset = self.next_offset.entry(input.partition).or_insert(0);
        self.pending.push(InputRecord {
            topic: self.input_topic.clone(),
            partition: input.partition,
            offset: *offset,
            timestamp: Some(input.timestamp.unwrap_or(self.clock_ms)),
            key: input.key,
            value: input.value,
            headers: input.headers,
        });
        *offset += 1;
        match self.batch_size {
            Some(n) if self.pending.len() >= n => self.commit(),
            _ => Ok(()),
        }
    }

    /// Writes a record to table `topic` ([`kafka_eos::table`]): `input`'s partition, key
    /// and value (no value: a tombstone deleting the key). Records piped before it are
    /// committed first; the next batch of its partition (of a global table: of every
    /// partition) sees the row, as the runtime's table reader makes it seen before the next
    /// batch. `Err` if `topic` is not a table of
    /// the pipeline, or `input` has no key.
    pub fn pipe_table(&mut self, topic: impl AsRef<str>, input: TestInput) -> Result<(), Error> {
        let topic = topic.as_ref();
        let key = input.key.ok_or_else(|| Error::Config(format!("a record for table {topic:?} needs a key")))?;
        self.commit()?;
        if !self.engine.table_update(topic, input.partition, &key, input.value.as_deref()) {
            return Err(Error::Config(format!("{topic:?} is not a table of this pipeline (PipelineBuilder::table)")));
        }
        self.tables.entry((topic.to_string(), input.partition)).or_default().push((key, input.value));
        Ok(())
    }

    /// Pipes each of `inputs`.
    pub fn pipe_all(&mut self, inputs: impl IntoIterator<Item = TestInput>) -> Result<(), Error> {
        inputs.into_iter().try_for_each(|i| self.pipe(i))
    }

    /// Processes and commits the records piped since the last commit, then the records
    /// they sent to repartition topics, and theirs, until none is left. On a processor error
    /// the policy stops on, the rest of the batch is dropped uncommitted and the error
    /// returned.
    pub fn commit(&mut self) -> Result<(), Error> {
        for _round in 0..REPARTITION_ROUNDS {
            let mut pending = std::mem::take(&mut self.pending);
            pending.append(&mut self.repartitioned);
            if pending.is_empty() {
                return Ok(());
            }
            self.commit_batches(pending)?;
        }
        Err(Error::Config(format!(
            "records kept coming back through the repartition topics for {REPARTITION_ROUNDS} rounds: does the processor send the records of a repartition topic to it again?"
        )))
    }

    fn commit_batches(&mut self, pending: Vec<InputRecord>) -> Result<(), Error> {
        let batches: Vec<Vec<InputRecord>> = if self.config().guarantee == Guarantee::ExactlyOncePerPartition {
            let mut by_partition: BTreeMap<i32, Vec<InputRecord>> = BTreeMap::new();
            for r in pending {
                by_partition.entry(r.partition).or_default().push(r);
            }
            by_partition.into_values().collect()
        } else {
            vec![pending]
        };
        let mut first_error = None;
        for batch in batches {
            if let Err(e) = self.run_batch(&batch) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A crash and a restart: every processor instance is dropped without its `close`
    /// hook, every store's in-memory state with it; the state is rebuilt from the simulated
    /// changelog topics; records piped but not committed stay to be processed (the
    /// restarted pipeline reads them again from the committed offset).
    pub fn crash_and_restore(&mut self) -> Result<(), Error> {
        self.crash();
        let partitions: Vec<i32> = self.next_offset.keys().copied().collect();
        for p in partitions {
            self.ensure_state(p)?;
        }
        Ok(())
    }

    /// The driver's clock, ms since the epoch (starts at 0).
    pub fn now_ms(&self) -> i64 {
        self.clock_ms
    }

    /// Moves the clock forward: records piped without a timestamp get the new time.
    pub fn advance_time(&mut self, by: std::time::Duration) {
        self.clock_ms += by.as_millis() as i64;
    }

    /// Sets the clock.
    pub fn set_time(&mut self, ms: i64) {
        self.clock_ms = ms;
    }

    /// Commits what is piped, moves the clock forward (it is the wall clock of the
    /// pipeline's [timers](kafka_eos::timers)), then runs a transaction of the timers due by
    /// then without a record — wall-clock timers, and with `TimerSpec::idle_advance` the
    /// event-time timers of partitions idle for the timeout — as the runtime does when no
    /// record comes. Their outputs have `input` `(-1, -1)`. `Err` if a timer callback
    /// failed (its transaction is aborted).
    pub fn advance_wall_clock(&mut self, by: std::time::Duration) -> Result<(), Error> {
        self.commit()?;
        self.advance_time(by);
        self.engine.set_wall_clock(self.wall_clock());
        let partitions: Vec<i32> = self.next_offset.keys().copied().collect();
        for p in partitions {
            self.ensure_state(p)?;
        }
        match self.engine.attempt_timers() {
            Ok(attempt) if attempt.outputs.is_empty() && attempt.changelog.is_empty() => {
                self.engine.abort();
                Ok(())
            }
            Ok(attempt) => {
                self.apply(attempt, 0);
                // What the timers sent to repartition topics.
                self.commit()
            }
            Err(source) => {
                self.engine.abort();
                self.stats.transactions_aborted += 1;
                Err(Error::Processor { origin: "a timer".into(), attempts: 1, source })
            }
        }
    }

    fn wall_clock(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.clock_ms.max(0) as u64)
    }

    /// Every committed record of `topic` so far, in commit order.
    pub fn output(&self, topic: impl AsRef<str>) -> &[TestRecord] {
        self.topics.get(topic.as_ref()).map(Vec::as_slice).unwrap_or_default()
    }

    /// The rows the processor handed the pipeline's sink ([`Context::sink`]) in committed
    /// batches, in order, with the input records they came from. A replayed batch's rows
    /// appear once, as a sink receives them; the sink itself is not called (nothing
    /// connects).
    ///
    /// # Panics
    /// If `R` is not the sink's row type (the type of the pipeline's `SinkHandle<R>`).
    ///
    /// [`Context::sink`]: kafka_eos::processor::Context::sink
    pub fn sink_rows<R: 'static>(&self) -> Vec<kafka_eos::sink::SinkRow<&R>> {
        self.sink_rows
            .iter()
            .map(|r| {
                let row = r.row.downcast_ref::<R>().unwrap_or_else(|| {
                    panic!(
                        "sink rows are not {}: use the type of the pipeline's SinkHandle",
                        std::any::type_name::<R>()
                    )
                });
                kafka_eos::sink::SinkRow { topic: r.topic.clone(), partition: r.partition, offset: r.offset, row }
            })
            .collect()
    }

    /// Takes the committed records of `topic` (the next call returns only newer ones).
    pub fn drain_output(&mut self, topic: impl AsRef<str>) -> Vec<TestRecord> {
        self.topics.get_mut(topic.as_ref()).map(std::mem::take).unwrap_or_default()
    }

    /// The values of `topic`'s committed records, decoded with `codec` (tombstones skipped).
    pub fn values<T>(&self, topic: impl AsRef<str>, codec: &impl Codec<T>) -> Result<Vec<T>, DecodeError> {
        self.output(topic).iter().filter(|r| r.value.is_some()).map(|r| r.value_as(codec)).collect()
    }

    /// The records routed to the dead-letter topic (with the `kafka-eos.error` and
    /// `kafka-eos.attempts` headers); empty unless the policy has one.
    pub fn dead_letters(&self) -> &[TestRecord] {
        match &self.config().processor_error_policy.then {
            Exhausted::DeadLetter(topic) => self.output(topic),
            _ => &[],
        }
    }

    /// The committed state of `store` in `partition` (restored first if the partition's
    /// state is not in memory, e.g. after a crash).
    ///
    /// # Panics
    /// If the pipeline declares no stores, or the handle is another pipeline's.
    pub fn store<K, V>(&mut self, store: &Store<K, V>, partition: i32) -> StoreRef<'_, K, V> {
        self.ensure_state(partition).expect("restore from the simulated changelog");
        self.engine.store(store, partition).expect("the pipeline declares stores")
    }

    /// The handle of the store declared as `name`, typed by the caller (a wrong type shows
    /// as a decode error on read): for pipelines that keep their handles to themselves, and
    /// for operators' stores.
    pub fn store_handle<K, V>(&self, name: &str) -> Option<Store<K, V>>
    where
        K: serde::Serialize + serde::de::DeserializeOwned,
        V: serde::Serialize + serde::de::DeserializeOwned,
    {
        self.engine.store_handle(name)
    }

    /// Every store's committed entries (encoded keys and values), by (store, partition),
    /// for every partition records were piped into (restored first if not in memory): the
    /// final state the replay-safety check compares.
    pub fn state_snapshot(&mut self) -> Result<Snapshot, Error> {
        let partitions: Vec<i32> = self.next_offset.keys().copied().collect();
        for p in partitions {
            self.ensure_state(p)?;
        }
        Ok(self.engine.snapshot())
    }

    /// Every committed output, by topic.
    pub fn topics(&self) -> &BTreeMap<String, Vec<TestRecord>> {
        &self.topics
    }

    /// The counters so far.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// The Tokio runtime async processors are driven on.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        self.rt.as_ref().expect("the runtime lives until drop").handle()
    }

    fn crash(&mut self) {
        self.engine.crash();
        self.stats.crashes += 1;
    }

    fn ensure_state(&mut self, partition: i32) -> Result<(), Error> {
        if self.engine.needs_restore(partition) {
            let changelogs = &self.changelogs;
            let read = self.engine.restore(partition, |topic| {
                changelogs.get(&(topic.to_string(), partition)).cloned().unwrap_or_default()
            })?;
            self.stats.restored_records += read;
        }
        if self.engine.needs_tables(partition) {
            let tables = &self.tables;
            self.engine.load_tables(partition, |topic| {
                tables.get(&(topic.to_string(), partition)).cloned().unwrap_or_default()
            });
        }
        Ok(())
    }

    /// One batch, replayed until it commits or its policy stops it.
    fn run_batch(&mut self, batch: &[InputRecord]) -> Result<(), Error> {
        let mut faults_left = self.faults.as_ref().map_or(0, |f| f.per_batch);
        self.engine.set_wall_clock(self.wall_clock());
        loop {
            for r in batch {
                self.ensure_state(r.partition)?;
            }
            match self.engine.attempt(batch) {
                Ok(attempt) => {
                    if faults_left > 0 {
                        let f = self.faults.as_mut().expect("faults");
                        let (abort, crash) = (f.rng.chance(f.abort), f.rng.chance(f.crash));
                        if abort || crash {
                            faults_left -= 1;
                            self.engine.abort();
                            self.stats.transactions_aborted += 1;
                            if crash {
                                self.crash();
                            }
                            // A replay happens later than the first attempt, as in production:
                            // a processor that reads the wall clock sees it move.
                            std::thread::sleep(std::time::Duration::from_millis(1));
                            continue;
                        }
                    }
                    self.stats.dead_lettered += self.engine.dead_lettered() as u64;
                    self.apply(attempt, batch.len());
                    return Ok(());
                }
                Err(Failure { index, error }) => {
                    self.engine.abort();
                    self.stats.transactions_aborted += 1;
                    match self.engine.processor_failed(&batch[index], error) {
                        (_, AfterFailure::Replay(_)) => continue,
                        (_, AfterFailure::Stop(e)) => {
                            self.engine.batch_done();
                            return Err(e);
                        }
                    }
                }
            }
        }
    }

    /// Commits a successful attempt: its outputs, sink rows and changelog records join the
    /// topics, its state changes the committed state.
    fn apply(&mut self, attempt: kafka_eos::testing::Attempt, records_in: usize) {
        for w in attempt.outputs {
            let r = w.record;
            let out = TestRecord {
                topic: r.topic.to_string(),
                partition: r.partition,
                key: r.key,
                value: r.value,
                headers: r.headers,
                timestamp: r.timestamp,
                input: w.input,
            };
            if self.config().repartition_topics.contains(&out.topic) {
                self.repartition(r.topic, &out);
            }
            self.topics.entry(out.topic.clone()).or_default().push(out);
            self.stats.records_out += 1;
        }
        self.sink_rows.extend(attempt.sink_rows);
        for c in attempt.changelog {
            let log = self.changelogs.entry((c.topic.to_string(), c.partition.unwrap_or(0))).or_default();
            let offset = log.len() as i64;
            log.push((offset, c.key.unwrap_or_default(), c.value));
        }
        let t = self.engine.commit();
        self.engine.batch_done();
        self.stats.changelog_records += t.changelog_records;
        self.stats.duplicates_dropped += t.duplicates_dropped;
        self.stats.late_records += t.late_records;
        self.stats.window_corrections += t.window_corrections;
        self.stats.records_in += records_in as u64;
        self.stats.transactions_committed += 1;
    }
}

impl TestDriver {
    /// A committed record of a repartition topic becomes an input record of its partition
    /// (the runtime placed it by key), processed after the batch that sent it.
    fn repartition(&mut self, topic: Topic, out: &TestRecord) {
        let partition = out.partition.unwrap_or(0);
        let offset = self.repartition_offsets.entry((topic.clone(), partition)).or_insert(0);
        self.repartitioned.push(InputRecord {
            topic,
            partition,
            offset: *offset,
            timestamp: out.timestamp.or(Some(self.clock_ms)),
            key: out.key.clone(),
            value: out.value.clone(),
            headers: out.headers.clone(),
        });
        *offset += 1;
        // Its partition's state is kept (crashes, snapshots) like an input partition's.
        self.next_offset.entry(partition).or_insert(0);
    }
}

/// How many times records may come back through the repartition topics in one commit.
const REPARTITION_ROUNDS: usize = 1_000;

impl Drop for TestDriver {
    /// The pipeline stops: every instance's `close` hook runs, as on a graceful shutdown.
    fn drop(&mut self) {
        self.engine.close_all();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
