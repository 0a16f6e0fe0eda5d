//! The consumer thread: polls the consumer, routes records to tasks, and runs the rebalance
//! protocol (incremental protocols touch only moved partitions, `Eager` everything). Assign:
//! each new partition's producer is initialised, fencing the previous owner, before the
//! committed offsets are fetched (as stable, KIP-447). Revoke: each task's [`Interrupt`](super::interrupt::Interrupt) is
//! set, then the callback waits, bounded, for its commit; a task that does not answer is
//! abandoned to fencing. A fenced producer makes the consumer rejoin the group; a producer
//! that failed on its own is replaced in place, and a task that cannot start is retried
//! ([`recovery`]).

use std::sync::mpsc::{Receiver, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::ClientContext;

use crate::config::{Guarantee, PipelineConfig};
use crate::error::{Error, Result};
use crate::record::{InputRecord, Topic};
use crate::runtime::pending::Sent;
use crate::runtime::protocol::{Control, TaskMsg};
use crate::runtime::registry::{
    join_by, queue_capacity, send_bounded, spawn_task, to_tpl, wait_ready_unless, Registry, TaskHandle,
};
use crate::runtime::task::Resume;
use crate::runtime::{Shared, POLL_INTERVAL};
use crate::state::changelog::group_reader_config;

mod rebalance;
mod recovery;
mod wake;

/// Runs the consumer thread until shutdown or a fatal error.
pub(crate) fn run(shared: Arc<Shared>, control: Receiver<Control>) -> Result<()> {
    let cfg = shared.cfg.clone();
    let handler = Rebalancer {
        topics: cfg.input_topics.iter().map(Topic::new).collect(),
        shared: shared.clone(),
        resume: Mutex::new(Vec::new()),
        registry: Mutex::new(Registry::default()),
        fatal: Mutex::new(None),
        shutdown_deadline: Mutex::new(None),
        waker: OnceLock::new(),
    };
    let consumer: BaseConsumer<Rebalancer> = cfg.consumer_config().create_with_context(handler).map_err(|e| {
        Error::Config(format!("consumer configuration rejected by librdkafka: {}", crate::config::client_error(&e)))
    })?;
    let consumer = Arc::new(consumer);
    let waker = wake::FetchWaker::start(Arc::downgrade(&consumer))
        .map_err(|e| Error::Internal(format!("cannot start the fetch waker thread: {e}")))?;
    let _ = consumer.context().waker.set(waker);
    let _ = shared.group.set(if cfg.guarantee == Guarantee::ExactlyOnce {
        // Per-partition mode: the group id alone, fenced by the transactional.id
        // (crate::txn's offsets module says why).
        let group = crate::txn::group_id_only(group_reader_config(&cfg))
            .map_err(|e| Error::Config(format!("group metadata for the transactions' offsets: {e}")))?;
        let group = Arc::new(group);
        Box::new(move || Some(group.clone()))
    } else {
        // Tasks read the group metadata through a weak reference: the consumer (whose
        // context holds the tasks) is never kept alive by them.
        let weak = Arc::downgrade(&consumer);
        Box::new(move || weak.upgrade().and_then(|c| c.group_metadata()).map(Arc::new))
    });
    if cfg.guarantee != Guarantee::ExactlyOnce {
        // Long-lived workers (each with its own producer) that share the instance's
        // partitions, initialised in parallel and ready before joining.
        let ctx = consumer.context();
        let deadline = Instant::now() + cfg.task_timeout;
        let mut starting = Vec::new();
        for k in 0..cfg.workers {
            let txn_id = (cfg.guarantee == Guarantee::ExactlyOncePerConsumer).then(|| cfg.worker_transactional_id(k));
            let label = if cfg.workers == 1 { "all".to_string() } else { format!("worker-{k}") };
            let id = ctx.registry().next_id();
            starting.push((id, spawn_task(&shared, id, txn_id, Vec::new(), label)?));
        }
        for (id, (handle, ready)) in starting {
            // Shut down before every worker started: nothing was consumed, nothing to commit.
            // A worker still starting is dropped; its start ends on its own thread.
            if wait_ready_unless(ready, deadline, || shared.shutdown.is_shutdown())?.is_none() {
                drop(handle);
                consumer.context().stop_all_tasks(Instant::now() + cfg.shutdown_timeout);
                tracing::info!(application_id = %cfg.application_id, "pipeline stopped while starting");
                return Ok(());
            }
            ctx.registry().tasks.insert(id, handle);
        }
    }
    let topics: Vec<&str> = cfg.input_topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(|e| Error::Config(format!("cannot subscribe to {topics:?}: {e}")))?;
    tracing::info!(application_id = %cfg.application_id, guarantee = cfg.guarantee.as_str(), ?topics, "pipeline started");

    let mut fatal: Option<Error> = None;
    let mut last_poll_error = Instant::now() - Duration::from_secs(60);
    'run: while !shared.shutdown.is_shutdown() {
        while let Ok(msg) = control.try_recv() {
            match msg {
                Control::CommitOffsets(offsets) => {
                    if let Err(e) = consumer.commit(&to_tpl(&offsets), CommitMode::Async) {
                        tracing::warn!(error = %e, "offset commit failed; the next one supersedes it");
                    }
                }
                Control::Fenced { task, error } => {
                    if consumer.context().registry().owns_partitions(task) {
                        tracing::warn!(task, %error, "producer fenced: leaving the group so that it reassigns the partitions");
                        if let Err(e) = rejoin(&consumer, &cfg, &topics) {
                            fatal = Some(e);
                            break 'run;
                        }
                    }
                }
                Control::Rewind { task, partitions, resume } => {
                    if let Err(why) = consumer.context().rewind(&consumer, task, partitions, &resume) {
                        tracing::warn!(task, %why, "cannot rewind the partitions: leaving the group so that it reassigns them");
                        if let Err(e) = rejoin(&consumer, &cfg, &topics) {
                            fatal = Some(e);
                            break 'run;
                        }
                    }
                }
                Control::Fatal(e) => {
                    fatal = Some(e);
                    break 'run;
                }
            }
        }
        if let Some(e) = consumer.context().take_fatal() {
            fatal = Some(e);
            break;
        }
        consumer.context().drain_pending(&consumer);
        consumer.context().start_unstarted(&consumer);
        match consumer.poll(POLL_INTERVAL) {
            Some(Ok(m)) => {
                let ctx = consumer.context();
                ctx.dispatch(&consumer, InputRecord::from_message_in(&m, ctx.topic(m.topic())))
            }
            Some(Err(e)) => {
                if let Some((code, reason)) = consumer.client().fatal_error() {
                    fatal = Some(consumer_failed(&cfg, code, reason));
                    break;
                }
                if last_poll_error.elapsed() > Duration::from_secs(5) {
                    tracing::warn!(error = %e, "consumer error");
                    last_poll_error = Instant::now();
                }
            }
            None => {}
        }
    }
    // Graceful shutdown, bounded by the shutdown timeout: revocation commits every task's
    // collected batch, then the instance task (if any) stops. A task still busy at the
    // deadline is abandoned: its open transaction is aborted by the coordinator's timeout or
    // fenced by the partition's next owner, so nothing half-done becomes visible.
    shared.shutdown.shutdown();
    let deadline = Instant::now() + cfg.shutdown_timeout;
    *consumer.context().shutdown_deadline.lock().unwrap_or_else(|p| p.into_inner()) = Some(deadline);
    let task_deadline = consumer.context().task_deadline(deadline);
    for task in consumer.context().registry().tasks.values() {
        task.interrupt.shut_down(task_deadline);
    }
    // A static member on the classic protocol must not leave the group (KIP-345): its
    // restart, within the session timeout, takes its partitions back with no rebalance. So
    // no unsubscribe: the tasks commit what they collected as they stop, and closing the
    // consumer sends no LeaveGroup. (KIP-848 has a temporary leave for static members.)
    let stays_in_group = cfg.group_instance_id().is_some() && cfg.rebalancing() != crate::Rebalancing::Consumer;
    if !stays_in_group {
        leave_group(&consumer, deadline);
    }
    consumer.context().stop_all_tasks(deadline);
    if let Some(waker) = consumer.context().waker.get() {
        waker.stop(deadline.max(Instant::now() + Duration::from_millis(100)));
    }
    // At-least-once, a static member: the offsets the workers acknowledged while stopping
    // (a member that left had them committed by its revocation, and can commit no more).
    let mut acked = Vec::new();
    while let Ok(msg) = control.try_recv() {
        if let Control::CommitOffsets(offsets) = msg {
            acked.extend(offsets);
        }
    }
    if stays_in_group && !acked.is_empty() {
        if let Err(e) = consumer.commit(&to_tpl(&acked), CommitMode::Sync) {
            tracing::warn!(error = %e, "committing the last acknowledged offsets failed; a restart may reprocess them (at-least-once)");
        }
    }
    tracing::info!(application_id = %cfg.application_id, summary = ?shared.shutdown.summary(), "pipeline stopped");
    match fatal.or_else(|| consumer.context().take_fatal()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// librdkafka marked the consumer failed for good: what to do about it.
fn consumer_failed(cfg: &PipelineConfig, code: rdkafka::error::RDKafkaErrorCode, reason: String) -> Error {
    use rdkafka::error::RDKafkaErrorCode as C;
    let hint = match (cfg.rebalancing(), code) {
        (crate::Rebalancing::Consumer, C::UnsupportedVersion | C::UnsupportedFeature) => {
            "Rebalancing::Consumer (KIP-848) needs Kafka 4.0 or newer brokers: use Rebalancing::Cooperative with older ones"
        }
        (_, C::UnreleasedInstanceId | C::FencedInstanceId) => {
            "Another instance uses the same instance_id as group.instance.id (static membership): give each instance its own"
        }
        _ => "The consumer cannot go on; check the broker logs and the consumer properties",
    };
    let source = rdkafka::error::KafkaError::MessageConsumption(code);
    let source = crate::error::KafkaError::with_class(source, crate::ErrorClass::Fatal);
    Error::kafka_failure(format!("consuming as group {} ({reason})", cfg.application_id), source, hint)
}

/// Leaves the group (committing or dropping every task's batch) and joins it again, so that
/// the group hands this instance's partitions out anew.
fn rejoin(consumer: &BaseConsumer<Rebalancer>, cfg: &PipelineConfig, topics: &[&str]) -> Result<()> {
    leave_group(consumer, Instant::now() + cfg.task_timeout + Duration::from_secs(5));
    consumer.subscribe(topics).map_err(|e| Error::Config(format!("cannot re-subscribe to {topics:?}: {e}")))
}

/// Unsubscribes and polls until the revocation callback has finished every task's batch,
/// then, on the classic protocol, until librdkafka has sent the LeaveGroup.
///
/// The second wait matters: librdkafka sends the LeaveGroup only once the unassignment it
/// started has completed (the partitions' fetchers stopped). A consumer closed before that —
/// which can come within milliseconds of the revocation when the tasks had little to commit —
/// terminates without leaving (librdkafka 2.12: its terminate path clears the assignment
/// but skips the pending leave), and the group keeps the member's partitions, unprocessed,
/// until its session times out. Under KIP-848 the leave is a heartbeat that the close
/// itself sends.
fn leave_group(consumer: &BaseConsumer<Rebalancer>, deadline: Instant) {
    consumer.unsubscribe();
    while consumer.context().registry().has_routes() && Instant::now() < deadline {
        // Records still arriving belong to partitions being revoked: never routed again.
        let _ = consumer.poll(POLL_INTERVAL);
    }
    if consumer.context().shared.cfg.rebalancing() == crate::Rebalancing::Consumer {
        return;
    }
    let left_by = deadline.min(Instant::now() + LEAVE_WAIT);
    while has_member_id(consumer) && Instant::now() < left_by {
        let _ = consumer.poll(POLL_INTERVAL);
    }
}

/// The longest a stopping consumer waits for librdkafka to send its LeaveGroup.
const LEAVE_WAIT: Duration = Duration::from_secs(5);

/// Whether librdkafka still holds a group member id: it clears it as it sends the
/// LeaveGroup, and closing the consumer from then on waits for the request to be answered.
fn has_member_id<C: rdkafka::consumer::ConsumerContext>(consumer: &BaseConsumer<C>) -> bool {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live handle `consumer` owns. `rd_kafka_memberid` returns NULL or a
    // NUL-terminated copy that the caller frees with `rd_kafka_mem_free`, done here once read.
    unsafe {
        let id = rdkafka::bindings::rd_kafka_memberid(rk);
        if id.is_null() {
            return false;
        }
        let set = *id != 0;
        rdkafka::bindings::rd_kafka_mem_free(rk, id.cast());
        set
    }
}

/// The consumer's context: owns the task registry and runs the rebalance callbacks.
struct Rebalancer {
    /// Where assigned partitions start instead of their committed offset: the offsets an
    /// exactly-once sink stores ([`crate::sink`]), set by `on_assign`, applied to the
    /// assignment in [`ConsumerContext::rebalance`] before librdkafka fetches anything.
    resume: Mutex<Resume>,
    shared: Arc<Shared>,
    /// The input topics' names, made once: every record and assigned partition of a topic
    /// shares its name ([`topic`](Self::topic)), so that routing a record allocates none.
    topics: Vec<Topic>,
    registry: Mutex<Registry>,
    fatal: Mutex<Option<Error>>,
    /// Set when shutting down: bounds every wait from then on.
    shutdown_deadline: Mutex<Option<Instant>>,
    /// Set once the consumer exists ([`wake`]).
    waker: OnceLock<wake::FetchWaker>,
}

impl Rebalancer {
    /// Wakes the fetchers of `partitions`, just resumed ([`wake`]).
    fn wake(&self, partitions: impl IntoIterator<Item = crate::partition::TopicPartition>) {
        if let Some(w) = self.waker.get() {
            w.wake(partitions);
        }
    }

    /// The shared name of input topic `name` (a reference count; a topic the pipeline does
    /// not list, which the consumer does not deliver, is allocated).
    fn topic(&self, name: &str) -> Topic {
        match self.topics.iter().find(|t| t.as_str() == name) {
            Some(t) => t.clone(),
            None => Topic::new(name),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_fatal(&self, e: Error) {
        tracing::error!(error = %e, "stopping the pipeline");
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
    }

    fn take_fatal(&self) -> Option<Error> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Routes a record to its partition's task. When the task's queue is full the record
    /// waits in this partition's pending queue, and past that queue's bound the partition is
    /// paused (backpressure without blocking this thread, which must keep polling to run
    /// rebalances; see [`pending`](super::pending)). A record is
    /// dropped only when its partition has no task (revoked): never while a later record of
    /// the same partition could still be committed.
    fn dispatch(&self, consumer: &BaseConsumer<Self>, record: InputRecord) {
        let tp = (record.topic.clone(), record.partition); // a reference count: no allocation
        self.shared.shutdown.health_state().dispatched(&tp, record.offset);
        let mut reg = self.registry();
        let Some(tx) = reg.routes.get(&tp).and_then(|id| reg.tasks.get(id)).map(|t| t.tx.clone()) else {
            tracing::trace!(record = %record.origin(), "no task for this partition (revoked): not routed");
            return;
        };
        // Behind the partition's waiting records if it has any; else straight to the task.
        let record = if reg.pending.contains(&tp) {
            record
        } else {
            match tx.try_send(TaskMsg::Record(record)) {
                Ok(()) => return,
                Err(TrySendError::Full(TaskMsg::Record(r))) => r,
                Err(_) => {
                    drop(reg);
                    self.set_fatal(Error::Internal("a partition task exited while its partition was assigned".into()));
                    return;
                }
            }
        };
        // Pausing makes librdkafka drop what it prefetched and fetch it again on resume, so
        // the bound is generous (see `pending`).
        if reg.pending.push(&tp, record, queue_capacity(&self.shared.cfg)) && reg.paused.insert(tp.clone()) {
            drop(reg);
            tracing::debug!(partition = ?tp, "task queue full: partition paused");
            if let Err(e) = consumer.pause(&to_tpl(&[(tp, 0)])) {
                tracing::warn!(error = %e, "pausing a partition failed; its records wait in memory");
            }
        }
    }

    /// Moves pending records into their tasks' queues as room appears; resumes a partition
    /// once its pending queue is empty.
    fn drain_pending(&self, consumer: &BaseConsumer<Self>) {
        let mut reg = self.registry();
        if reg.pending.is_empty() {
            return;
        }
        let Registry { pending, routes, tasks, .. } = &mut *reg;
        let emptied = pending.drain(|tp, r| {
            let Some(task) = routes.get(tp).and_then(|id| tasks.get(id)) else { return Sent::Full(r) };
            match task.tx.try_send(TaskMsg::Record(r)) {
                Ok(()) => Sent::Taken,
                Err(TrySendError::Full(TaskMsg::Record(r))) => Sent::Full(r),
                Err(_) => Sent::Gone,
            }
        });
        let mut resumed: Vec<(crate::partition::TopicPartition, i64)> = emptied.into_iter().map(|tp| (tp, 0)).collect();
        resumed.retain(|(tp, _)| reg.paused.remove(tp));
        drop(reg);
        if !resumed.is_empty() {
            tracing::debug!(partitions = ?resumed, "task queue drained: partitions resumed");
            if let Err(e) = consumer.resume(&to_tpl(&resumed)) {
                tracing::warn!(error = %e, "resuming partitions failed");
            }
            self.wake(resumed.into_iter().map(|(tp, _)| tp));
        }
    }

    /// Shuts down every remaining task (the instance task, in the long-lived modes).
    fn stop_all_tasks(&self, deadline: Instant) {
        let tasks: Vec<(u64, TaskHandle)> = self.registry().tasks.drain().collect();
        for (_, h) in &tasks {
            let _ = send_bounded(&h.tx, TaskMsg::Shutdown, deadline);
        }
        for (id, h) in tasks {
            if !join_by(h.join, deadline) {
                tracing::warn!(
                    task = id,
                    "task still busy at the shutdown deadline: abandoned to the transaction timeout"
                );
            }
        }
    }
}

impl ClientContext for Rebalancer {
    /// librdkafka statistics (when `statistics.interval.ms` is set): consumer lag.
    fn stats(&self, stats: rdkafka::Statistics) {
        let app = &self.shared.cfg.application_id;
        for (topic, t) in &stats.topics {
            for (p, s) in &t.partitions {
                if *p >= 0 && s.consumer_lag >= 0 {
                    crate::metrics::consumer_lag(app, topic, *p, s.consumer_lag);
                }
            }
        }
    }
}
