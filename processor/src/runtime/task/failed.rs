//! The failure paths of a cycle: abort, then replay, reconcile, give the producer up, or
//! drop the batch of an interrupted task ([`reconcile::verdict`] decides which); and what the
//! task does once a batch ended uncommitted ([`Task::settle`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::end::{BatchEnd, Next};
use super::sink::sink_error;
use super::Task;
use crate::error::Error;
use crate::observe::{Interruption, Outcome};
use crate::partition::TopicPartition;
use crate::processing::AfterFailure;
use crate::record::InputRecord;
use crate::runtime::interrupt::{Deadline, ABORT_GRACE};
use crate::runtime::protocol::Control;
use crate::runtime::reconcile::{self, Verdict};
use crate::sink::erased::SinkFailure;
use crate::sink::SinkErrorClass;
use crate::txn::{CycleError, CycleStats, StepError};

impl Task {
    /// A failed attempt, by its error: the state overlays go (a Kafka error's once the
    /// transaction is known aborted), and the failure leads to a replay or the batch's end.
    /// `last_error` says why, for a drop after it; a Kafka error's report counts the outputs
    /// the attempt produced (`outputs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attempt_failed(
        &mut self,
        batch: &[InputRecord],
        error: CycleError,
        last_error: &mut Option<String>,
        outputs: u64,
        stats: &mut CycleStats,
        deadline: Deadline<'_>,
        task_deadline: Instant,
        backoff: &mut Duration,
    ) -> (Outcome, Next) {
        match error {
            CycleError::Processor { index, error } => {
                *last_error = Some(error.to_string());
                self.discard_states();
                self.processor_failed(batch, index, error, deadline)
            }
            CycleError::Kafka(e) => {
                *last_error = Some(e.to_string());
                stats.outputs = outputs;
                self.kafka_failed(batch, e, deadline, task_deadline, backoff, *stats)
            }
            CycleError::Timer(error) => {
                *last_error = Some(error.to_string());
                self.discard_states();
                self.timer_failed(batch, error, deadline, task_deadline)
            }
            CycleError::Sink(f) => {
                *last_error = Some(f.to_string());
                self.discard_states();
                self.sink_failed(batch, f, deadline, task_deadline, backoff)
            }
        }
    }

    /// Aborts the open transaction after a failed cycle. Once the task is interrupted the
    /// abort still gets [`ABORT_GRACE`]: refused for lack of time, it would cost a reconcile
    /// (or a rebalance) for nothing. `Err` when the abort itself failed: the transaction's
    /// fate is then unknown (the coordinator refuses to abort a transaction it is
    /// completing: `INVALID_TXN_STATE`, after which librdkafka marks the producer fatal), so
    /// the batch goes to [`fence_and_reconcile`](Self::fence_and_reconcile) — or, if the
    /// producer was fenced, is given up.
    pub(super) fn abort(&mut self, batch: &[InputRecord], deadline: Deadline<'_>) -> Result<(), (Outcome, Next)> {
        let producer = self.producer.as_mut().expect("a cycle just ran on it");
        match producer.abort(deadline.with_grace(ABORT_GRACE)) {
            Ok(()) => {
                self.shared.shutdown.stats().transactions_aborted.inc();
                Ok(())
            }
            Err(e) => Err(match reconcile::verdict(&e, self.transactional_id.is_some()) {
                Verdict::Reconcile => self.fence_and_reconcile(batch, e, deadline, CycleStats::default()),
                Verdict::GiveUp | Verdict::Replay => give_up(e, None, false),
                Verdict::Stop => self.refused(e, deadline),
            }),
        }
    }

    /// Aborts after a failed cycle whose batch is to be replayed; `Err` ends the batch
    /// instead: the abort failed ([`abort`](Self::abort)), or the task was interrupted
    /// meanwhile (the batch is dropped, `reason` saying why it failed).
    pub(super) fn abort_for_replay(
        &mut self,
        batch: &[InputRecord],
        deadline: Deadline<'_>,
        reason: &str,
    ) -> Result<(), (Outcome, Next)> {
        self.abort(batch, deadline)?;
        match self.interrupt.expired() {
            Some(because) => Err(dropped(because, reason.to_string())),
            None => Ok(()),
        }
    }

    /// The processor failed on `batch[index]`: abort, then drop the batch if the task was
    /// interrupted, else apply the processor error policy.
    pub(super) fn processor_failed(
        &mut self,
        batch: &[InputRecord],
        index: usize,
        error: crate::error::BoxError,
        deadline: Deadline<'_>,
    ) -> (Outcome, Next) {
        let message = error.to_string();
        if let Err(end) = self.abort_for_replay(batch, deadline, &message) {
            return end;
        }
        let (attempts, after) = self.processing.processor_failed(&batch[index], error);
        tracing::warn!(task = self.id, record = %batch[index].origin(), attempts, error = %message, "processor failed; transaction aborted");
        let outcome = Outcome::Aborted { class: None, reason: message };
        match after {
            AfterFailure::Replay(pause) => (outcome, Next::Replay(pause)),
            AfterFailure::Stop(e) => (outcome, Next::End(BatchEnd::Stop(e))),
        }
    }

    /// A Kafka call failed ([`reconcile::verdict`]): reconcile an unknown outcome, give a
    /// fenced producer up, or abort and replay with backoff until the task timeout — or drop
    /// the batch if the task was interrupted.
    pub(super) fn kafka_failed(
        &mut self,
        batch: &[InputRecord],
        e: StepError,
        deadline: Deadline<'_>,
        task_deadline: Instant,
        backoff: &mut Duration,
        stats: CycleStats,
    ) -> (Outcome, Next) {
        match reconcile::verdict(&e, self.transactional_id.is_some()) {
            Verdict::Reconcile => return self.fence_and_reconcile(batch, e, deadline, stats),
            Verdict::GiveUp => {
                self.discard_states();
                if e.refused_by_group() {
                    self.abort_refused(deadline);
                }
                return give_up(e, None, false);
            }
            Verdict::Stop => return self.refused(e, deadline),
            Verdict::Replay => self.discard_states(),
        }
        if let Err(end) = self.abort_for_replay(batch, deadline, &e.to_string()) {
            return end;
        }
        let outcome = Outcome::Aborted { class: Some(e.class), reason: e.to_string() };
        let missing = self.producer.as_ref().and_then(|p| p.missing_topic(&e, Duration::from_secs(10)));
        if let Some(topic) = missing {
            let servers = self.shared.cfg.bootstrap_servers.clone();
            return (outcome, Next::End(BatchEnd::Stop(Error::UnknownTopics { topics: vec![topic], servers })));
        }
        if Instant::now() + *backoff >= task_deadline {
            let timeout = self.shared.cfg.task_timeout;
            let what = format!("committing a batch of {} records with {}", batch.len(), self.who());
            return (outcome, Next::End(BatchEnd::Stop(Error::TaskTimeout { what, timeout, last: e.to_string() })));
        }
        tracing::warn!(task = self.id, error = %e, "transaction aborted; replaying the batch");
        let pause = *backoff;
        *backoff = (*backoff * 2).min(Duration::from_secs(5));
        (outcome, Next::Replay(pause))
    }

    /// The brokers refused the principal an ACL ([`Verdict::Stop`]): the state overlays go,
    /// the open transaction is aborted and the pipeline stops, naming the ACL. No replay: it
    /// would be refused the same way until the task timeout. The abort is best effort (the
    /// refusal may have made the producer unusable); a transaction left open is never
    /// committed — the coordinator aborts it at its timeout, or the restart's
    /// `init_transactions` does.
    fn refused(&mut self, e: StepError, deadline: Deadline<'_>) -> (Outcome, Next) {
        self.discard_states();
        let outcome = Outcome::Aborted { class: Some(e.class), reason: e.to_string() };
        let who = self.who();
        let Some(producer) = self.producer.as_mut() else {
            return (outcome, Next::End(BatchEnd::Stop(e.into_error(&who))));
        };
        if let Err(abort) = producer.abort(deadline.with_grace(ABORT_GRACE)) {
            tracing::warn!(task = self.id, error = %abort, "the refused transaction could not be aborted: its coordinator aborts it after the transaction timeout");
        } else {
            self.shared.shutdown.stats().transactions_aborted.inc();
        }
        let error = producer.failure(e, &self.shared.cfg, &who);
        (outcome, Next::End(BatchEnd::Stop(error)))
    }

    /// Aborts the open transaction of a producer given up because the group refused its
    /// offsets ([`StepError::refused_by_group`]). The transaction coordinator still takes its
    /// epoch and would keep the transaction, outputs included, open until its timeout, hiding
    /// every later output of those partitions from read_committed readers, whoever commits
    /// them. Best effort: if the abort fails, the coordinator's timeout ends it.
    fn abort_refused(&mut self, deadline: Deadline<'_>) {
        let Some(producer) = self.producer.as_mut() else { return };
        match producer.abort(deadline.with_grace(ABORT_GRACE)) {
            Ok(()) => {
                self.shared.shutdown.stats().transactions_aborted.inc();
                tracing::info!(
                    task = self.id,
                    "the group refused the offsets: transaction aborted before the producer is given up"
                );
            }
            Err(e) => tracing::warn!(
                task = self.id,
                error = %e,
                timeout = ?self.shared.cfg.transaction_timeout,
                "the group refused the offsets and the transaction could not be aborted: read_committed readers of its output partitions wait for the coordinator to abort it after the transaction timeout"
            ),
        }
    }

    /// A timer that fired without a record failed ([`crate::timers`]): abort, then drop the
    /// batch if the task was interrupted, else replay after the processor policy's backoff
    /// until the task timeout, then stop the pipeline.
    pub(super) fn timer_failed(
        &mut self,
        batch: &[InputRecord],
        error: crate::error::BoxError,
        deadline: Deadline<'_>,
        task_deadline: Instant,
    ) -> (Outcome, Next) {
        let message = error.to_string();
        if let Err(end) = self.abort_for_replay(batch, deadline, &message) {
            return end;
        }
        self.timer_attempts += 1;
        tracing::warn!(task = self.id, attempts = self.timer_attempts, error = %message, "timer failed; transaction aborted");
        let outcome = Outcome::Aborted { class: None, reason: message };
        let pause = self.shared.cfg.processor_error_policy.backoff;
        if Instant::now() + pause >= task_deadline {
            let origin = format!("a timer of {}", self.label);
            let e = Error::Processor { origin, attempts: self.timer_attempts, source: error };
            return (outcome, Next::End(BatchEnd::Stop(e)));
        }
        (outcome, Next::Replay(pause))
    }
}

impl Task {
    /// Acts on how a batch (or the abort of an abandoned attempt) ended.
    pub(super) fn settle(&mut self, end: BatchEnd, batch: &[InputRecord]) {
        match end {
            BatchEnd::Committed => {}
            BatchEnd::GaveUp { error: e, replaced } => {
                self.shared.shutdown.stats().producers_fenced.inc();
                crate::metrics::producer_fenced(&self.shared.cfg.application_id);
                if replaced || !self.recover_in_place(&e) {
                    tracing::warn!(task = self.id, error = %e, "producer given up; the partitions go back to the group");
                    self.give_partitions_back(e.to_string());
                }
            }
            BatchEnd::Dropped { because, reason } => {
                let distinct: BTreeSet<TopicPartition> = batch.iter().map(|r| (r.topic.clone(), r.partition)).collect();
                self.ledger.rewinds.batch_dropped(distinct.into_iter().collect());
                tracing::warn!(
                    task = self.id,
                    records = batch.len(),
                    %because,
                    last_error = %reason,
                    "batch dropped uncommitted; the partitions' next owner resumes from the committed offset"
                );
            }
            BatchEnd::Stop(e) => self.stop(e),
            BatchEnd::SinkFenced(reason) => {
                tracing::warn!(task = self.id, %reason, "fenced by the sink; the partitions go back to the group");
                self.give_partitions_back(reason);
            }
            BatchEnd::NoProducer(reason) => {
                tracing::warn!(task = self.id, %reason, "no fresh producer; the partitions go back to the group");
                self.shared.shutdown.stats().producers_fenced.inc();
                crate::metrics::producer_fenced(&self.shared.cfg.application_id);
                self.give_partitions_back(reason);
            }
        }
    }

    /// Drops the producer and the partitions and tells the task manager, which hands them
    /// back to the group; whoever gets them next restores their state from the changelogs.
    pub(super) fn give_partitions_back(&mut self, error: String) {
        self.producer = None;
        self.forget_partitions();
        let _ = self.shared.control.send(Control::Fenced { task: self.id, error });
    }
}

/// The producer is given up: the batch is dropped, and the partitions go back to the group
/// or, for a failure of the producer's own, stay ([`Task::recover_in_place`]).
/// `not_reconciled` says why an unknown outcome could not be reconciled instead;
/// `replaced`, that the reconcile found another owner.
pub(super) fn give_up(e: StepError, not_reconciled: Option<String>, replaced: bool) -> (Outcome, Next) {
    let reason = match not_reconciled {
        Some(why) => format!("{e}; the outcome could not be reconciled: {why}"),
        None => e.to_string(),
    };
    (Outcome::GaveUp { reason }, Next::End(BatchEnd::GaveUp { error: Box::new(e), replaced }))
}

/// An interrupted batch's end: its transaction is aborted, the batch is dropped.
fn dropped(because: Interruption, reason: String) -> (Outcome, Next) {
    (Outcome::Dropped { because, reason: reason.clone() }, Next::End(BatchEnd::Dropped { because, reason }))
}

impl Task {
    /// The sink failed inside the cycle (before the offsets): the transaction is aborted,
    /// then by the failure's class the partitions are given up (fenced), the pipeline stops
    /// (refused, fatal), or the batch is replayed after [`Sink::recover`] with backoff until
    /// the task timeout (the sink deduplicates or overwrites what it already applied).
    ///
    /// [`Sink::recover`]: crate::sink::Sink::recover
    pub(super) fn sink_failed(
        &mut self,
        batch: &[InputRecord],
        failure: SinkFailure,
        deadline: Deadline<'_>,
        task_deadline: Instant,
        backoff: &mut Duration,
    ) -> (Outcome, Next) {
        let reason = failure.to_string();
        if let Err(end) = self.abort_for_replay(batch, deadline, &reason) {
            return end;
        }
        let outcome = Outcome::Aborted { class: None, reason: reason.clone() };
        match failure.class {
            SinkErrorClass::Fenced => return (outcome, Next::End(BatchEnd::SinkFenced(reason))),
            SinkErrorClass::Rejected | SinkErrorClass::Fatal => {
                return (outcome, Next::End(BatchEnd::Stop(sink_error("write", failure))))
            }
            SinkErrorClass::Retriable | SinkErrorClass::OutcomeUnknown => {}
        }
        if Instant::now() + *backoff >= task_deadline {
            return (outcome, Next::End(BatchEnd::Stop(sink_error("write", failure))));
        }
        tracing::warn!(task = self.id, error = %reason, "sink write failed; transaction aborted, replaying the batch");
        let pause = *backoff;
        *backoff = (*backoff * 2).min(Duration::from_secs(5));
        if let Some(sink) = self.sink.as_mut() {
            sink.recover(&self.shared, deadline.remaining(), self.id);
        }
        (outcome, Next::Replay(pause))
    }

    /// Replaces the given-up producer in place, if `e` allows: when it failed on its own (an
    /// unknown outcome not reconciled, a fatal producer) rather than being replaced by
    /// someone else ([`reconcile::replaced`], then [`Control::Fenced`]), a fresh producer
    /// fences the old epoch, the partitions' state is dropped and the consumer seeks them
    /// back to their committed offsets ([`Control::Rewind`]), with no rebalance. Not in
    /// place: partitions already lost, an exactly-once sink, a fresh producer that fails too;
    /// `false` when the partitions must go back to the group instead.
    pub(super) fn recover_in_place(&mut self, e: &StepError) -> bool {
        let lost = matches!(self.interrupt.current(), Some((Interruption::PartitionsLost, _)));
        if reconcile::replaced(e) || lost || self.sink_is_exactly_once() || self.owned.is_empty() {
            return false;
        }
        self.producer = None;
        self.forget_partitions();
        if let Err(init) = self.ensure_producer() {
            tracing::warn!(task = self.id, error = %init, "a fresh producer cannot be initialised either");
            return false;
        }
        let partitions: Vec<_> = self.owned.iter().cloned().collect();
        tracing::warn!(
            task = self.id,
            error = %e,
            ?partitions,
            "producer replaced in place; its batch was dropped and its partitions resume from their committed offsets"
        );
        self.ledger.rewinds.wait_for(&partitions);
        let _ = self.shared.control.send(Control::Rewind { task: self.id, partitions, resume: Vec::new() });
        true
    }

    /// Replaces the producer if its last commit or abort may have sent its `EndTxn` twice
    /// (see [`TxnProducer::must_be_replaced`](crate::txn::TxnProducer::must_be_replaced)),
    /// before it begins another transaction: the fresh producer's `init_transactions` bumps
    /// the epoch, fencing a late `EndTxn`. No transaction is open, so nothing is replayed.
    /// `Err` says why no fresh producer could be initialised (the producer is then gone).
    pub(super) fn renew_if_end_retried(&mut self) -> Result<(), String> {
        if !self.producer.as_ref().is_some_and(|p| p.must_be_replaced()) {
            return Ok(());
        }
        self.producer = None;
        self.ensure_producer().map_err(|e| format!("no fresh producer after a retried EndTxn call: {e}"))?;
        tracing::info!(task = self.id, "producer replaced after a retried commit or abort, fencing its late EndTxn");
        Ok(())
    }
}
