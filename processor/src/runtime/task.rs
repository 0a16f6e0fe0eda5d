//! A partition task: one OS thread that owns a producer and the batches of its partitions (one
//! partition in [`ExactlyOncePerPartition`](crate::Guarantee::ExactlyOncePerPartition), else all of the instance's).
//! Its loop collects records into a [`Batch`], which runs the batch's transaction from its
//! first record to its end ([`batch`]); revocations are handled between records
//! ([`revoke`]). What a committed batch changes in the task (state, ledger, counts) is
//! here. Sub-states own their fields: the sink with the partitions it has no offset for yet
//! ([`TaskSink`]), what the task knows per partition ([`ledger::Ledger`]: the group's
//! committed offsets, the floors, the rewinds waited for), the batch in its transaction
//! cycle ([`Batch`]).
//!
//! Invariants: a failing batch ends by the consumer's [`Interrupt`] deadline, aborted and
//! dropped ([`Outcome::Dropped`](crate::observe::Outcome::Dropped),
//! [`interrupt`](super::interrupt)); a failed cycle goes where
//! [`reconcile::verdict`](crate::runtime::reconcile::verdict) says (replay, or
//! [`Task::fence_and_reconcile`], or give up); and the task never waits for the consumer
//! thread, so the consumer may block on it, bounded, inside a rebalance callback.
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

use crate::config::Guarantee;
use crate::error::{Error, Result};
use crate::metrics::TaskMetrics;
use crate::partition::TopicPartition;
use crate::processing::Processing;
use crate::record::InputRecord;
use crate::runtime::interrupt::{Deadline, Interrupt};
use crate::runtime::protocol::{Control, RevokeReply, TaskMsg};
use crate::runtime::Shared;
use crate::state::Tally;
use crate::txn::{next_offset_per_partition, CycleStats, TxnProducer};

mod batch;
mod cadence;
mod end;
mod failed;
mod floor;
mod ledger;
mod positions;
mod revoke;
mod rewind;
mod sink;
mod state;
mod types;
mod unknown;
use batch::Batch;
use end::BatchEnd;
use sink::TaskSink;
pub(crate) use types::Task;

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
        let mut processing = Processing::new(shared.cfg.clone(), shared.rt.clone(), shared.processor.clone());
        processing.set_input_partitions(shared.input_partitions);
        processing.serve_queries(shared.queries.clone(), id);
        let metrics = TaskMetrics::new(&shared.cfg.application_id, &label);
        let claimed = partitions.clone();
        let mut task = Task {
            sink: None,
            last_cycle_end: Instant::now(),
            timer_attempts: 0,
            tables: None,
            ledger: ledger::Ledger::default(),
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
        task.sink = TaskSink::connect(&task.shared)?;
        task.interrupt.set_phase("claiming its partitions in the sink");
        let resume = match task.sink.as_mut() {
            Some(sink) => sink.claim(&task.shared, &claimed, task.id)?,
            None => Vec::new(),
        };
        task.resumed(&claimed, &resume);
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
        let cfg = &self.shared.cfg;
        let mut p = TxnProducer::create(cfg, self.transactional_id.clone(), &self.label)
            .map_err(|e| e.into_error(&self.who()))?;
        p.init((Instant::now() + cfg.task_timeout).into()).map_err(|e| p.failure(e, cfg, &self.who()))?;
        tracing::debug!(task = self.id, transactional_id = ?p.transactional_id(), elapsed_ms = started.elapsed().as_millis() as u64, "producer ready");
        self.producer = Some(p);
        Ok(())
    }

    /// The task loop; returns when revoked (per-partition tasks), shut down, or disconnected.
    pub(crate) fn run(mut self, inbox: Receiver<TaskMsg>) {
        let cfg = self.shared.cfg.clone();
        let per_partition = cfg.guarantee == Guarantee::ExactlyOncePerPartition;
        let mut batch = Batch::new();
        loop {
            let msg = if batch.is_empty() {
                match self.timer_wake() {
                    Some(wait) => inbox.recv_timeout(wait),
                    None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
                }
            } else {
                inbox.recv_timeout(batch.closes_in())
            };
            match msg {
                Ok(TaskMsg::Record(r)) => {
                    let tp = (r.topic.clone(), r.partition);
                    if self.stopped
                        || self.producer.is_none()
                        || !self.owned.contains(&tp)
                        || self.ledger.rewinds.holds(&tp)
                    {
                        continue; // never committed: read again by the partition's next owner, or after the rewind
                    }
                    if !self.above_floor(&tp, r.offset, &mut batch) {
                        continue;
                    }
                    if self.needs_restore(r.partition) {
                        // Never inside an open transaction: a restore can outlast its timeout.
                        if batch.is_open() {
                            batch.end(&mut self);
                        }
                        match self.restore() {
                            Ok(true) => {}
                            Ok(false) => {
                                batch.clear(); // of the partitions given back
                                continue;
                            }
                            Err(e) => {
                                self.stop(e);
                                continue;
                            }
                        }
                    }
                    if !batch.add(r, &mut self) || batch.len() >= cfg.max_records_per_transaction || batch.is_overdue()
                    {
                        batch.end(&mut self);
                    }
                }
                Err(RecvTimeoutError::Timeout) if batch.is_empty() => batch.fire_timers(&mut self),
                Err(RecvTimeoutError::Timeout) => batch.end(&mut self),
                Ok(TaskMsg::Assign { partitions, reply }) => {
                    batch.end(&mut self);
                    self.owned.extend(partitions.iter().cloned());
                    let resume = self.ensure_producer().and_then(|()| self.claim_retrying(&partitions));
                    if let Ok(resume) = &resume {
                        self.resumed(&partitions, resume);
                    }
                    let _ = reply.send(resume.map_err(|e| {
                        // The stop reaches the consumer thread first: a refusal goes as it is.
                        let text = e.to_string();
                        self.stop(match e {
                            e @ Error::NotAuthorized(_) => e,
                            e => Error::Internal(format!("assignment failed: {e}")),
                        });
                        Error::Internal(format!("assignment failed: {text}"))
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
                    self.ledger.rewinds.rewound(&partitions);
                }
                Ok(TaskMsg::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    batch.end(&mut self);
                    self.processing.close_all();
                    return;
                }
            }
        }
    }

    /// Counts a committed batch (an exactly-once sink is written first) whose offsets carried
    /// `mark`; the ledger takes the offsets committed; at-least-once: hands its offsets to
    /// the consumer thread.
    fn committed(&mut self, batch: &[InputRecord], stats: CycleStats, mark: Option<&str>) -> BatchEnd {
        if let Some(sink) = self.sink.as_mut() {
            if let Err(end) = sink.committed(&self.shared, batch, &self.interrupt, self.id) {
                return end;
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
            if let Some(purger) = &self.shared.purger {
                purger.offer(tp, *next);
            }
        }
        match self.producer.as_ref().map(|p| p.transactional_id().is_some()) {
            Some(true) => self.ledger.committed_in_flight(mark),
            Some(false) => {
                self.acked.extend(offsets.iter().cloned());
                let _ = self.shared.control.send(Control::CommitOffsets(offsets));
            }
            None => {}
        }
        BatchEnd::Committed
    }

    /// The transaction committed: every partition's state overlay becomes committed state,
    /// checkpointed at the offsets its changelog records got (from the current producer's
    /// delivery reports; after a reconciled unknown outcome the producer is a fresh one
    /// that knows none, and the checkpoints stay behind, which is safe), and the
    /// operators' tallies are counted.
    fn commit_states(&mut self) {
        let pipeline = &self.shared.cfg.application_id;
        let stats = self.shared.shutdown.stats();
        let ends = self.producer.as_ref().map(|p| p.changelog_ends()).unwrap_or_default();
        for committed in self.processing.commit_states(&ends) {
            for (store, n) in committed.changes {
                crate::metrics::changelog_committed(pipeline, &store, n);
                stats.changelog_records.add(n);
            }
            for ((tally, store), n) in committed.tallies {
                crate::metrics::tally_committed(pipeline, tally, &store, n);
                match tally {
                    Tally::Duplicate => stats.duplicates_dropped.add(n),
                    Tally::Late => stats.late_records.add(n),
                    Tally::Correction => stats.window_corrections.add(n),
                }
            }
        }
    }

    /// Claims `partitions` in the sink, if any, retrying ([`TaskSink::claim_retrying`]).
    fn claim_retrying(&mut self, partitions: &[TopicPartition]) -> Result<Resume> {
        match self.sink.as_mut() {
            Some(sink) => sink.claim_retrying(&self.shared, partitions, &self.interrupt, self.id),
            None => Ok(Vec::new()),
        }
    }

    /// Whether the sink owns the offsets (and is written after the Kafka commit).
    fn sink_is_exactly_once(&self) -> bool {
        self.sink.as_ref().is_some_and(TaskSink::is_exactly_once)
    }

    fn stop(&mut self, e: Error) {
        tracing::error!(task = self.id, error = %e, "stopping the pipeline");
        self.stopped = true;
        let _ = self.shared.control.send(Control::Fatal(e));
    }
}
