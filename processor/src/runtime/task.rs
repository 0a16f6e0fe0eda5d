//! A partition task: one OS thread that owns a producer and the batches of its partitions.
//!
//! In [`ExactlyOnce`](crate::Guarantee::ExactlyOnce) a task owns exactly one input
//! partition and lives from its assignment to its revocation; in the other guarantees one
//! long-lived task owns every partition of the instance. The loop is the same:
//!
//! ```text
//!            +-------- record (first of a batch) -------+
//!            v                                          |
//!   [idle] --+--> [collecting] -- interval elapsed / max records --> run_cycle --+--> [idle]
//!     ^                |                                                        |
//!     |                +-- revoke: run_cycle (or drop the batch if lost) -------+
//!     +-- assign / shutdown
//! ```
//!
//! The batch is only *collected* while the interval runs; the transaction is begun,
//! processed, produced and committed in one go by [`run_cycle`]. So a revocation, which is
//! only read between cycles, never finds a transaction open: it finds a collected batch,
//! which it commits (keeping the work) or, if the partitions were *lost* (the group already
//! gave them to someone else), drops without a transaction ever having begun.
//!
//! A batch that keeps *failing* would keep the task from reading its inbox until the task
//! timeout: the consumer thread therefore sets the task's [`Interrupt`] before it sends a
//! revocation or starts a shutdown, and the retries of [`Task::commit_batch`] (and every
//! wait of the cycle) end by the interrupt's deadline — the batch is then aborted and
//! dropped ([`Outcome::Dropped`]). See [`interrupt`](super::interrupt) for why and by when.
//!
//! The task never waits for the consumer thread (it only sends on the unbounded control
//! channel, and only reads the interrupt), so the consumer thread may block on it, bounded,
//! inside a rebalance callback.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;

use crate::config::{Exhausted, Guarantee};
use crate::error::{Error, ErrorClass};
use crate::metrics::TaskMetrics;
use crate::observe::{Interruption, Outcome, TransactionEvent};
use crate::processor::driver::Instances;
use crate::record::{InputRecord, OutputRecord};
use crate::runtime::interrupt::{Deadline, Interrupt, ABORT_GRACE};
use crate::runtime::{Control, Shared, TopicPartition};
use crate::state::{changelog, PartitionState, Tally};
use crate::txn::{next_offsets, run_cycle, CommitTo, CycleError, CycleStats, Step, StepError, TxnProducer, Work};

/// What the consumer thread sends a task.
pub(crate) enum TaskMsg {
    /// A consumed record of one of the task's partitions.
    Record(InputRecord),
    /// New partitions and the group generation they belong to (long-lived tasks only).
    Assign { partitions: Vec<TopicPartition>, group: Arc<ConsumerGroupMetadata> },
    /// Give these partitions up; reply when their batch is committed (or dropped, if lost).
    Revoke { partitions: Vec<TopicPartition>, lost: bool, reply: SyncSender<RevokeReply> },
    /// Commit what is collected and exit.
    Shutdown,
}

/// A task's answer to a revocation.
pub(crate) struct RevokeReply {
    /// At-least-once: the next offsets acknowledged for the revoked partitions, for the
    /// consumer to commit synchronously before the revocation completes.
    pub acked_offsets: Vec<(TopicPartition, i64)>,
}

enum Flush {
    Committed,
    /// The producer was fenced or is unusable: it is dropped, the batch with it.
    GaveUp(StepError),
    /// The task was interrupted (see [`interrupt`](super::interrupt)): the batch's
    /// transaction is aborted and the batch dropped; the producer stays.
    Dropped {
        because: Interruption,
        reason: String,
    },
    /// The pipeline must stop.
    Stop(Error),
}

/// What a failed or successful cycle leads to.
enum Next {
    /// The batch is done with (committed, dropped, or the producer or pipeline given up).
    Done(Flush),
    /// Replay the batch after this pause.
    Retry(Duration),
}

pub(crate) struct Task {
    pub(crate) id: u64,
    shared: Arc<Shared>,
    producer: Option<TxnProducer>,
    transactional_id: Option<String>,
    group: Option<Arc<ConsumerGroupMetadata>>,
    owned: HashSet<TopicPartition>,
    /// Failed attempts per input record (by origin) in the current batch.
    failures: HashMap<String, u32>,
    /// Records to route to the dead-letter topic on the next attempt, with their error.
    dead: HashMap<String, (String, u32)>,
    /// At-least-once: next offset acknowledged per partition.
    acked: HashMap<TopicPartition, i64>,
    /// State stores per input partition (stateful processors only), restored from their
    /// changelogs before the partition's first record and dropped when it is revoked.
    states: HashMap<i32, PartitionState>,
    /// The processor's instances, one per input partition (made at its first record).
    processors: Instances,
    stopped: bool,
    control: Sender<Control>,
    /// Set by the consumer thread on revocation and shutdown: bounds the retries of a
    /// failing batch (see [`interrupt`](super::interrupt)).
    interrupt: Arc<Interrupt>,
    /// `topic-partition` for a per-partition task, `all` for an instance task: the
    /// `partition` label of its metrics and spans.
    label: String,
    metrics: TaskMetrics,
}

impl Task {
    /// Creates the task's producer and, if transactional, runs `init_transactions` — which
    /// fences the previous owner of the transactional.id and resolves its open transaction.
    /// Runs on the task's own thread; the caller waits for the result before letting the
    /// consumer fetch the partitions' committed offsets.
    pub(crate) fn start(
        id: u64,
        shared: Arc<Shared>,
        transactional_id: Option<String>,
        partitions: Vec<TopicPartition>,
        group: Option<Arc<ConsumerGroupMetadata>>,
        interrupt: Arc<Interrupt>,
    ) -> Result<Task, Error> {
        let control = shared.control.clone();
        let processor = shared.processor.clone();
        let label = match (shared.cfg.guarantee, partitions.as_slice()) {
            (Guarantee::ExactlyOnce, [(t, p)]) => format!("{t}-{p}"),
            _ => "all".to_string(),
        };
        let metrics = TaskMetrics::new(&shared.cfg.application_id, &label);
        let mut task = Task {
            label,
            metrics,
            id,
            shared,
            producer: None,
            transactional_id,
            group,
            owned: partitions.into_iter().collect(),
            failures: HashMap::new(),
            dead: HashMap::new(),
            acked: HashMap::new(),
            states: HashMap::new(),
            processors: Instances::new(processor),
            stopped: false,
            control,
            interrupt,
        };
        task.ensure_producer()?;
        Ok(task)
    }

    fn who(&self) -> String {
        match &self.transactional_id {
            Some(id) => format!("transactional.id {id}"),
            None => format!("the {} producer", self.shared.cfg.application_id),
        }
    }

    fn ensure_producer(&mut self) -> Result<(), Error> {
        if self.producer.is_some() {
            return Ok(());
        }
        let started = Instant::now();
        let mut p = TxnProducer::create(&self.shared.cfg, self.transactional_id.clone(), &self.label)
            .map_err(|e| e.into_error(&self.who()))?;
        p.init((Instant::now() + self.shared.cfg.task_timeout).into()).map_err(|e| e.into_error(&self.who()))?;
        tracing::debug!(task = self.id, transactional_id = ?p.transactional_id(), elapsed_ms = started.elapsed().as_millis() as u64, "producer ready");
        self.producer = Some(p);
        Ok(())
    }

    /// The task loop; returns when revoked (per-partition tasks), shut down, or disconnected.
    pub(crate) fn run(mut self, inbox: Receiver<TaskMsg>) {
        let cfg = self.shared.cfg.clone();
        let per_partition = cfg.guarantee == Guarantee::ExactlyOnce;
        let mut batch: Vec<InputRecord> = Vec::new();
        let mut deadline = Instant::now();
        loop {
            let msg = if batch.is_empty() {
                inbox.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                inbox.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            };
            match msg {
                Ok(TaskMsg::Record(r)) => {
                    if self.stopped || self.producer.is_none() || !self.owned.contains(&(r.topic.clone(), r.partition))
                    {
                        continue; // never committed: the partition's next owner reads it again
                    }
                    if !cfg.stores.is_empty() && !self.states.contains_key(&r.partition) {
                        if let Err(e) = self.restore() {
                            self.stop(e);
                            continue;
                        }
                    }
                    if batch.is_empty() {
                        deadline = Instant::now() + cfg.commit_interval;
                    }
                    batch.push(r);
                    if batch.len() >= cfg.max_records_per_transaction {
                        self.flush(&mut batch);
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.flush(&mut batch),
                Ok(TaskMsg::Assign { partitions, group }) => {
                    self.flush(&mut batch);
                    self.group = Some(group);
                    self.owned.extend(partitions);
                    if let Err(e) = self.ensure_producer() {
                        self.stop(e);
                    }
                }
                Ok(TaskMsg::Revoke { partitions, lost, reply }) => {
                    if lost {
                        tracing::info!(
                            task = self.id,
                            ?partitions,
                            dropped = batch.len(),
                            "partitions lost: dropping the uncommitted batch"
                        );
                        batch.clear();
                    } else {
                        self.flush(&mut batch);
                    }
                    let acked_offsets =
                        partitions.iter().filter_map(|tp| self.acked.remove(tp).map(|o| (tp.clone(), o))).collect();
                    for tp in &partitions {
                        self.owned.remove(tp);
                        self.processors.close(&tp.0, tp.1, self.states.get(&tp.1));
                        self.states.remove(&tp.1);
                    }
                    // Before the reply: once it is sent the consumer thread may set the
                    // next revocation's interrupt, which must not be cleared here.
                    self.interrupt.clear_revocation();
                    let _ = reply.send(RevokeReply { acked_offsets });
                    if per_partition {
                        return;
                    }
                }
                Ok(TaskMsg::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    self.flush(&mut batch);
                    self.processors.close_all(&self.states);
                    return;
                }
            }
        }
    }

    fn stop(&mut self, e: Error) {
        tracing::error!(task = self.id, error = %e, "stopping the pipeline");
        self.stopped = true;
        let _ = self.control.send(Control::Fatal(e));
    }

    /// Commits the collected batch, retrying per the error classes, and empties it.
    fn flush(&mut self, batch: &mut Vec<InputRecord>) {
        if batch.is_empty() || self.stopped {
            batch.clear();
            return;
        }
        match self.commit_batch(batch) {
            Flush::Committed => {}
            Flush::GaveUp(e) => {
                self.shared.shutdown.stats().producers_fenced.inc();
                crate::metrics::producer_fenced(&self.shared.cfg.application_id);
                tracing::warn!(task = self.id, error = %e, "producer given up; the partitions go back to the group");
                self.producer = None;
                // The group reassigns the partitions; whoever gets them restores their state.
                self.processors.close_all(&self.states);
                self.states.clear();
                let _ = self.control.send(Control::Fenced { task: self.id, error: e.to_string() });
            }
            Flush::Dropped { because, reason } => {
                tracing::warn!(
                    task = self.id,
                    records = batch.len(),
                    %because,
                    last_error = %reason,
                    "batch dropped uncommitted; the partitions' next owner resumes from the committed offset"
                );
            }
            Flush::Stop(e) => self.stop(e),
        }
        self.failures.clear();
        self.dead.clear();
        batch.clear();
    }

    /// Runs the batch's transaction until it commits, replaying it after aborts, within the
    /// task timeout — or less, once the consumer thread interrupts the task.
    fn commit_batch(&mut self, batch: &[InputRecord]) -> Flush {
        let cfg = self.shared.cfg.clone();
        let task_deadline = Instant::now() + cfg.task_timeout;
        let interrupt = self.interrupt.clone();
        let deadline = Deadline::interruptible(task_deadline, &interrupt);
        let mut backoff = Duration::from_millis(100);
        let mut last_error = None;
        loop {
            if let Some(because) = interrupt.expired() {
                // Interrupted during the pause before a replay: the aborted cycle is
                // reported already, the drop gets an event of its own (no transaction).
                let reason = match last_error {
                    Some(reason) => {
                        let outcome = Outcome::Dropped { because, reason: String::clone(&reason) };
                        self.report(batch, &HashMap::new(), Duration::ZERO, CycleStats::default(), &outcome);
                        reason
                    }
                    None => "interrupted before the first attempt".into(),
                };
                return Flush::Dropped { because, reason };
            }
            let Some(producer) = self.producer.as_mut() else {
                return Flush::GaveUp(StepError::given_up());
            };
            let commit_to = match (&self.group, producer.transactional_id()) {
                (Some(g), Some(_)) => CommitTo::Transaction(g),
                (None, Some(_)) => {
                    return Flush::Stop(Error::Internal("a transactional task has no group metadata".into()))
                }
                _ => CommitTo::Consumer,
            };
            let span = tracing::info_span!(
                "transaction",
                pipeline = %cfg.application_id,
                partition = %self.label,
                transactional_id = self.transactional_id.as_deref().unwrap_or("-"),
                records = batch.len(),
                outcome = tracing::field::Empty,
                duration_us = tracing::field::Empty,
            );
            let _entered = span.enter();
            let started = Instant::now();
            let mut work = BatchWork {
                shared: &self.shared,
                dead: &self.dead,
                states: &mut self.states,
                processors: &mut self.processors,
                outputs_per_partition: HashMap::new(),
            };
            let result = run_cycle(producer, batch, &mut work, commit_to, deadline);
            let outputs_per_partition = std::mem::take(&mut work.outputs_per_partition);
            if result.is_ok() {
                self.commit_states();
            } else {
                self.states.values_mut().for_each(PartitionState::abort);
            }
            let elapsed = started.elapsed();
            let stats = result.as_ref().map(|s| *s).unwrap_or_default();
            let (outcome, next) = match result {
                Ok(stats) => (Outcome::Committed, Next::Done(self.committed(batch, stats))),
                Err(CycleError::Processor { index, error }) => {
                    last_error = Some(error.to_string());
                    self.processor_failed(batch, index, error, deadline)
                }
                Err(CycleError::Kafka(e)) => {
                    last_error = Some(e.to_string());
                    self.kafka_failed(batch, e, deadline, task_deadline, &mut backoff)
                }
            };
            self.report(batch, &outputs_per_partition, elapsed, stats, &outcome);
            match next {
                Next::Done(flush) => return flush,
                Next::Retry(pause) => deadline.sleep(pause),
            }
        }
    }

    /// Counts a committed batch; at-least-once: hands its offsets to the consumer thread.
    fn committed(&mut self, batch: &[InputRecord], stats: CycleStats) -> Flush {
        let s = self.shared.shutdown.stats();
        s.records_in.add(batch.len() as u64);
        s.records_out.add(stats.outputs);
        s.transactions_committed.inc();
        s.dead_lettered.add(self.dead.len() as u64);
        let offsets: Vec<_> = next_offsets(batch)
            .elements()
            .iter()
            .filter_map(|e| e.offset().to_raw().map(|o| ((e.topic().to_string(), e.partition()), o)))
            .collect();
        for (tp, next) in &offsets {
            self.shared.shutdown.health_state().committed(tp, *next);
        }
        if self.producer.as_ref().is_some_and(|p| p.transactional_id().is_none()) {
            self.acked.extend(offsets.iter().cloned());
            let _ = self.control.send(Control::CommitOffsets(offsets));
        }
        Flush::Committed
    }

    /// Aborts the open transaction after a failed cycle. Once the task is interrupted the
    /// abort still gets [`ABORT_GRACE`]: refused for lack of time, it would give the
    /// producer up for nothing. `Err` when the abort itself failed (the producer is given up).
    ///
    /// # Why a failed abort gives the producer up, whatever the error
    /// Including `INVALID_TXN_STATE` (the coordinator holds the transaction in a state that
    /// cannot be aborted — completing a commit, or an abort of its own after a timeout or an
    /// epoch bump):
    /// - librdkafka itself marks the producer *fatal* when `EndTxn` fails with
    ///   `INVALID_TXN_STATE`, `PRODUCER_FENCED` or `INVALID_PRODUCER_EPOCH`: every later call
    ///   fails, so there is nothing to retry with (the mock-cluster test
    ///   `abort_refused_with_invalid_txn_state_leaves_the_producer_unusable` shows it);
    /// - whatever the error, the transaction's fate is then unknown to the task: it may yet
    ///   commit. Replaying the batch with a fresh producer would duplicate it if it did, and
    ///   dropping it would lose it if it did not; only the committed offsets tell, and only
    ///   once the transaction is resolved. Giving the partitions back to the group gets
    ///   exactly that: the next owner's `init_transactions` fences this producer and
    ///   completes the transaction, then the offsets are fetched (stable) and processing
    ///   resumes after whatever committed. The price is one rebalance.
    fn abort(&mut self, deadline: Deadline<'_>) -> Result<(), (Outcome, Next)> {
        let producer = self.producer.as_mut().expect("a cycle just ran on it");
        match producer.abort(deadline.with_grace(ABORT_GRACE)) {
            Ok(()) => {
                self.shared.shutdown.stats().transactions_aborted.inc();
                Ok(())
            }
            Err(e) => Err((Outcome::GaveUp { reason: e.to_string() }, Next::Done(Flush::GaveUp(e)))),
        }
    }

    /// The processor failed on `batch[index]`: abort, then drop the batch if the task was
    /// interrupted, else apply the processor error policy.
    fn processor_failed(
        &mut self,
        batch: &[InputRecord],
        index: usize,
        error: crate::error::BoxError,
        deadline: Deadline<'_>,
    ) -> (Outcome, Next) {
        let message = error.to_string();
        if let Err(gave_up) = self.abort(deadline) {
            return gave_up;
        }
        if let Some(because) = self.interrupt.expired() {
            return dropped(because, message);
        }
        let origin = batch[index].origin();
        let attempts = self.failures.entry(origin.clone()).or_insert(0);
        *attempts += 1;
        let attempts = *attempts;
        tracing::warn!(task = self.id, record = %origin, attempts, error = %message, "processor failed; transaction aborted");
        let outcome = Outcome::Aborted { class: None, reason: message.clone() };
        let policy = &self.shared.cfg.processor_error_policy;
        if attempts > policy.retries {
            match &policy.then {
                Exhausted::Stop => {
                    return (outcome, Next::Done(Flush::Stop(Error::Processor { origin, attempts, source: error })))
                }
                Exhausted::DeadLetter(_) => {
                    self.dead.insert(origin, (message, attempts));
                }
            }
        }
        (outcome, Next::Retry(policy.backoff))
    }

    /// A Kafka call failed: give the producer up, or abort and replay with backoff until
    /// the task timeout — or drop the batch if the task was interrupted.
    fn kafka_failed(
        &mut self,
        batch: &[InputRecord],
        e: StepError,
        deadline: Deadline<'_>,
        task_deadline: Instant,
        backoff: &mut Duration,
    ) -> (Outcome, Next) {
        if gives_up(&e) {
            return (Outcome::GaveUp { reason: e.to_string() }, Next::Done(Flush::GaveUp(e)));
        }
        if let Err(gave_up) = self.abort(deadline) {
            return gave_up;
        }
        if let Some(because) = self.interrupt.expired() {
            return dropped(because, e.to_string());
        }
        let outcome = Outcome::Aborted { class: Some(e.class), reason: e.to_string() };
        if Instant::now() + *backoff >= task_deadline {
            let timeout = self.shared.cfg.task_timeout;
            let what = format!("committing a batch of {} records with {}", batch.len(), self.who());
            return (outcome, Next::Done(Flush::Stop(Error::TaskTimeout { what, timeout, last: e.to_string() })));
        }
        tracing::warn!(task = self.id, error = %e, "transaction aborted; replaying the batch");
        let pause = *backoff;
        *backoff = (*backoff * 2).min(Duration::from_secs(5));
        (outcome, Next::Retry(pause))
    }
}

/// An interrupted batch's end: its transaction is aborted, the batch is dropped.
fn dropped(because: Interruption, reason: String) -> (Outcome, Next) {
    (Outcome::Dropped { because, reason: reason.clone() }, Next::Done(Flush::Dropped { because, reason }))
}

impl Task {
    /// Rebuilds the stores of every owned partition that has none yet from their changelogs
    /// (see [`crate::state`]): called before a partition's first record is processed, it
    /// restores the whole assignment of an instance task in one pass.
    fn restore(&mut self) -> Result<(), Error> {
        let mut partitions: Vec<i32> =
            self.owned.iter().map(|tp| tp.1).filter(|p| !self.states.contains_key(p)).collect();
        partitions.sort_unstable();
        let deadline = Instant::now() + self.shared.cfg.task_timeout;
        let (states, records) = changelog::restore(&self.shared.cfg, &partitions, deadline)?;
        self.shared.shutdown.stats().restored_records.add(records);
        self.states.extend(states.into_iter().map(|s| (s.partition(), s)));
        Ok(())
    }

    /// The transaction committed: every partition's state overlay becomes committed state,
    /// and the operators' tallies are counted.
    fn commit_states(&mut self) {
        let pipeline = &self.shared.cfg.application_id;
        let stats = self.shared.shutdown.stats();
        for st in self.states.values_mut() {
            let committed = st.commit();
            for (store, n) in committed.changes {
                crate::metrics::changelog_committed(pipeline, &store, n);
                stats.changelog_records.add(n);
            }
            for ((tally, store), n) in committed.tallies {
                crate::metrics::tally_committed(pipeline, tally, &store, n);
                match tally {
                    Tally::Duplicate => stats.duplicates_dropped.add(n),
                    Tally::Late => stats.late_records.add(n),
                }
            }
        }
    }

    /// Tells the hooks, the metrics, the span and the debug log how a cycle went.
    fn report(
        &mut self,
        batch: &[InputRecord],
        outputs_per_partition: &HashMap<TopicPartition, u64>,
        total: Duration,
        stats: CycleStats,
        outcome: &Outcome,
    ) {
        let records = batch.len();
        let span = tracing::Span::current();
        span.record("duration_us", total.as_micros() as u64);
        match outcome {
            Outcome::Committed => {
                span.record("outcome", "committed");
                self.metrics.committed(records, stats.process, stats.commit, total);
                let mut inputs: HashMap<TopicPartition, u64> = HashMap::new();
                for r in batch {
                    *inputs.entry((r.topic.clone(), r.partition)).or_default() += 1;
                }
                let mut dead: HashMap<TopicPartition, u64> = HashMap::new();
                for (origin, _) in self.dead.iter() {
                    if let Some((t, p, _)) = crate::record::parse_origin(origin.as_bytes()) {
                        *dead.entry((t, p)).or_default() += 1;
                    }
                }
                for (tp, n) in &inputs {
                    let out = outputs_per_partition.get(tp).copied().unwrap_or(0);
                    self.metrics.partition_records(tp, *n, out, dead.get(tp).copied().unwrap_or(0));
                }
                tracing::debug!(
                    task = self.id,
                    records,
                    outputs = stats.outputs,
                    commit_us = stats.commit.as_micros() as u64,
                    "transaction committed"
                );
            }
            Outcome::Aborted { class, .. } => {
                span.record("outcome", "aborted");
                self.metrics.aborted(*class);
            }
            Outcome::GaveUp { .. } => {
                span.record("outcome", "gave_up");
            }
            Outcome::Dropped { .. } => {
                span.record("outcome", "dropped");
                self.metrics.interrupted();
            }
        }
        if self.shared.hooks.is_empty() {
            return;
        }
        let event = TransactionEvent {
            transactional_id: self.transactional_id.clone(),
            records,
            outputs: stats.outputs,
            process: stats.process,
            await_acks: stats.await_acks,
            commit: stats.commit,
            total,
            outcome: outcome.clone(),
        };
        for hook in &self.shared.hooks {
            hook(&event);
        }
    }
}

/// Whether a Kafka error means the producer must be dropped: fenced, fatal, a commit still
/// failing after its retries — in an unknown state that the producer may not abort — or
/// offsets refused because this consumer is no longer the group member the task's group
/// metadata names.
pub(crate) fn gives_up(e: &StepError) -> bool {
    matches!(e.class, ErrorClass::Fenced | ErrorClass::Fatal)
        || (e.step == Step::Commit && e.class == ErrorClass::Retriable)
        || (e.step == Step::SendOffsets && left_the_group(&e.err))
}

/// `send_offsets_to_transaction` refused with UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or
/// FENCED_INSTANCE_ID: the group expired this member (its session timed out: a stall, a
/// partition) or moved to a newer generation. The task's group metadata is fixed at
/// assignment, so no replay can ever succeed with it: replaying until the task timeout
/// (as an abortable error would) livelocks the partition, and the revocation that waits
/// for this task blocks the consumer from rejoining. Giving the producer up ends the cycle
/// at once; the group reassigns the partition, whose next owner resumes from the committed
/// offset. (Found by the chaos suite's stall scenario.)
fn left_the_group(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode as C;
    matches!(e, rdkafka::error::KafkaError::Transaction(rd)
        if matches!(rd.code(), C::UnknownMemberId | C::IllegalGeneration | C::FencedInstanceId))
}

/// One cycle's work for [`run_cycle`]: the processor (with the record's partition state),
/// or the dead-letter route; then the state changes.
struct BatchWork<'a> {
    shared: &'a Shared,
    /// Records that exhausted their retries under a dead-letter policy, with their error.
    dead: &'a HashMap<String, (String, u32)>,
    states: &'a mut HashMap<i32, PartitionState>,
    processors: &'a mut Instances,
    outputs_per_partition: HashMap<TopicPartition, u64>,
}

impl Work for BatchWork<'_> {
    /// A record's outputs: the processor's, or — once it exhausted its retries under a
    /// dead-letter policy — the record itself, to the dead-letter topic.
    fn process(&mut self, r: &InputRecord) -> Result<&[OutputRecord], crate::error::BoxError> {
        let outputs = match dead_letter(self.shared, self.dead, r) {
            Some(out) => self.processors.only(out),
            None => self.processors.process(&self.shared.rt, r, self.states.get_mut(&r.partition))?,
        };
        *self.outputs_per_partition.entry((r.topic.clone(), r.partition)).or_default() += outputs.len() as u64;
        Ok(outputs)
    }

    fn state_changes(&mut self) -> Vec<OutputRecord> {
        self.states.values().flat_map(PartitionState::changelog_records).collect()
    }
}

/// The dead-letter copy of `r`, if it exhausted its retries under a dead-letter policy.
fn dead_letter(shared: &Shared, dead: &HashMap<String, (String, u32)>, r: &InputRecord) -> Option<OutputRecord> {
    if dead.is_empty() {
        return None; // the usual case: no need to format the record's origin to look it up
    }
    if let (Some((message, attempts)), Exhausted::DeadLetter(topic)) =
        (dead.get(&r.origin()), &shared.cfg.processor_error_policy.then)
    {
        let out = OutputRecord::copy_of(r, topic.as_str());
        return Some(out.header("kafka-eos.error", message).header("kafka-eos.attempts", attempts.to_string()));
    }
    None
}

impl StepError {
    fn given_up() -> StepError {
        StepError { step: Step::Create, class: ErrorClass::Fatal, err: rdkafka::error::KafkaError::Canceled }
    }
}
