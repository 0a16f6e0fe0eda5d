//! The processing half of a partition task, with no Kafka client in it: the processor
//! instances, the partitions' state (committed backend + the open transaction's overlay), the
//! dead-letter route, and the processor error policy's bookkeeping. The runtime's task
//! ([`crate::runtime::task`]) and the test driver ([`crate::testing`]) both call exactly this
//! code, so what a processor sees cannot drift between tests and production.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::runtime::Handle;

use crate::config::{Exhausted, PipelineConfig};
use crate::error::{BoxError, Error};
use crate::partition::TopicPartition;
use crate::processor::driver::{Instances, ProcessorFactory};
use crate::query::Registry;
use crate::record::{InputRecord, OutputRecord, Topic, DEAD_LETTER_ATTEMPTS_HEADER, DEAD_LETTER_ERROR_HEADER};
use crate::sink::erased::AnyRow;
use crate::sink::SinkRow;
use crate::state::{ChangelogEnds, Committed, PartitionState};
use crate::table::global::GlobalView;
use crate::table::{PartitionTables, TableViews};
use crate::txn::{CycleError, StepError, Work};

/// What the processor error policy says after a failed attempt (the batch is aborted).
#[derive(Debug)]
pub enum AfterFailure {
    /// Replay the batch after this pause (the record may now be routed to the dead-letter
    /// topic, if it exhausted its retries under a dead-letter policy).
    Replay(Duration),
    /// The record exhausted its retries under [`Exhausted::Stop`]: stop the pipeline.
    Stop(Error),
}

/// A task's processor instances and partition state, and the error policy's bookkeeping
/// for the batch in flight.
pub(crate) struct Processing {
    cfg: Arc<PipelineConfig>,
    rt: Handle,
    /// The processor's instances, one per input partition (made at its first record).
    processors: Instances,
    /// State stores per input partition (stateful processors only), restored from their
    /// changelogs before the partition's first record and dropped when it is revoked.
    states: HashMap<i32, PartitionState>,
    /// The [tables](crate::table) per input partition, read before its first record and
    /// dropped when it is revoked.
    tables: HashMap<i32, PartitionTables>,
    /// The version of the instance's global tables the attempt in flight looks rows up in
    /// (see [`crate::table::global`]); `None` in a pipeline without global tables.
    global: Option<Arc<GlobalView>>,
    /// Failed attempts per input record (by origin) in the current batch.
    failures: HashMap<String, u32>,
    /// Records to route to the dead-letter topic on the next attempt, with their error.
    dead: HashMap<String, (String, u32)>,
    /// The sink rows of the attempt in flight, with the records they came from.
    sink_rows: Vec<SinkRow<AnyRow>>,
    /// The outputs of the attempt in flight per input partition (dead-letter copies
    /// included), for the reports. Keyed by the records' own [`Topic`]s: counting a record
    /// clones a reference count, not its topic's name.
    outputs: HashMap<TopicPartition, u64>,
    /// Pipelines with [timers](crate::timers): each partition's topic and when its last
    /// record was processed (or its state restored), for timers that fire without a record.
    idle_since: HashMap<i32, (Topic, SystemTime)>,
    /// The partitions whose timers do not fire without a record in the transaction in
    /// flight ([`hold_timers`](Self::hold_timers)).
    held: HashSet<i32>,
    /// The wall clock, if not the machine's (the test driver's simulated clock).
    clock: Option<SystemTime>,
    /// Partitions of the input topics, among which records sent to a repartition topic are
    /// placed by key.
    input_partitions: i32,
    /// Whether rows handed to an [outbox sink](crate::PipelineBuilder::outbox_sink) become
    /// outbox records (the runtime), or stay sink rows (the test driver, which shows them as
    /// rows).
    outbox_records: bool,
    /// Where the restored partitions are offered to queries, and this task's id, which
    /// names its offers ([`crate::query`]); `None` in the test driver.
    queries: Option<(Arc<Registry>, u64)>,
}

impl Processing {
    pub(crate) fn new(cfg: Arc<PipelineConfig>, rt: Handle, factory: ProcessorFactory) -> Processing {
        Processing {
            cfg,
            rt,
            processors: Instances::new(factory),
            states: HashMap::new(),
            tables: HashMap::new(),
            global: None,
            failures: HashMap::new(),
            dead: HashMap::new(),
            sink_rows: Vec::new(),
            outputs: HashMap::new(),
            idle_since: HashMap::new(),
            held: HashSet::new(),
            clock: None,
            input_partitions: 1,
            outbox_records: true,
            queries: None,
        }
    }

    /// The wall clock timers follow: the machine's, unless [`set_clock`](Self::set_clock)
    /// was called.
    fn now(&self) -> SystemTime {
        self.clock.unwrap_or_else(SystemTime::now)
    }

    /// Makes timers follow `now` instead of the machine's clock (the test driver).
    pub(crate) fn set_clock(&mut self, now: SystemTime) {
        self.clock = Some(now);
    }

    /// The timers of `partitions` do not fire without a record in the next transactions,
    /// until told otherwise: the runtime holds those whose state the transaction must not
    /// change (`Ledger::held`).
    pub(crate) fn hold_timers(&mut self, partitions: HashSet<i32>) {
        self.held = partitions;
    }

    /// Keeps the rows of an outbox sink as sink rows (the test driver).
    pub(crate) fn keep_outbox_rows(&mut self) {
        self.outbox_records = false;
    }

    /// The input topics' partition count (the cluster's, or the test driver's).
    pub(crate) fn set_input_partitions(&mut self, n: i32) {
        self.input_partitions = n.max(1);
    }

    pub(crate) fn config(&self) -> &PipelineConfig {
        &self.cfg
    }

    /// The work of a new attempt of a batch, or of [`process_batch`]: the last attempt's sink
    /// rows and output counts are forgotten.
    pub(crate) fn work(&mut self) -> BatchWork<'_> {
        self.sink_rows.clear();
        self.outputs.clear();
        self.continued_work()
    }

    /// The work of the attempt in flight, continued: a batch processed as it is collected
    /// takes a view per record, and its rows and counts add up.
    pub(crate) fn continued_work(&mut self) -> BatchWork<'_> {
        let now = self.now();
        BatchWork {
            sink_rows: &mut self.sink_rows,
            cfg: &self.cfg,
            rt: &self.rt,
            dead: &self.dead,
            states: &mut self.states,
            tables: &self.tables,
            global: self.global.as_deref(),
            processors: &mut self.processors,
            outputs_per_partition: &mut self.outputs,
            input_partitions: self.input_partitions,
            outbox: self.cfg.outbox.as_ref().filter(|_| self.outbox_records),
            now,
            idle_since: &mut self.idle_since,
            held: &self.held,
        }
    }

    /// Whether the pipeline has [timers](crate::timers): its partitions' state is then
    /// restored at assignment, so that their timers fire without waiting for a record.
    pub(crate) fn has_timers(&self) -> bool {
        self.cfg.timers.is_some()
    }

    /// Offers every partition this task restores to queries, under `task`'s name, and
    /// withdraws it when its state goes.
    pub(crate) fn serve_queries(&mut self, registry: Arc<Registry>, task: u64) {
        self.queries = Some((registry, task));
    }

    /// Whether partitions' state is restored as soon as they are assigned, not at their
    /// first record: for timers that fire without one, and for queries that a partition
    /// without input must answer too.
    pub(crate) fn restores_at_assignment(&self) -> bool {
        self.has_timers() || self.queries.as_ref().is_some_and(|(registry, _)| registry.is_wanted())
    }

    /// `partition`'s state is gone from this task: no query reads it here any more.
    fn withdraw(&self, partition: i32) {
        if let Some((registry, task)) = &self.queries {
            registry.withdraw(partition, *task);
        }
    }

    /// When a timer may next come due without a record, over every partition's state.
    pub(crate) fn next_timer_wake(&self) -> Option<SystemTime> {
        let timers = self.cfg.timers.as_ref()?;
        let now = self.now();
        self.states
            .iter()
            .filter_map(|(p, state)| {
                let last = self.idle_since.get(p).map_or(now, |(_, at)| *at);
                timers.next_wake(state, last)
            })
            .min()
    }

    /// `tp`'s state was restored (timers): it counts as idle from now.
    pub(crate) fn restored_partition(&mut self, tp: &TopicPartition) {
        if self.cfg.timers.is_some() {
            let now = self.now();
            self.idle_since.entry(tp.1).or_insert_with(|| (tp.0.clone(), now));
        }
    }

    /// Whether `partition`'s state must be restored before its next record is processed.
    pub(crate) fn needs_restore(&self, partition: i32) -> bool {
        !self.cfg.stores.is_empty() && !self.states.contains_key(&partition)
    }

    /// Whether `partition`'s tables must be read before its next record is processed.
    pub(crate) fn needs_tables(&self, partition: i32) -> bool {
        !self.cfg.tables.is_empty() && !self.tables.contains_key(&partition)
    }

    /// The tables of every partition, for their reader to fill.
    pub(crate) fn tables_mut(&mut self) -> &mut HashMap<i32, PartitionTables> {
        &mut self.tables
    }

    /// Makes the next attempts look global tables up in `view`: called as an attempt begins.
    pub(crate) fn set_global(&mut self, view: Arc<GlobalView>) {
        self.global = Some(view);
    }

    /// The global tables, for the test driver to fill (copied if an attempt still holds them).
    pub(crate) fn global_mut(&mut self) -> &mut GlobalView {
        let tables = self.cfg.global_tables.len();
        Arc::make_mut(self.global.get_or_insert_with(|| Arc::new(GlobalView::new(tables))))
    }

    /// Adds restored partition states, and offers them to queries.
    pub(crate) fn restored(&mut self, states: impl IntoIterator<Item = PartitionState>) {
        for state in states {
            if let Some((registry, task)) = &self.queries {
                registry.offer(state.partition(), *task, state.committed_readers());
            }
            self.states.insert(state.partition(), state);
        }
    }

    pub(crate) fn state(&self, partition: i32) -> Option<&PartitionState> {
        self.states.get(&partition)
    }

    pub(crate) fn states(&self) -> impl Iterator<Item = &PartitionState> {
        self.states.values()
    }

    /// The transaction committed: every partition's overlay becomes committed state,
    /// checkpointed at the changelog offsets the transaction ended at (`ends`). Returns what
    /// each committed (changelog records per store, operator tallies). A partition whose
    /// backend failed to write is dropped, to be restored from the changelog before its next
    /// record (the committed changes are in the changelog, so nothing is lost).
    pub(crate) fn commit_states(&mut self, ends: &ChangelogEnds) -> Vec<Committed> {
        let committed: Vec<(i32, Committed)> = self.states.iter_mut().map(|(p, s)| (*p, s.commit(ends))).collect();
        for (partition, c) in &committed {
            if let Some(e) = &c.failed {
                tracing::warn!(partition, error = %e, "state backend write failed after the commit; the partition's state is restored from its changelog before its next record");
                self.states.remove(partition);
                self.withdraw(*partition);
            }
        }
        committed.into_iter().map(|(_, c)| c).collect()
    }

    /// The transaction aborted (or its outcome is given up on): every overlay is forgotten.
    pub(crate) fn discard_states(&mut self) {
        self.states.values_mut().for_each(PartitionState::abort);
    }

    /// The processor failed on `record` (the caller aborts the attempt): counts the
    /// attempt, and applies the policy once the record has failed more than `retries`
    /// times — stop, or route it to the dead-letter topic on the replay. Returns the
    /// attempts so far and what to do.
    pub(crate) fn processor_failed(&mut self, record: &InputRecord, error: BoxError) -> (u32, AfterFailure) {
        let origin = record.origin();
        let attempts = self.failures.entry(origin.clone()).or_insert(0);
        *attempts += 1;
        let attempts = *attempts;
        let policy = &self.cfg.processor_error_policy;
        if attempts > policy.retries {
            match &policy.then {
                Exhausted::Stop => {
                    return (attempts, AfterFailure::Stop(Error::Processor { origin, attempts, source: error }))
                }
                Exhausted::DeadLetter(_) => {
                    self.dead.insert(origin, (error.to_string(), attempts));
                }
            }
        }
        (attempts, AfterFailure::Replay(policy.backoff))
    }

    /// The outputs of the last attempt per input partition, taken.
    pub(crate) fn take_outputs(&mut self) -> HashMap<TopicPartition, u64> {
        std::mem::take(&mut self.outputs)
    }

    /// The records routed to the dead-letter topic in the batch in flight (by origin).
    pub(crate) fn dead_lettered(&self) -> impl Iterator<Item = &str> {
        self.dead.keys().map(String::as_str)
    }

    /// The batch is done with (committed, dropped or given up): its failure counts go.
    pub(crate) fn batch_done(&mut self) {
        self.failures.clear();
        self.dead.clear();
    }

    /// Closes `tp`'s instance (with its state, read-only) and drops the partition's state,
    /// unless `keep_state` (another input's partition of the same number, co-partitioned,
    /// still uses it): the partition was revoked.
    pub(crate) fn revoke(&mut self, tp: &TopicPartition, keep_state: bool) {
        self.processors.close(&tp.0, tp.1, self.states.get(&tp.1));
        if !keep_state {
            self.states.remove(&tp.1);
            self.withdraw(tp.1);
            self.tables.remove(&tp.1);
            self.idle_since.remove(&tp.1);
        }
    }

    /// Closes every instance and keeps the state (the pipeline stops).
    pub(crate) fn close_all(&mut self) {
        self.processors.close_all(&self.states);
    }

    /// Closes every instance and drops every state: the partitions go back to the group,
    /// whose next owner restores them.
    pub(crate) fn give_up_all(&mut self) {
        self.close_all();
        self.states.keys().for_each(|p| self.withdraw(*p));
        self.states.clear();
        self.tables.clear();
        self.idle_since.clear();
    }

    /// Drops every instance *without* its `close` hook, and every state: what a crash of
    /// the process loses (the test driver's `crash_and_restore`).
    pub(crate) fn crash(&mut self) {
        self.processors = Instances::new(self.processors.factory());
        self.states.keys().for_each(|p| self.withdraw(*p));
        self.states.clear();
        self.tables.clear();
        self.batch_done();
    }
}

/// One attempt's work: the processor (with the
/// record's partition state), or the dead-letter route; then the state changes.
pub(crate) struct BatchWork<'a> {
    cfg: &'a PipelineConfig,
    rt: &'a Handle,
    /// Records that exhausted their retries under a dead-letter policy, with their error.
    dead: &'a HashMap<String, (String, u32)>,
    states: &'a mut HashMap<i32, PartitionState>,
    tables: &'a HashMap<i32, PartitionTables>,
    global: Option<&'a GlobalView>,
    processors: &'a mut Instances,
    /// See [`Processing::outputs`].
    outputs_per_partition: &'a mut HashMap<TopicPartition, u64>,
    sink_rows: &'a mut Vec<SinkRow<AnyRow>>,
    /// See [`Processing::idle_since`].
    idle_since: &'a mut HashMap<i32, (Topic, SystemTime)>,
    /// See [`Processing::held`].
    held: &'a HashSet<i32>,
    /// See [`Processing::input_partitions`].
    input_partitions: i32,
    /// The outbox its rows become records of, if any ([`Processing::outbox_records`]).
    outbox: Option<&'a crate::sink::outbox::Outbox>,
    /// The wall clock of this attempt (timers).
    now: SystemTime,
}

impl BatchWork<'_> {
    /// Fires `partition`'s due timers (after moving its stream time to `stream`, if later),
    /// and those they make due in turn; their outputs and rows are added to the
    /// processors' buffers.
    fn fire(&mut self, topic: &str, partition: i32, stream: Option<i64>) -> Result<(), BoxError> {
        let (Some(timers), Some(state)) = (self.cfg.timers.as_ref(), self.states.get_mut(&partition)) else {
            return Ok(());
        };
        let now_ms = crate::timers::epoch_ms(self.now);
        let mut stream = stream;
        for _round in 0..1_000 {
            let due = timers.take_due(state, stream.take(), now_ms)?;
            if due.is_empty() {
                return Ok(());
            }
            for timer in &due {
                let tables = TableViews { partition: self.tables.get(&partition), global: self.global };
                self.processors.on_timer(self.rt, topic, partition, Some(&mut *state), tables, timer)?;
            }
        }
        Err(format!("timers of {topic}-{partition} keep scheduling due timers: 1,000 rounds fired in one call").into())
    }
}

impl Work for BatchWork<'_> {
    /// A record's outputs: the processor's, or — once it exhausted its retries under a
    /// dead-letter policy — the record itself, to the dead-letter topic.
    fn process(&mut self, r: &InputRecord) -> Result<&[OutputRecord], BoxError> {
        let outputs = match dead_letter(self.cfg, self.dead, r) {
            Some(out) => self.processors.only(out),
            None => {
                self.processors.process(
                    self.rt,
                    r,
                    self.states.get_mut(&r.partition),
                    TableViews { partition: self.tables.get(&r.partition), global: self.global },
                )?;
                if let Some(timers) = &self.cfg.timers {
                    self.idle_since.insert(r.partition, (r.topic.clone(), self.now));
                    let stream = r.timestamp.filter(|_| timers.follows_records());
                    self.fire(&r.topic, r.partition, stream)?;
                }
                if let Some(outbox) = self.outbox {
                    // Behind an outbox, rows are records of the batch's transaction.
                    let records: Vec<OutputRecord> =
                        self.processors.take_rows().map(|row| outbox.record(r, &row)).collect::<Result<_, _>>()?;
                    self.processors.extend_outputs(records);
                }
                let mut rows = self.processors.take_rows();
                if rows.len() > 0 {
                    // The record's own topic, shared by its rows: no allocation.
                    self.sink_rows.extend(rows.by_ref().map(|row| SinkRow {
                        topic: r.topic.clone(),
                        partition: r.partition,
                        offset: r.offset,
                        row,
                    }));
                }
                drop(rows);
                self.processors.place(&self.cfg.repartition_topics, self.input_partitions);
                self.processors.outputs()
            }
        };
        *self.outputs_per_partition.entry((r.topic.clone(), r.partition)).or_default() += outputs.len() as u64;
        Ok(outputs)
    }

    /// Wall-clock timers, and the event-time timers of idle partitions (see
    /// [`crate::timers`]), in partition order.
    fn fire_timers(&mut self) -> Result<&[OutputRecord], BoxError> {
        self.processors.clear();
        let cfg = self.cfg;
        let Some(timers) = &cfg.timers else { return Ok(&[]) };
        let mut partitions: Vec<(i32, Topic, SystemTime)> = self
            .idle_since
            .iter()
            .filter(|(p, _)| !self.held.contains(p))
            .map(|(p, (t, at))| (*p, t.clone(), *at))
            .collect();
        partitions.sort_unstable_by_key(|(p, _, _)| *p);
        for (partition, topic, last) in partitions {
            let before = self.processors.outputs().len();
            self.fire(&topic, partition, timers.idle_stream_time(self.now, last))?;
            let fired = (self.processors.outputs().len() - before) as u64;
            if fired > 0 {
                *self.outputs_per_partition.entry((topic, partition)).or_default() += fired;
            }
        }
        self.processors.place(&cfg.repartition_topics, self.input_partitions);
        if self.processors.has_rows() {
            return Err("a timer that fired without a record wrote sink rows: only timers that fire after a record may (see kafka_eos::timers)".into());
        }
        Ok(self.processors.outputs())
    }

    fn take_sink_rows(&mut self) -> Vec<SinkRow<AnyRow>> {
        std::mem::take(self.sink_rows)
    }

    fn state_changes(&mut self) -> Vec<OutputRecord> {
        let mut partitions: Vec<&PartitionState> = self.states.values().collect();
        // In partition order, so the changelog is written the same way every time.
        partitions.sort_by_key(|s| s.partition());
        partitions.into_iter().flat_map(PartitionState::changelog_records).collect()
    }
}

/// The processing part of a cycle: runs `work` over `batch` in order and hands `send` each
/// record's outputs (with the record they came from), then the batch's state changes (with
/// none) — the order in which they join the transaction. Returns (outputs, changelog
/// records). A batch's attempt sends to its producer (`runtime/task/batch.rs`, through the
/// same two steps); the test driver ([`crate::testing`]) to its simulated topics, so both
/// process a batch the same way.
pub(crate) fn process_batch(
    batch: &[InputRecord],
    work: &mut dyn Work,
    mut send: impl FnMut(&OutputRecord, Option<&InputRecord>) -> Result<(), StepError>,
) -> Result<(u64, u64), CycleError> {
    let outputs = process_records(batch, 0, work, &mut send)?;
    let changes = send_state_changes(work, |out| send(out, None))?;
    Ok((outputs, changes))
}

/// Runs `work` over `records` (the batch's from index `first` on, for a processor error's
/// index) and hands `send` each record's outputs; returns how many.
pub(crate) fn process_records(
    records: &[InputRecord],
    first: usize,
    work: &mut dyn Work,
    mut send: impl FnMut(&OutputRecord, Option<&InputRecord>) -> Result<(), StepError>,
) -> Result<u64, CycleError> {
    let mut sent = 0;
    for (i, record) in records.iter().enumerate() {
        let outputs = work.process(record).map_err(|error| CycleError::Processor { index: first + i, error })?;
        for out in outputs {
            send(out, Some(record))?;
        }
        sent += outputs.len() as u64;
    }
    Ok(sent)
}

/// Hands `send` the batch's state changes (changelog records); returns how many.
pub(crate) fn send_state_changes(
    work: &mut dyn Work,
    mut send: impl FnMut(&OutputRecord) -> Result<(), StepError>,
) -> Result<u64, StepError> {
    let changes = work.state_changes();
    for change in &changes {
        send(change)?;
    }
    Ok(changes.len() as u64)
}

/// The dead-letter copy of `r`, if it exhausted its retries under a dead-letter policy.
fn dead_letter(cfg: &PipelineConfig, dead: &HashMap<String, (String, u32)>, r: &InputRecord) -> Option<OutputRecord> {
    if dead.is_empty() {
        return None; // the usual case: no need to format the record's origin to look it up
    }
    if let (Some((message, attempts)), Exhausted::DeadLetter(topic)) =
        (dead.get(&r.origin()), &cfg.processor_error_policy.then)
    {
        let out = OutputRecord::copy_of(r, topic.as_str());
        return Some(
            out.header(DEAD_LETTER_ERROR_HEADER, message).header(DEAD_LETTER_ATTEMPTS_HEADER, attempts.to_string()),
        );
    }
    None
}
