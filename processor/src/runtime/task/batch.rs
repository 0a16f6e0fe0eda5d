//! One batch, from its first record to its end: the transaction cycle of `docs/semantics.md`,
//! in the order it runs. [`TxnProducer`] owns the transaction; a [`Batch`] drives it.
//!
//! ```text
//!  collect   Batch::add        records arrive until the commit interval or the record bound
//!  begin     Steps::begin      begin_transaction, then the timers due without a record
//!  process   Steps::process    each record not processed yet: the processor, its outputs
//!                              produced with the origin header, the timers it made due
//!  close     Steps::close      the state changes produced -> every delivery report
//!                              awaited -> [sink write, or an exactly-once sink's rows
//!                              prepared] -> send_offsets_to_transaction (marked:
//!                              txn/offsets.rs) -> commit_transaction
//!  settle    Batch::attempts   committed: the task merges the state overlays and counts
//!                              the batch (Task::commit_states, Task::committed);
//!                              failed (Task::attempt_failed): abort and replay, fence and
//!                              reconcile, give the producer up, or drop the batch
//!                              (failed.rs, unknown.rs, sink.rs; reconcile::verdict
//!                              decides) until one ends it
//!  report    Batch::report     every attempt: hooks, metrics, the transaction span
//!  end       Batch::end        the batch ends (BatchEnd); uncommitted, Task::settle
//!                              (failed.rs) acts on why; the batch is emptied
//! ```
//!
//! Every attempt runs `Batch::attempt`: begin, process what is not processed yet, close.
//! With `process_while_collecting` the first attempt runs begin and process as the batch
//! collects (the transaction holds the same records in the same order); a replay runs them
//! in one go. A first attempt begun while collecting holds no transaction slot and is closed
//! even when the task is interrupted (it then fails at once and is aborted like any attempt).
//! At-least-once runs the same steps without the transaction calls; its offsets go to the
//! consumer thread once the attempt succeeded. Where the sink goes and why: [`crate::sink`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::TopicPartitionList;

use super::cadence::{close_at, latest_close};
use super::end::{BatchEnd, Next};
use super::Task;
use crate::error::{Error, ErrorClass};
use crate::observe::{Outcome, Reconciliation, TransactionEvent};
use crate::partition::{partition_ranges, TopicPartition};
use crate::processing::{process_records, send_state_changes, BatchWork};
use crate::record::InputRecord;
use crate::runtime::interrupt::{Deadline, ABORT_GRACE};
use crate::runtime::slots::Slots;
use crate::txn::{next_offsets, CycleError, CycleStats, SinkStep, Step, StepError, TxnProducer, Work};

/// The records collected for one transaction, and its first attempt if it runs as they come.
pub(super) struct Batch {
    records: Vec<InputRecord>,
    /// When the collection ends: a commit interval after the previous batch closed, or as
    /// soon as the records already received are in if that is past (see [`Batch::add`]).
    closes_at: Instant,
    /// When the collection ends although records keep arriving ([`latest_close`]).
    closes_by: Instant,
    /// When the previous batch (or transaction of timers) closed and its commit began.
    last_closed: Option<Instant>,
    /// When the first record came: the `collect` and `idle` times of the first attempt's
    /// report (taken by it; set again at the next batch's first record).
    collect_started: Option<Instant>,
    /// The first attempt, begun at the first record (`process_while_collecting`).
    open: Option<Attempt>,
}

/// An attempt begun while the batch collects.
enum Attempt {
    /// Begun at `started`; the batch's first `processed` records are processed and produced.
    Open { started: Instant, processed: usize, stats: CycleStats },
    /// Begun at `started`, it failed: the batch ends at once, with this as its first result.
    Failed { started: Instant, error: CycleError },
}

/// Where an attempt's input offsets go.
enum CommitTo<'a> {
    /// Into the transaction: these offsets, with this consumer group metadata (exactly-once).
    /// Never empty for a transaction that has anything to commit: a transaction of timers
    /// alone sends where its partitions stand, so that its outcome can be read back and, in
    /// per-consumer mode, the group generation fences it (`positions.rs`).
    Transaction { group: &'a Arc<ConsumerGroupMetadata>, offsets: &'a TopicPartitionList },
    /// Nowhere yet: the task hands them to the consumer once committed (at-least-once).
    Consumer,
}

/// What the steps of one attempt act on: the task's producer and the attempt's work (the
/// processor and the partitions' state), bounded by the attempt's deadline.
struct Steps<'a> {
    producer: &'a mut TxnProducer,
    work: BatchWork<'a>,
    deadline: Deadline<'a>,
}

impl Steps<'_> {
    /// One attempt from where it stands: begun unless `stats` says it is (then its first
    /// `processed` records are processed already), the rest processed, then closed.
    fn run(
        mut self,
        batch: &[InputRecord],
        processed: usize,
        stats: Option<CycleStats>,
        to: CommitTo<'_>,
        sink: SinkStep<'_>,
    ) -> Result<CycleStats, CycleError> {
        let mut stats = match stats {
            Some(stats) => stats,
            None => self.begin()?,
        };
        if processed < batch.len() {
            self.process(&batch[processed..], processed, &mut stats)?;
        }
        self.close(batch, to, sink, stats)
    }

    /// `begin_transaction`, then the timers due without a record.
    fn begin(&mut self) -> Result<CycleStats, CycleError> {
        let started = Instant::now();
        self.producer.begin()?;
        let fired = self.work.fire_timers().map_err(CycleError::Timer)?;
        for out in fired {
            self.producer.send(out, None, self.deadline)?;
        }
        Ok(CycleStats { outputs: fired.len() as u64, process: started.elapsed(), ..CycleStats::default() })
    }

    /// Processes `records` — the batch's from index `first` on — and produces their outputs.
    fn process(&mut self, records: &[InputRecord], first: usize, stats: &mut CycleStats) -> Result<(), CycleError> {
        let started = Instant::now();
        let (producer, deadline) = (&mut *self.producer, self.deadline);
        stats.outputs +=
            process_records(records, first, &mut self.work, |out, origin| producer.send(out, origin, deadline))?;
        stats.process += started.elapsed();
        Ok(())
    }

    /// The batch's state changes, every delivery report, the sink's step, the offsets and
    /// the commit.
    fn close(
        mut self,
        batch: &[InputRecord],
        to: CommitTo<'_>,
        sink: SinkStep<'_>,
        mut stats: CycleStats,
    ) -> Result<CycleStats, CycleError> {
        let (producer, deadline) = (&mut *self.producer, self.deadline);
        let mut phase = Instant::now();
        stats.changelog = send_state_changes(&mut self.work, |out| producer.send(out, None, deadline))?;
        stats.process += lap(&mut phase);
        producer.await_acks(deadline)?;
        stats.await_acks = lap(&mut phase);
        match sink {
            SinkStep::None => {}
            SinkStep::BeforeOffsets(sink, rt) => {
                sink.prepare(partition_ranges(batch), self.work.take_sink_rows()).map_err(CycleError::Sink)?;
                sink.write(rt, deadline.remaining()).map_err(CycleError::Sink)?;
                stats.sink = lap(&mut phase);
            }
            SinkStep::AfterCommit { sink, rt, anchors } => {
                if !anchors.is_empty() {
                    sink.prepare(anchors, Vec::new()).map_err(CycleError::Sink)?;
                    sink.write(rt, deadline.remaining()).map_err(CycleError::Sink)?;
                }
                // Prepared before the commit: a commit whose outcome is reconciled as
                // committed still has its rows to write.
                sink.prepare(partition_ranges(batch), self.work.take_sink_rows()).map_err(CycleError::Sink)?;
            }
        }
        if let CommitTo::Transaction { group, offsets } = to {
            let started = phase;
            if offsets.count() > 0 {
                producer.send_offsets(offsets, group, deadline)?;
            }
            stats.send_offsets = started.elapsed();
            producer.commit(deadline)?;
            stats.commit = lap(&mut phase);
        }
        Ok(stats)
    }
}

impl Batch {
    pub(super) fn new() -> Batch {
        let now = Instant::now();
        Batch {
            records: Vec::new(),
            closes_at: now,
            closes_by: now,
            last_closed: None,
            collect_started: None,
            open: None,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether a first attempt was begun while collecting (its transaction may be open).
    pub(super) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// How long the batch still collects.
    pub(super) fn closes_in(&self) -> Duration {
        self.closes_at.saturating_duration_since(Instant::now())
    }

    /// Whether the batch has collected as long as it may while records keep arriving.
    pub(super) fn is_overdue(&self) -> bool {
        Instant::now() >= self.closes_by
    }

    /// Drops the collected records (no attempt is open: see the callers).
    pub(super) fn clear(&mut self) {
        self.records.clear();
    }

    /// Drops the records of `partitions` (lost: their outputs cannot be committed).
    pub(super) fn drop_partitions(&mut self, partitions: &[TopicPartition]) {
        self.records.retain(|r| !partitions.iter().any(|(t, p)| *p == r.partition && *t == r.topic));
    }

    /// Collects `record`; with `process_while_collecting`, runs it through the first attempt
    /// (begun at the batch's first record). Returns `false` once that attempt failed: the
    /// caller ends the batch at once, which handles the failure as any attempt's.
    ///
    /// Batches close on a cadence anchored at the previous close, as Kafka Streams commits
    /// when the interval since its last commit has passed: a record waits at most one commit
    /// interval, on average half of one, whatever the commit takes. The first records after
    /// an idle spell (the interval already past) close as soon as the inbox is drained, or
    /// one interval after the first of them under a backlog ([`Batch::is_overdue`]).
    pub(super) fn add(&mut self, record: InputRecord, task: &mut Task) -> bool {
        if self.records.is_empty() {
            let now = Instant::now();
            self.collect_started = Some(now);
            let interval = task.shared.cfg.commit_interval;
            self.closes_at = close_at(self.last_closed, now, interval);
            self.closes_by = latest_close(self.closes_at, now, interval);
        }
        self.records.push(record);
        // Read once per attempt, like a replay's; a failure is met again there.
        if self.records.len() == 1 && streams(task) && task.refresh_tables().is_ok() {
            let first = &self.records[0];
            task.hold_timers(|tp: &TopicPartition| tp.1 == first.partition && tp.0 == first.topic, None);
            let Some(producer) = task.producer.as_mut() else { return true };
            let started = Instant::now();
            let deadline = Deadline::interruptible(started + task.shared.cfg.task_timeout, &task.interrupt);
            let mut steps = Steps { producer, work: task.processing.work(), deadline };
            self.open = Some(match steps.begin() {
                Ok(stats) => Attempt::Open { started, processed: 0, stats },
                Err(error) => Attempt::Failed { started, error },
            });
        }
        let (Some(Attempt::Open { started, processed, stats }), Some(producer)) =
            (self.open.as_mut(), task.producer.as_mut())
        else {
            return !matches!(self.open, Some(Attempt::Failed { .. }));
        };
        let deadline = Deadline::interruptible(Instant::now() + task.shared.cfg.task_timeout, &task.interrupt);
        let mut steps = Steps { producer, work: task.processing.continued_work(), deadline };
        let last = self.records.len() - 1;
        match steps.process(&self.records[last..], last, stats) {
            Ok(()) => {
                *processed = self.records.len();
                true
            }
            Err(error) => {
                let started = *started;
                self.open = Some(Attempt::Failed { error, started });
                false
            }
        }
    }

    /// Ends the batch: commits it, replaying it after aborts, acts on how it ended, and
    /// empties it. With nothing collected, or once the task stopped, only the first attempt
    /// is abandoned.
    pub(super) fn end(&mut self, task: &mut Task) {
        if self.records.is_empty() || task.stopped {
            self.abandon(task);
            self.records.clear();
            return;
        }
        self.commit(task);
    }

    /// Runs a transaction of the timers due without a record ([`crate::timers`]), as an
    /// empty batch.
    pub(super) fn fire_timers(&mut self, task: &mut Task) {
        // A wake-up a little early (the inbox's timeout rounds) finds nothing due: no empty
        // transaction for it.
        let due = task.processing.next_timer_wake().is_some_and(|at| at <= std::time::SystemTime::now());
        if due && !task.stopped && task.producer.is_some() {
            self.commit(task);
        }
    }

    fn commit(&mut self, task: &mut Task) {
        self.last_closed = Some(Instant::now());
        match self.attempts(task) {
            BatchEnd::Committed => {}
            end => task.settle(end, &self.records),
        }
        task.processing.batch_done();
        task.timer_attempts = 0;
        self.records.clear();
    }

    /// Aborts the first attempt, if any, without replaying it: its partitions were lost, or
    /// the pipeline stops. The state overlays go with it; what the batch still holds is
    /// processed again by its next attempt. Returns `false` if the abort failed: the producer
    /// is then given up (or replaced, its partitions rewound), and the batch must be dropped
    /// whole.
    pub(super) fn abandon(&mut self, task: &mut Task) -> bool {
        if self.open.take().is_none() {
            return true;
        }
        task.discard_states();
        let Some(producer) = task.producer.as_mut() else { return false };
        let deadline = Deadline::interruptible(Instant::now() + task.shared.cfg.task_timeout, &task.interrupt);
        match producer.abort(deadline.with_grace(ABORT_GRACE)) {
            Ok(()) => {
                task.shared.shutdown.stats().transactions_aborted.inc();
                tracing::debug!(task = task.id, "open transaction of the collecting batch aborted");
                true
            }
            // Its fate unknown: the producer cannot be trusted with the next batch.
            Err(e) => {
                task.settle(BatchEnd::GaveUp { error: Box::new(e), replaced: false }, &[]);
                false
            }
        }
    }

    /// Runs the batch's attempts until one ends it, within the task timeout — or less, once
    /// the consumer thread interrupts the task.
    fn attempts(&mut self, task: &mut Task) -> BatchEnd {
        let cfg = task.shared.cfg.clone();
        let task_deadline = Instant::now() + cfg.task_timeout;
        let interrupt = task.interrupt.clone();
        let deadline = Deadline::interruptible(task_deadline, &interrupt);
        let mut backoff = Duration::from_millis(100);
        let mut last_error = None;
        // The first attempt, if begun while collecting: closed first (interrupted, it fails at
        // once and is aborted like any attempt).
        let mut first = self.open.take();
        // Set when a revocation or the shutdown ended the wait for a slot.
        let mut handed_back = None;
        // What the attempts commit, kept for a reconcile: the batch's next offsets, or, for
        // timers alone, where the owned partitions stand (positions.rs).
        let offsets = match &self.records[..] {
            [] if task.transactional_id.is_some() => task.standing(deadline),
            records => Ok(next_offsets(records)),
        };
        let offsets = match offsets {
            Ok(offsets) => {
                task.ledger.set_in_flight(offsets.clone());
                task.hold_timers(|tp: &TopicPartition| offsets.find_partition(&tp.0, tp.1).is_some(), Some(deadline));
                offsets
            }
            Err(e) => {
                return match interrupt.expired() {
                    Some(because) => BatchEnd::Dropped { because, reason: e.to_string() },
                    None => BatchEnd::Stop(e),
                }
            }
        };
        loop {
            if let Some(because) = interrupt.expired().or(handed_back).filter(|_| first.is_none()) {
                // Interrupted during the pause before a replay: the aborted attempt is
                // reported already, the drop gets an event of its own (no transaction).
                let reason = match last_error {
                    Some(reason) => {
                        let outcome = Outcome::Dropped { because, reason: String::clone(&reason) };
                        let (now, nothing) = (Instant::now(), CycleStats::default());
                        self.report(task, &HashMap::new(), now, Duration::ZERO, nothing, &outcome);
                        reason
                    }
                    None if handed_back.is_some() => {
                        "handed back: interrupted while waiting for a transaction slot".into()
                    }
                    None => "interrupted before the first attempt".into(),
                };
                if handed_back.is_some() {
                    task.handed_back(self.records.len());
                }
                return BatchEnd::Dropped { because, reason };
            }
            // Every attempt not begun while collecting looks the tables up as they are now.
            if first.is_none() {
                if let Err(e) = task.refresh_tables() {
                    return BatchEnd::Stop(e);
                }
            }
            // The one place a producer whose end was retried is replaced, before any of its
            // transactions begins (TxnProducer::must_be_replaced): whichever way the last
            // batch ended, and the replay of this one.
            if let Err(reason) = task.renew_if_end_retried() {
                return BatchEnd::NoProducer(reason);
            }
            let Some(producer) = task.producer.as_ref() else {
                return BatchEnd::GaveUp { error: Box::new(given_up()), replaced: false };
            };
            // Read afresh for every attempt: in per-consumer mode the generation (member
            // epoch) moves on with every rebalance, including those that leave this task's
            // partitions in place (per-partition mode sends the group id alone).
            let group = match producer.transactional_id().map(|_| task.shared.group_metadata()) {
                None => None,
                Some(None) => return BatchEnd::Stop(Error::Internal("the consumer is gone: no group metadata".into())),
                Some(g) => g,
            };
            let to = match &group {
                Some(group) => CommitTo::Transaction { group, offsets: &offsets },
                None => CommitTo::Consumer,
            };
            // Per-partition mode: wait for a transaction slot (runtime::slots; never blocks
            // while the bound is not engaged), unless a revocation or the shutdown comes:
            // then the batch, with no transaction begun, is handed back at the top. A first
            // attempt begun while collecting holds none, and must not wait.
            let shared = task.shared.clone();
            let interrupted = || interrupt.current().is_some();
            let slot =
                match shared.slots.as_ref().filter(|_| first.is_none()).map(|s| s.acquire(&deadline, &interrupted)) {
                    Some(None) => match interrupt.current() {
                        Some((why, _)) => {
                            handed_back = Some(why);
                            continue; // dropped at the top
                        }
                        None => return BatchEnd::Stop(Slots::timed_out(cfg.task_timeout)),
                    },
                    Some(Some(slot)) => Some(slot),
                    None => None,
                };
            let span = tracing::info_span!(
                "transaction",
                pipeline = %cfg.application_id,
                partition = %task.label,
                transactional_id = task.transactional_id.as_deref().unwrap_or("-"),
                records = self.records.len(),
                outcome = tracing::field::Empty,
                duration_us = tracing::field::Empty,
            );
            let _entered = span.enter();
            let closing = Instant::now();
            let (result, started) = self.attempt(task, first.take(), to, deadline);
            let outputs_per_partition = task.processing.take_outputs();
            let elapsed = started.unwrap_or(closing).elapsed();
            // The state overlays follow the transaction: merged once it is known committed,
            // discarded once it is known aborted (after a Kafka error that may be later).
            let mut stats = result.as_ref().map(|s| *s).unwrap_or_default();
            let batch = &self.records[..];
            let (outcome, next) = match result {
                Ok(stats) => {
                    task.commit_states();
                    let mark = task.producer.as_ref().and_then(|p| p.offsets_mark().map(str::to_owned));
                    (Outcome::Committed, Next::End(task.committed(batch, stats, mark.as_deref())))
                }
                Err(error) => {
                    let outputs = outputs_per_partition.values().sum();
                    task.attempt_failed(
                        batch,
                        error,
                        &mut last_error,
                        outputs,
                        &mut stats,
                        deadline,
                        task_deadline,
                        &mut backoff,
                    )
                }
            };
            self.report(task, &outputs_per_partition, closing, elapsed, stats, &outcome);
            match next {
                Next::End(end) => return end,
                Next::Replay(pause) => {
                    drop(slot); // others commit while this batch pauses
                    deadline.sleep(pause)
                }
            }
        }
    }

    /// One attempt: begin and process what `first` (the attempt begun while collecting, if
    /// any) did not, then close. Returns the result and when the attempt began, if before now.
    fn attempt(
        &mut self,
        task: &mut Task,
        first: Option<Attempt>,
        to: CommitTo<'_>,
        deadline: Deadline<'_>,
    ) -> (Result<CycleStats, CycleError>, Option<Instant>) {
        let (started, processed, stats) = match first {
            Some(Attempt::Failed { started, error }) => return (Err(error), Some(started)),
            Some(Attempt::Open { started, processed, stats }) => (Some(started), processed, Some(stats)),
            None => (None, 0, None),
        };
        let Task { producer, processing, sink, shared, .. } = task;
        let producer = producer.as_mut().expect("checked by the caller");
        let sink = match sink.as_mut() {
            Some(sink) => sink.step(&self.records, &shared.rt),
            None => SinkStep::None,
        };
        let work = if stats.is_some() { processing.continued_work() } else { processing.work() };
        let steps = Steps { producer, work, deadline };
        (steps.run(&self.records, processed, stats, to, sink), started)
    }

    /// Tells the hooks, the metrics, the span and the debug log how an attempt went.
    /// `closing`: when the batch's collection ended (the attempt's start, or its closing
    /// steps' when it began while collecting); `total`: the transaction's wall time.
    fn report(
        &mut self,
        task: &mut Task,
        outputs_per_partition: &HashMap<TopicPartition, u64>,
        closing: Instant,
        total: Duration,
        stats: CycleStats,
        outcome: &Outcome,
    ) {
        let batch = &self.records;
        let records = batch.len();
        let span = tracing::Span::current();
        span.record("duration_us", total.as_micros() as u64);
        match outcome {
            Outcome::Committed | Outcome::Reconciled { found: Reconciliation::Committed, .. } => {
                span.record(
                    "outcome",
                    if *outcome == Outcome::Committed { "committed" } else { "reconciled: committed" },
                );
                task.metrics.committed(records, stats.process, stats.commit, total);
                let inputs = batch.iter().map(|r| (r.topic.clone(), r.partition));
                task.metrics.batch_committed(inputs, outputs_per_partition, task.processing.dead_lettered());
                tracing::debug!(
                    task = task.id,
                    records,
                    outputs = stats.outputs,
                    commit_us = stats.commit.as_micros() as u64,
                    "transaction committed"
                );
            }
            Outcome::Aborted { class, .. } => {
                span.record("outcome", "aborted");
                task.metrics.aborted(*class);
            }
            Outcome::Reconciled { .. } => {
                span.record("outcome", "reconciled: aborted");
            }
            Outcome::GaveUp { .. } => {
                span.record("outcome", "gave_up");
            }
            Outcome::Dropped { .. } => {
                span.record("outcome", "dropped");
                task.metrics.interrupted();
            }
        }
        let end = closing.elapsed();
        if end > task.shared.cfg.slow_commit_warning {
            let collect = self.collect_started.map(|first| closing.saturating_duration_since(first));
            warn_slow(task, records, end, collect, &stats, outcome);
        }
        if task.shared.hooks.is_empty() {
            return;
        }
        // The batch's first attempt only: a replay collects nothing and follows its failure.
        let (collect, idle) = match self.collect_started.take() {
            Some(first) => {
                (closing.saturating_duration_since(first), first.saturating_duration_since(task.last_cycle_end))
            }
            None => (Duration::ZERO, Duration::ZERO),
        };
        task.last_cycle_end = Instant::now();
        let distinct: BTreeSet<(&str, i32)> = batch.iter().map(|r| (r.topic.as_str(), r.partition)).collect();
        let partitions = distinct.into_iter().map(|(t, p)| (t.to_string(), p)).collect();
        let event = TransactionEvent {
            partitions,
            collect,
            idle,
            transactional_id: task.transactional_id.clone(),
            records,
            outputs: stats.outputs,
            process: stats.process,
            await_acks: stats.await_acks,
            commit: stats.commit,
            total,
            outcome: outcome.clone(),
        };
        for hook in &task.shared.hooks {
            hook(&event);
        }
    }
}

/// Logs a batch whose end took longer than the pipeline's `slow_commit_warning`, with its
/// timeline, so that an operator can tell which step held its records back.
fn warn_slow(
    task: &Task,
    records: usize,
    end: Duration,
    collect: Option<Duration>,
    stats: &CycleStats,
    outcome: &Outcome,
) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let outcome = match outcome {
        Outcome::Committed => "committed".to_string(),
        Outcome::Aborted { reason, .. } => format!("aborted: {reason}"),
        Outcome::GaveUp { reason } => format!("gave up: {reason}"),
        Outcome::Dropped { because, reason } => format!("dropped ({because}): {reason}"),
        Outcome::Reconciled { found, reason } => format!("reconciled as {found} after: {reason}"),
    };
    tracing::warn!(
        pipeline = %task.shared.cfg.application_id,
        partition = %task.label,
        transactional_id = task.transactional_id.as_deref().unwrap_or("-"),
        records,
        outputs = stats.outputs,
        end_ms = ms(end),
        collect_ms = collect.map(ms),
        process_ms = ms(stats.process),
        await_acks_ms = ms(stats.await_acks),
        sink_ms = ms(stats.sink),
        send_offsets_ms = ms(stats.send_offsets),
        commit_transaction_ms = ms(stats.commit.saturating_sub(stats.send_offsets)),
        %outcome,
        "a batch took longer than slow_commit_warning ({:?}) to end after its collection",
        task.shared.cfg.slow_commit_warning,
    );
}

/// Whether the next batch's first attempt runs as it is collected. Not once the task's
/// interrupt has expired: such a batch is dropped before its first attempt, and no
/// transaction should be opened for it. Not while the slot bound is engaged
/// ([`crate::runtime::slots`]): the slot would be held all interval. Not on a producer that
/// must be replaced: the batch's attempts replace it first.
fn streams(task: &Task) -> bool {
    task.shared.cfg.process_while_collecting
        && task.shared.slots.as_ref().is_none_or(|s| !s.engaged())
        && task.producer.as_ref().is_some_and(|p| !p.must_be_replaced())
        && !task.stopped
        && task.interrupt.expired().is_none()
}

/// The error of a batch whose producer is gone before its attempt.
fn given_up() -> StepError {
    StepError { step: Step::Create, class: ErrorClass::Fatal, err: rdkafka::error::KafkaError::Canceled }
}

fn lap(since: &mut Instant) -> Duration {
    let now = Instant::now();
    let d = now - *since;
    *since = now;
    d
}
