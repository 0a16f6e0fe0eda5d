//! The transactional producer ([`TxnProducer`]): the one place that calls rdkafka's producer
//! and transaction API. It owns the transaction — begin, send, await the delivery reports,
//! send the offsets, commit, abort — and a batch drives it through the cycle in the order of
//! `runtime/task/batch.rs`. At-least-once uses the same producer, idempotent, without the
//! transaction calls.
//!
//! # Hazards handled here
//! - **Blocking calls** run only on a partition task's own OS thread, each with a timeout
//!   derived from the task deadline; a call librdkafka never returns from (librdkafka#5456)
//!   is abandoned with its producer ([`watchdog`]).
//! - **The commit floor.** rust-rdkafka 0.39's `commit_transaction` flushes first, in
//!   100 ms poll steps while anything is unacknowledged, and its `BaseProducer::poll(t)`
//!   serves events until `t` elapses (busy-looping below 1 ms). So every delivery report is
//!   awaited first ([`TxnProducer::await_acks`], pausing [`ACK_POLL_PAUSE`] when idle) and
//!   the flush inside commit returns at once.
//! - **No second request on the same epoch after an indefinite answer**: a delayed `EndTxn`
//!   or `TxnOffsetCommit` can land in a later transaction (KAFKA-17754). `send_offsets` is
//!   called once. A `commit` that timed out is *resumed*: librdkafka goes on with the same
//!   `EndTxn` in the background and a second call waits for it, sending nothing new. Giving
//!   up early is worse than waiting: the fresh epoch that fences the producer aborts a
//!   transaction the coordinator (or a failed-over one) may be committing. So the commit
//!   waits until the step's deadline, and for twice the call timeout even when the task is
//!   interrupted: by then a live coordinator has decided (it aborts a transaction still
//!   open after the transaction timeout). A producer whose commit step still failed is
//!   fenced and reconciled ([`crate::runtime::reconcile`]); one whose resumed commit
//!   succeeded is replaced before its next transaction ([`TxnProducer::must_be_replaced`]).
//! - **Stale delivery reports** of an aborted cycle are ignored by cycle number.
//! - **Every wait ends by a [`Deadline`]**, brought forward by an interrupt
//!   ([`crate::runtime::interrupt`]).
//! - **Unknown errors** are abortable ([`crate::error::classify`]): never reported as
//!   committed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header as RdHeader, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::TopicPartitionList;

use crate::config::{FaultInjection, PipelineConfig, UnknownOutcome};
use crate::error::ErrorClass;
use crate::metrics::{add_ns, TxnTimers};
use crate::record::{InputRecord, OutputRecord, ORIGIN_HEADER};
use crate::runtime::interrupt::Deadline;

/// How long a task waiting for delivery reports ([`TxnProducer::await_acks`], or an abort
/// waiting for its outstanding messages) sleeps when a poll served nothing: the most it
/// adds to a transaction's latency, against one wake-up per pause while a task waits.
/// Shorter polls spin inside `BaseProducer::poll` (see the module doc), for the whole
/// wait and, during a broker outage, for up to the message timeout; a `ThreadedProducer`
/// waking the task per delivery report costs a context switch per event.
const ACK_POLL_PAUSE: Duration = Duration::from_micros(500);

/// How many queued events [`TxnProducer::client_errors`] serves at most (one per `poll`):
/// a broken connection queues an error and a log line; delivery reports are all served
/// before a transaction ends.
const PENDING_EVENTS: usize = 16;

/// How long [`TxnProducer::send_lingering`] holds librdkafka's flush flag: a broker thread's
/// wake-up, far below `linger.ms`.
const LINGER_FLUSH: Duration = Duration::from_millis(1);

/// A producer of one partition task: transactional, or idempotent for at-least-once.
pub(crate) struct TxnProducer {
    /// Shared only with a transactional call in flight ([`watchdog`]).
    inner: Arc<BaseProducer<DeliveryTracker>>,
    /// A transactional call was abandoned ([`watchdog`]) and may still run: no further call.
    wedged: bool,
    /// A commit or abort of this epoch was called again after a timeout, or librdkafka may
    /// have sent its `EndTxn` again within one call: one of its `EndTxn` requests may still
    /// be on its way, and would end the next transaction of the epoch
    /// ([`must_be_replaced`](Self::must_be_replaced)).
    end_retried: bool,
    transactional_id: Option<String>,
    /// A topic known to exist (the first input): its metadata is the connection warm-up of
    /// [`init`](Self::init).
    warm_up_topic: Option<String>,
    origin_header: bool,
    cycle: usize,
    /// This producer's part of its offsets' marks ([`offsets`]).
    nonce: u64,
    /// The mark of the offsets sent in this cycle, `None` before `send_offsets`.
    mark: Option<String>,
    sent: u64,
    in_txn: bool,
    /// Upper bound of one blocking librdkafka call; a step retries within its deadline.
    call_timeout: Duration,
    timers: TxnTimers,
    /// Test-only fault injection (see [`PipelineBuilder::inject_unknown_outcome`](crate::PipelineBuilder::inject_unknown_outcome)).
    fault: Option<std::sync::Arc<FaultInjection>>,
}

impl TxnProducer {
    /// Creates the producer; `transactional_id = None` makes an idempotent, non-transactional one.
    /// `partition` labels its metrics (`topic-p`, or `all`).
    pub(crate) fn create(
        cfg: &PipelineConfig,
        transactional_id: Option<String>,
        partition: &str,
    ) -> Result<TxnProducer, StepError> {
        let tracker = DeliveryTracker {
            pipeline: cfg.application_id.clone(),
            transactional_id: transactional_id.clone(),
            changelogs: DeliveryTracker::changelogs_of(cfg),
            ..DeliveryTracker::default()
        };
        let inner = cfg
            .producer_config(transactional_id.as_deref())
            .create_with_context(tracker)
            // Never quote a rejected secret property's value (rust-rdkafka's Display does).
            .map_err(|e| StepError::new(Step::Create, KafkaError::ClientCreation(crate::config::client_error(&e))))?;
        Ok(TxnProducer {
            inner: Arc::new(inner),
            wedged: false,
            end_retried: false,
            transactional_id,
            warm_up_topic: cfg.input_topics.first().cloned(),
            origin_header: cfg.origin_header,
            cycle: 0,
            nonce: offsets::nonce(),
            mark: None,
            sent: 0,
            in_txn: false,
            call_timeout: cfg.call_timeout(),
            timers: TxnTimers::new(&cfg.application_id, partition),
            fault: cfg.fault.clone(),
        })
    }

    /// The transactional.id, or `None` for an idempotent producer.
    pub(crate) fn transactional_id(&self) -> Option<&str> {
        self.transactional_id.as_deref()
    }

    /// `init_transactions`: registers the transactional.id with its coordinator, which bumps
    /// the epoch (fencing any older producer with the same id) and completes that producer's
    /// open transaction. Retriable errors are retried until `deadline`.
    pub(crate) fn init(&mut self, deadline: Deadline<'_>) -> Result<(), StepError> {
        if self.transactional_id.is_none() {
            return Ok(());
        }
        let started = Instant::now();
        // A fresh producer's first coordinator query finds no broker connected and is
        // retried only after librdkafka's fixed retry pause (`rd_kafka_txn_coord_query`).
        // This metadata request waits for the first connection, so the query finds one
        // (docs/scaling.md, *A producer's connection warm-up*, has the figures). Best
        // effort: a failure is `init_transactions`'.
        if let (Some(topic), false) = (self.warm_up_topic.as_deref(), self.wedged) {
            let bound = deadline.remaining().min(self.call_timeout);
            if let Err(e) = self.inner.client().fetch_metadata(Some(topic), bound) {
                tracing::debug!(error = %e, "the producer's warm-up metadata request failed");
            }
        }
        let result = self.retrying(Step::Init, deadline, || Box::new(|p, t| p.init_transactions(t)));
        self.timers.init_latency.record(started.elapsed().as_secs_f64());
        result
    }

    /// Starts a cycle: a new cycle number for delivery reports and, if transactional,
    /// `begin_transaction`.
    pub(crate) fn begin(&mut self) -> Result<(), StepError> {
        if self.end_retried {
            // The task replaces such a producer before its next transaction; this refusal
            // keeps any path that would not from ending a transaction half-done.
            tracing::error!(transactional_id = ?self.transactional_id, "refusing to begin a transaction on a producer that must be replaced");
            return Err(StepError { step: Step::Begin, class: ErrorClass::Fatal, err: KafkaError::Canceled });
        }
        self.cycle += 1;
        self.mark = None;
        self.sent = 0;
        let t = self.inner.context();
        t.cycle.store(self.cycle, Ordering::Relaxed);
        t.acked.store(0, Ordering::Relaxed);
        t.failed.store(0, Ordering::Relaxed);
        *t.first_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *t.failed_topic.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if self.transactional_id.is_some() {
            let started = Instant::now();
            let result = self.inner.begin_transaction();
            add_ns(&self.timers.begin, started.elapsed());
            result.map_err(|e| StepError::new(Step::Begin, e))?;
            self.in_txn = true;
        }
        Ok(())
    }

    /// Enqueues one output; waits (serving delivery reports) while librdkafka's queue is full.
    pub(crate) fn send(
        &mut self,
        out: &OutputRecord,
        origin: Option<&InputRecord>,
        deadline: Deadline<'_>,
    ) -> Result<(), StepError> {
        let mut headers = OwnedHeaders::new_with_capacity(out.headers.len() + 1);
        for (k, v) in &out.headers {
            headers = headers.insert(RdHeader { key: k, value: v.as_deref() });
        }
        let origin_value;
        if let (true, Some(origin)) = (self.origin_header, origin) {
            origin_value = origin.origin();
            headers = headers.insert(RdHeader { key: ORIGIN_HEADER, value: Some(origin_value.as_bytes()) });
        }
        let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&out.topic, self.cycle).headers(headers);
        record.key = out.key.as_deref();
        record.payload = out.value.as_deref();
        record.partition = out.partition;
        record.timestamp = out.timestamp;
        loop {
            match self.inner.send(record) {
                Ok(()) => {
                    self.sent += 1;
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    if deadline.passed() {
                        return Err(StepError::new(
                            Step::Produce,
                            KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                        ));
                    }
                    record = r;
                    self.inner.poll(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(StepError::new(Step::Produce, e)),
            }
        }
    }

    /// Waits until every output of this cycle has a delivery report; the first failed
    /// report is the cycle's error.
    pub(crate) fn await_acks(&mut self, deadline: Deadline<'_>) -> Result<(), StepError> {
        let unreported = |p: &Self| {
            let t = p.inner.context();
            p.sent.saturating_sub(t.acked.load(Ordering::Relaxed) + t.failed.load(Ordering::Relaxed))
        };
        if unreported(self) > 0 {
            self.send_lingering();
        }
        if !self.serve_until_none(unreported, deadline) {
            return Err(StepError::new(Step::AwaitAcks, KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)));
        }
        let first = self.inner.context().first_error.lock().unwrap_or_else(|p| p.into_inner()).take();
        match first {
            Some(e) => Err(StepError::new(Step::AwaitAcks, self.cause(e))),
            None => Ok(()),
        }
    }

    /// A failed delivery's error, or, if librdkafka purged the record because the open
    /// transaction failed (`_PURGE_QUEUE`: it purges every queued record when a transaction
    /// gets an abortable error, such as a refused `AddPartitionsToTxn`), the transaction's
    /// own error, which says why. `begin_transaction` returns that error while the
    /// transaction is failed, and fails with `_STATE` while it is open, changing nothing in
    /// either case: librdkafka checks the transaction's state first.
    fn cause(&self, e: KafkaError) -> KafkaError {
        if !self.in_txn || self.wedged || e.rdkafka_error_code() != Some(RDKafkaErrorCode::PurgeQueue) {
            return e;
        }
        match self.inner.begin_transaction() {
            Err(cause) if cause.rdkafka_error_code() != Some(RDKafkaErrorCode::State) => cause,
            _ => e,
        }
    }

    /// Makes librdkafka send the outputs still waiting out `linger.ms` now: the batch is
    /// closed, nothing more will join them, and every record of the batch waits for them.
    /// librdkafka ignores the linger only while a `flush` call runs, and with delivery
    /// reports as events (rust-rdkafka's) a flush returns only once they are served, which
    /// this thread does; so the flag is held for [`LINGER_FLUSH`], long enough for the
    /// woken broker threads to see it. Only the wait for the reports is shorter: a broker
    /// thread that wakes too late sends at the end of the linger, as without it.
    fn send_lingering(&self) {
        let rk = self.inner.client().native_ptr();
        let ms = LINGER_FLUSH.as_millis() as i32;
        // SAFETY: `rk` is the live handle `self.inner` owns; `rd_kafka_flush` is thread-safe
        // and, with event delivery reports, only waits (it serves no queue).
        unsafe {
            rdkafka::bindings::rd_kafka_flush(rk, ms);
        }
    }

    /// Serves this producer's events on the calling thread until `left` counts nothing more
    /// or `deadline` passes; returns whether nothing is left. A zero timeout makes `poll`
    /// serve at most one event and return; when that changed nothing, the thread pauses
    /// [`ACK_POLL_PAUSE`] instead of spinning.
    fn serve_until_none(&self, left: impl Fn(&Self) -> u64, deadline: Deadline<'_>) -> bool {
        let mut before = left(self);
        while before > 0 {
            if deadline.passed() {
                return false;
            }
            self.inner.poll(Duration::ZERO);
            let after = left(self);
            if after == before {
                std::thread::sleep(ACK_POLL_PAUSE);
            }
            before = after;
        }
        true
    }

    /// `send_offsets_to_transaction`, once (see the module docs: no second try on the same
    /// epoch after an indefinite answer).
    pub(crate) fn send_offsets(
        &mut self,
        offsets: &TopicPartitionList,
        group: &Arc<ConsumerGroupMetadata>,
        deadline: Deadline<'_>,
    ) -> Result<(), StepError> {
        let mark = offsets::mark(self.nonce, self.cycle);
        let offsets = offsets::marked(offsets, &mark);
        self.mark = Some(mark);
        self.retrying(Step::SendOffsets, deadline, || {
            let (offsets, group) = (offsets.clone(), group.clone());
            Box::new(move |p, t| p.send_offsets_to_transaction(&offsets, &group, t))
        })
    }

    /// The mark of the offsets this cycle sent (each offset's metadata): how a reconcile
    /// tells this transaction's commit from another's of the same offsets ([`offsets`]).
    /// `None` if the cycle sent none.
    pub(crate) fn offsets_mark(&self) -> Option<&str> {
        self.mark.as_deref()
    }

    /// `commit_transaction`, resumed while it times out, until `deadline` but for at least
    /// twice the call timeout even when the task is interrupted (see the module docs). Any
    /// failure but fencing leaves the outcome unknown to the task, which then fences this
    /// producer and reconciles.
    pub(crate) fn commit(&mut self, deadline: Deadline<'_>) -> Result<(), StepError> {
        let deadline = deadline.with_grace(watchdog::commit_grace(self.call_timeout));
        let injected = self.fault.as_ref().and_then(|f| f.on_commit());
        if let Some(slow @ (UnknownOutcome::TimedOutBeforeCommit | UnknownOutcome::TimedOutSlowlyBeforeCommit)) =
            injected
        {
            tracing::warn!(transactional_id = ?self.transactional_id, ?slow, "fault injection: commit not made, reported as timed out");
            if slow == UnknownOutcome::TimedOutSlowlyBeforeCommit {
                std::thread::sleep(self.call_timeout);
            }
            return Err(StepError::new(Step::Commit, KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)));
        }
        let hang = injected == Some(UnknownOutcome::CommittedThenHung);
        self.retrying(Step::Commit, deadline, || {
            Box::new(move |p, t| {
                let committed = p.commit_transaction(t);
                if hang {
                    tracing::warn!("fault injection: commit made, the call hangs");
                    std::thread::sleep(Duration::from_secs(3600));
                }
                committed
            })
        })?;
        self.in_txn = false;
        if injected == Some(UnknownOutcome::CommittedButTimedOut) {
            tracing::warn!(transactional_id = ?self.transactional_id, "fault injection: commit made, reported as timed out");
            return Err(StepError::new(Step::Commit, KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)));
        }
        Ok(())
    }

    /// Whether this producer must not begin another transaction ([`begin`](Self::begin)
    /// refuses): a commit or an abort of its epoch was called again after a call timed out,
    /// or librdkafka reported a client error (a broken connection, timed-out requests)
    /// during the call — librdkafka then sends the same `EndTxn` again on its own
    /// (`rd_kafka_txn_handle_EndTxn` retries on `_TRANSPORT` and `_TIMED_OUT`), and the
    /// call can return while the first copy still waits at a stalled broker. A late
    /// `EndTxn` ends the next transaction of the same epoch half-done — a commit commits
    /// part of it, an abort aborts its records while the offsets sent next commit alone
    /// (KAFKA-17754; librdkafka speaks only the classic protocol, without KIP-890's epoch
    /// bump per transaction). A fresh producer's `init_transactions` bumps the epoch, which
    /// fences the late request.
    pub(crate) fn must_be_replaced(&self) -> bool {
        self.end_retried
    }

    /// Aborts the open transaction, if any. librdkafka's abort waits for every outstanding
    /// message's delivery report to be *served*, and nothing else polls this producer: so
    /// first serve the reports until nothing is outstanding (they belong to this cycle and
    /// are discarded with it), then abort.
    ///
    /// Outstanding messages are *not* purged first: a message has its idempotence sequence
    /// number from the moment it is enqueued, so purging queued ones leaves a gap that the
    /// next transaction's first produce hits (`OUT_OF_ORDER_SEQUENCE_NUMBER`, "requires
    /// epoch bump"): every processor-failure abort would cost a second, failed transaction,
    /// and an abort could fail with `INVALID_TXN_STATE`, giving the producer up. Letting
    /// them be delivered costs at most a produce round trip (or the message timeout while
    /// brokers are down), and they are aborted with the rest.
    pub(crate) fn abort(&mut self, deadline: Deadline<'_>) -> Result<(), StepError> {
        if self.in_txn {
            self.serve_until_none(|p| p.inner.in_flight_count().max(0) as u64, deadline);
            self.retrying(Step::Abort, deadline, || {
                Box::new(|p, t| {
                    p.poll(Duration::ZERO);
                    p.abort_transaction(t)
                })
            })?;
            self.in_txn = false;
        }
        Ok(())
    }
}

// How a transactional call is made: bounded by the call timeout and the step's deadline,
// guarded by the watchdog, retried with backoff while retriable — except `send_offsets`,
// which gets one call per epoch, and `commit`, whose retriable failure is resumed (see the
// module's hazards) — and timed per step.
impl TxnProducer {
    pub(super) fn retrying(
        &mut self,
        step: Step,
        deadline: Deadline<'_>,
        mut call: impl FnMut() -> watchdog::Call,
    ) -> Result<(), StepError> {
        let started = Instant::now();
        let ends = matches!(step, Step::Commit | Step::Abort);
        let errors_before = self.client_errors();
        let result = self.retry_until(step, deadline, &mut call);
        if ends && result.is_ok() && self.client_errors() != errors_before {
            self.end_retried = true;
            tracing::info!(
                transactional_id = ?self.transactional_id,
                step = step.as_str(),
                "librdkafka reported a client error during the call, so it may have sent the EndTxn again: the producer is replaced before its next transaction"
            );
        }
        let timer = match step {
            Step::Init => &self.timers.init,
            Step::SendOffsets => &self.timers.send_offsets,
            Step::Commit => &self.timers.commit,
            Step::Abort => &self.timers.abort,
            _ => return result,
        };
        add_ns(timer, started.elapsed());
        result
    }

    /// The client errors librdkafka reported so far, after serving the events it queued
    /// meanwhile (a blocking transactional call serves none): an error that came during a
    /// call is in the queue, before anything later.
    fn client_errors(&self) -> u64 {
        for _ in 0..PENDING_EVENTS {
            self.inner.poll(Duration::ZERO);
        }
        self.inner.context().client_errors.load(Ordering::Relaxed)
    }

    fn retry_until(
        &mut self,
        step: Step,
        deadline: Deadline<'_>,
        call: &mut impl FnMut() -> watchdog::Call,
    ) -> Result<(), StepError> {
        let mut backoff = Duration::from_millis(50);
        loop {
            if self.wedged {
                // A call abandoned earlier may still run: a second one would race it.
                return Err(StepError { step, class: ErrorClass::Fatal, err: KafkaError::Canceled });
            }
            let timeout = deadline.remaining().max(Duration::from_millis(1)).min(self.call_timeout);
            let guarded = match &self.fault {
                Some(f) if f.unguarded_calls => Ok(call()(&self.inner, timeout)),
                _ => watchdog::run(&self.inner, timeout, watchdog::GRACE, call()),
            };
            let result = match guarded {
                Ok(result) => result,
                Err(watchdog::Abandoned) => {
                    self.wedged = true;
                    tracing::error!(
                        transactional_id = ?self.transactional_id,
                        step = step.as_str(),
                        ?timeout,
                        "librdkafka did not return from a transactional call within its timeout (librdkafka#5456): \
                         the call is abandoned and the producer will be replaced"
                    );
                    // Timed out, as far as the cycle knows: the outcome is unknown.
                    let err = KafkaError::Global(RDKafkaErrorCode::OperationTimedOut);
                    return Err(StepError { step, class: ErrorClass::Retriable, err });
                }
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let err = StepError::new(step, e);
                    // Offsets are never sent twice on one epoch; a commit called again resumes
                    // the one in progress (see the module docs).
                    let once = step == Step::SendOffsets;
                    if once || err.class != ErrorClass::Retriable || backoff >= deadline.remaining() {
                        return Err(err);
                    }
                    self.end_retried |= matches!(step, Step::Commit | Step::Abort);
                    let what = if step == Step::Commit { "resuming the commit" } else { "retrying" };
                    tracing::warn!(transactional_id = ?self.transactional_id, error = %err, "{what}");
                    deadline.sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;

/// Error paths a real broker rarely produces, driven by librdkafka's mock cluster.
#[cfg(test)]
mod mock_cluster_tests;

mod delivery;
mod offsets;
mod reports;
mod step;
pub(crate) mod watchdog;
mod work;
pub(crate) use delivery::DeliveryTracker;
pub(crate) use offsets::{group_id_only, next_offset_per_partition, next_offsets};
pub(crate) use step::{Step, StepError};
pub(crate) use work::{CycleError, CycleStats, SinkStep, Work};
