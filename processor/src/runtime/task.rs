//! A partition task: one OS thread that owns a producer and the batches of its partitions (one
//! partition in [`ExactlyOnce`](crate::Guarantee::ExactlyOnce), else all of the instance's).
//! A batch's first attempt streams ([`streamed`]), replays run in one go ([`run_cycle`]),
//! revocations are handled between records ([`revoke`]). Invariants: a failing batch ends by
//! the consumer's [`Interrupt`] deadline, aborted and dropped ([`Outcome::Dropped`],
//! [`interrupt`](super::interrupt)); a failed cycle goes where
//! [`reconcile::verdict`](crate::runtime::reconcile::verdict) says (replay, or
//! [`Task::fence_and_reconcile`], or give up); and the task never waits for the consumer
//! thread, so the consumer may block on it, bounded, inside a rebalance callback.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Guarantee;
use crate::error::{Error, ErrorClass, Result};
use crate::metrics::TaskMetrics;
use crate::observe::Outcome;
use crate::partition::TopicPartition;
use crate::processing::Processing;
use crate::record::InputRecord;
use crate::runtime::interrupt::{Deadline, Interrupt};
use crate::runtime::protocol::{Control, RevokeReply, TaskMsg};
use crate::runtime::slots::Slots;
use crate::runtime::Shared;
use crate::sink::SinkGuarantee;
use crate::txn::{
    next_offset_per_partition, run_cycle, CommitTo, CycleError, CycleStats, SinkStep, Step, StepError, TxnProducer,
};

mod failed;
mod first_attempt;
mod positions;
mod report;
mod revoke;
mod rewind;
mod sink;
mod state;
mod streamed;
mod types;
mod unknown;
use failed::give_up;
use sink::anchors;
pub(crate) use types::Task;
use types::{Flush, Next};

pub(crate) use crate::partition::Resume;

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
        label: String,
        interrupt: Arc<Interrupt>,
    ) -> Result<(Task, Resume)> {
        let control = shared.control.clone();
        let processing = Processing::new(shared.cfg.clone(), shared.rt.clone(), shared.processor.clone());
        let metrics = TaskMetrics::new(&shared.cfg.application_id, &label);
        let claimed = partitions.clone();
        let mut task = Task {
            sink: None,
            unanchored: HashSet::new(),
            rewinding: HashSet::new(),
            dropped: Vec::new(),
            last_cycle_end: Instant::now(),
            collect_started: None,
            timer_attempts: 0,
            streamed: None,
            tables: None,
            positions: HashMap::new(),
            offsets: rdkafka::TopicPartitionList::new(),
            _member: shared.slots.as_ref().map(|s| s.join()),
            label,
            metrics,
            id,
            shared,
            producer: None,
            transactional_id,
            owned: partitions.into_iter().collect(),
            acked: HashMap::new(),
            processing,
            stopped: false,
            control,
            interrupt,
        };
        if task.shared.cfg.fault.as_ref().is_some_and(|f| f.on_init(&claimed)) {
            return Err(Error::TaskTimeout {
                what: format!("initialising {} (fault injection)", task.who()),
                timeout: task.shared.cfg.task_timeout,
                last: "init_transactions timed out".into(),
            });
        }
        task.interrupt.set_phase("initialising its producer: init_transactions");
        {
            // Past the transaction bound, a thousand init_transactions at once are the same
            // storm as a thousand commits (runtime::slots).
            let shared = task.shared.clone();
            let deadline = Deadline::interruptible(Instant::now() + shared.cfg.task_timeout, &task.interrupt);
            let _slot =
                shared.slots.as_ref().map(|s| s.acquire_if_engaged(&deadline, shared.cfg.task_timeout)).transpose()?;
            task.ensure_producer()?;
        }
        task.interrupt.set_phase("connecting the sink");
        task.connect_sink()?;
        task.interrupt.set_phase("claiming its partitions in the sink");
        let resume = task.claim(&claimed)?;
        Ok((task, resume))
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
                match self.timer_wake() {
                    Some(wait) => inbox.recv_timeout(wait),
                    None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
                }
            } else {
                inbox.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            };
            match msg {
                Ok(TaskMsg::Record(r)) => {
                    let tp = (r.topic.clone(), r.partition);
                    if self.stopped
                        || self.producer.is_none()
                        || !self.owned.contains(&tp)
                        || self.rewinding.contains(&tp)
                    {
                        continue; // never committed: read again by the partition's next owner, or after the rewind
                    }
                    if self.needs_restore(r.partition) {
                        // Never inside an open transaction: a restore can outlast its timeout.
                        if self.streamed.is_some() {
                            self.flush(&mut batch);
                        }
                        if let Err(e) = self.restore() {
                            self.stop(e);
                            continue;
                        }
                    }
                    if batch.is_empty() {
                        self.collect_started = Some(Instant::now());
                        deadline = Instant::now() + cfg.commit_interval;
                    }
                    batch.push(r);
                    if !self.stream(&batch) || batch.len() >= cfg.max_records_per_transaction {
                        self.flush(&mut batch);
                    }
                }
                Err(RecvTimeoutError::Timeout) if batch.is_empty() => self.fire_timers(),
                Err(RecvTimeoutError::Timeout) => self.flush(&mut batch),
                Ok(TaskMsg::Assign { partitions, reply }) => {
                    self.flush(&mut batch);
                    self.owned.extend(partitions.iter().cloned());
                    let resume = self.ensure_producer().and_then(|()| self.claim_retrying(&partitions));
                    let _ = reply.send(resume.map_err(|e| {
                        self.stop(Error::Internal(format!("assignment failed: {e}")));
                        e
                    }));
                }
                Ok(TaskMsg::Revoke { partitions, lost, reply }) => {
                    let acked_offsets = self.revoke(&mut batch, &partitions, lost);
                    let _ = reply.send(RevokeReply { acked_offsets });
                    self.rewind_dropped();
                    if per_partition && self.owned.is_empty() {
                        return;
                    }
                }
                Ok(TaskMsg::Rewound { partitions }) => {
                    for tp in &partitions {
                        self.rewinding.remove(tp);
                    }
                }
                Ok(TaskMsg::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    self.flush(&mut batch);
                    self.processing.close_all();
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
            self.abandon_streamed();
            batch.clear();
            return;
        }
        self.finish(batch);
    }

    /// Runs a transaction of the timers due without a record ([`crate::timers`]).
    fn fire_timers(&mut self) {
        // A wake-up a little early (the inbox's timeout rounds) finds nothing due: no empty
        // transaction for it.
        let due = self.processing.next_timer_wake().is_some_and(|at| at <= std::time::SystemTime::now());
        if due && !self.stopped && self.producer.is_some() {
            self.finish(&mut Vec::new());
        }
    }

    /// Commits `batch` (empty: only the timers due), acting on how it ended, and empties it.
    fn finish(&mut self, batch: &mut Vec<InputRecord>) {
        let flush = self.commit_batch(batch);
        self.settle(flush, batch);
        self.processing.batch_done();
        self.timer_attempts = 0;
        batch.clear();
    }

    /// Acts on how a batch (or the abort of an abandoned attempt) ended.
    fn settle(&mut self, flush: Flush, batch: &[InputRecord]) {
        match flush {
            Flush::Committed => {}
            Flush::GaveUp { error: e, replaced } => {
                self.shared.shutdown.stats().producers_fenced.inc();
                crate::metrics::producer_fenced(&self.shared.cfg.application_id);
                if replaced || !self.recover_in_place(&e) {
                    tracing::warn!(task = self.id, error = %e, "producer given up; the partitions go back to the group");
                    self.producer = None;
                    // The group reassigns the partitions; whoever gets them restores their state.
                    self.forget_partitions();
                    let _ = self.control.send(Control::Fenced { task: self.id, error: e.to_string() });
                }
            }
            Flush::Dropped { because, reason } => {
                let distinct: std::collections::BTreeSet<TopicPartition> =
                    batch.iter().map(|r| (r.topic.clone(), r.partition)).collect();
                // The records after the batch are in the inbox already: committing one of
                // them would commit past the dropped ones, losing them.
                self.rewinding.extend(distinct.iter().cloned());
                self.dropped = distinct.into_iter().collect();
                tracing::warn!(
                    task = self.id,
                    records = batch.len(),
                    %because,
                    last_error = %reason,
                    "batch dropped uncommitted; the partitions' next owner resumes from the committed offset"
                );
            }
            Flush::Stop(e) => self.stop(e),
            Flush::SinkFenced(reason) => {
                tracing::warn!(task = self.id, %reason, "fenced by the sink; the partitions go back to the group");
                self.producer = None;
                self.forget_partitions();
                let _ = self.control.send(Control::Fenced { task: self.id, error: reason });
            }
        }
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
        // The first attempt, if it ran as the batch was collected: its open transaction is
        // closed first (interrupted, it fails at once and is aborted like any attempt).
        let mut streamed = self.streamed.take();
        // Set when a revocation or the shutdown ended the wait for a slot.
        let mut handed_back = None;
        let offsets = match self.offsets_to_commit(batch, deadline) {
            Ok(offsets) => offsets,
            Err(e) => {
                return match interrupt.expired() {
                    Some(because) => Flush::Dropped { because, reason: e.to_string() },
                    None => Flush::Stop(e),
                }
            }
        };
        loop {
            if let Some(because) = interrupt.expired().or(handed_back).filter(|_| streamed.is_none()) {
                // Interrupted during the pause before a replay: the aborted cycle is
                // reported already, the drop gets an event of its own (no transaction).
                let reason = match last_error {
                    Some(reason) => {
                        let outcome = Outcome::Dropped { because, reason: String::clone(&reason) };
                        let (now, nothing) = (Instant::now(), CycleStats::default());
                        self.report(batch, &HashMap::new(), now, Duration::ZERO, nothing, &outcome);
                        reason
                    }
                    None if handed_back.is_some() => {
                        "handed back: interrupted while waiting for a transaction slot".into()
                    }
                    None => "interrupted before the first attempt".into(),
                };
                if handed_back.is_some() {
                    self.handed_back(batch.len());
                }
                return Flush::Dropped { because, reason };
            }
            // Every attempt (a replay too) looks the tables up as they are now.
            if streamed.is_none() {
                if let Err(e) = self.refresh_tables() {
                    return Flush::Stop(e);
                }
            }
            let Some(producer) = self.producer.as_mut() else {
                return Flush::GaveUp { error: Box::new(StepError::given_up()), replaced: false };
            };
            // Read afresh for every attempt: in per-consumer mode the generation (member
            // epoch) moves on with every rebalance, including those that leave this task's
            // partitions in place (per-partition mode sends the group id alone).
            let group = match producer.transactional_id().map(|_| self.shared.group_metadata()) {
                None => None,
                Some(None) => return Flush::Stop(Error::Internal("the consumer is gone: no group metadata".into())),
                Some(g) => g,
            };
            let commit_to = match &group {
                Some(group) => CommitTo::Transaction { group, offsets: &offsets },
                None => CommitTo::Consumer,
            };
            // Per-partition mode: wait for a transaction slot (runtime::slots; never blocks
            // while the bound is not engaged), unless a revocation or the shutdown comes:
            // then the batch, with no transaction begun, is handed back at the top. A
            // streamed attempt's transaction is open already: it holds none, and must not wait.
            let shared = self.shared.clone();
            let interrupted = || interrupt.current().is_some();
            let slot = match shared
                .slots
                .as_ref()
                .filter(|_| streamed.is_none())
                .map(|s| s.acquire(&deadline, &interrupted))
            {
                Some(None) => match interrupt.current() {
                    Some((why, _)) => {
                        handed_back = Some(why);
                        continue; // dropped at the top
                    }
                    None => return Flush::Stop(Slots::timed_out(cfg.task_timeout)),
                },
                Some(Some(slot)) => Some(slot),
                None => None,
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
            let closing = Instant::now();
            let rt = &self.shared.rt;
            let sink = match self.sink.as_deref_mut() {
                None => SinkStep::None,
                Some(s) if s.guarantee() == SinkGuarantee::ExactlyOnce => {
                    let anchors = anchors(batch, &self.unanchored);
                    SinkStep::AfterCommit { sink: s, rt, anchors }
                }
                Some(s) => SinkStep::BeforeOffsets(s, rt),
            };
            let (result, started) = match streamed.take() {
                Some(s) => s.close(producer, batch, &mut self.processing.continued_work(), commit_to, deadline, sink),
                None => (run_cycle(producer, batch, &mut self.processing.work(), commit_to, deadline, sink), closing),
            };
            let outputs_per_partition = self.processing.take_outputs();
            let elapsed = started.elapsed();
            // The state overlays follow the transaction: merged once it is known committed,
            // discarded once it is known aborted (after a Kafka error that may be later).
            let mut stats = result.as_ref().map(|s| *s).unwrap_or_default();
            let (outcome, next) = match result {
                Ok(stats) => {
                    self.commit_states();
                    (Outcome::Committed, Next::Done(self.committed(batch, stats)))
                }
                Err(CycleError::Processor { index, error }) => {
                    self.discard_states();
                    last_error = Some(error.to_string());
                    self.processor_failed(batch, index, error, deadline)
                }
                Err(CycleError::Kafka(e)) => {
                    last_error = Some(e.to_string());
                    stats.outputs = outputs_per_partition.values().sum();
                    self.kafka_failed(batch, e, deadline, task_deadline, &mut backoff, stats)
                }
                Err(CycleError::Timer(error)) => {
                    self.discard_states();
                    last_error = Some(error.to_string());
                    self.timer_failed(batch, error, deadline, task_deadline)
                }
                Err(CycleError::Sink(f)) => {
                    self.discard_states();
                    last_error = Some(f.to_string());
                    self.sink_failed(batch, f, deadline, task_deadline, &mut backoff)
                }
            };
            self.report(batch, &outputs_per_partition, closing, elapsed, stats, &outcome);
            match next {
                Next::Done(flush) => return flush,
                Next::Retry(pause) => {
                    drop(slot); // others commit while this batch pauses
                    deadline.sleep(pause)
                }
            }
        }
    }

    /// Counts a committed batch (an exactly-once sink is written first); at-least-once:
    /// hands its offsets to the consumer thread.
    fn committed(&mut self, batch: &[InputRecord], stats: CycleStats) -> Flush {
        if self.sink_is_exactly_once() {
            let interrupt = self.interrupt.clone();
            let deadline = Deadline::interruptible(Instant::now() + self.shared.cfg.task_timeout, &interrupt);
            if let Err(flush) = self.write_exactly_once(batch.len(), deadline) {
                return flush;
            }
            for tp in batch.iter().map(|r| (r.topic.clone(), r.partition)) {
                self.unanchored.remove(&tp);
            }
        }
        let s = self.shared.shutdown.stats();
        s.records_in.add(batch.len() as u64);
        s.records_out.add(stats.outputs);
        s.transactions_committed.inc();
        s.dead_lettered.add(self.processing.dead_lettered().count() as u64);
        let offsets: Vec<(TopicPartition, i64)> =
            next_offset_per_partition(batch).into_iter().map(|((t, p), o)| ((t.clone(), p), o)).collect();
        for (tp, next) in &offsets {
            self.shared.shutdown.health_state().committed(tp, *next);
        }
        match self.producer.as_ref().map(|p| p.transactional_id().is_some()) {
            Some(true) => self.positions.extend(offsets),
            Some(false) => {
                self.acked.extend(offsets.iter().cloned());
                let _ = self.control.send(Control::CommitOffsets(offsets));
            }
            None => {}
        }
        Flush::Committed
    }
}

impl StepError {
    fn given_up() -> StepError {
        StepError { step: Step::Create, class: ErrorClass::Fatal, err: rdkafka::error::KafkaError::Canceled }
    }
}
