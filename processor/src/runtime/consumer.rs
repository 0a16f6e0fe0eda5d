//! The consumer thread: polls the consumer, routes records to tasks, and runs the
//! rebalance protocol.
//!
//! # Rebalances
//! The callbacks see only the partitions that move under the incremental protocols
//! ([`Rebalancing::Cooperative`](crate::Rebalancing), `Consumer`): every other partition
//! keeps its task, its producer and its state, and goes on committing, with the group
//! metadata read afresh by each transaction. Under `Eager` every rebalance revokes and
//! assigns everything. The steps are the same:
//!
//! - **Assign.** Before librdkafka applies the assignment (and so before it fetches the
//!   committed offsets), every new partition's task is started and its producer
//!   initialised, in parallel; the callback waits for all of them. `init_transactions`
//!   fences the previous owner and completes its open transaction, so the offsets fetched
//!   next are final; the consumer is read_committed, so librdkafka also fetches them as
//!   *stable* (KIP-447), which covers the per-consumer mode where no transactional.id is
//!   shared.
//! - **Revoke.** The callback tells each affected task and waits — bounded by the task
//!   timeout — until it has committed its collected batch (at-least-once: then commits the
//!   acknowledged offsets synchronously). A task that does not answer in time is abandoned:
//!   the new owner's `init_transactions` (or the group generation) fences it, so it can
//!   commit nothing after the partition moved. Before telling a task, the callback sets
//!   its [`Interrupt`]: a task retrying a failing batch gives up on it by the shutdown
//!   timeout (see [`super::interrupt`]), so the group's rebalance is not held up for a
//!   whole task timeout.
//! - **Lost** (session timeout, fenced generation): tasks drop their batch without
//!   committing, and a task retrying a failing batch drops it at once (the interrupt); the
//!   group has already moved on.
//! - **Shutdown.** Every task's interrupt is set with four fifths of the shutdown timeout,
//!   then the consumer leaves the group (a revocation) and stops the remaining tasks.
//! - **Fenced producer.** A task whose producer was fenced by a newer owner, or whose member
//!   the group no longer knows, reports it; the consumer leaves the group and joins again,
//!   so the group reassigns its partitions (to this instance or another) and they restart
//!   from their committed offsets. A producer that failed for its own reasons is replaced
//!   in place instead, and a partition whose task cannot start is retried while the others
//!   run ([`recovery`]).

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::config::{Guarantee, PipelineConfig};
use crate::error::{Error, Result};
use crate::record::InputRecord;
use crate::runtime::registry::{
    queue_capacity, retry_later, send_bounded, spawn_partition_task, spawn_task, to_tpl, wait_ready, wait_ready_unless,
    Ready, Registry, TaskHandle, Unstarted,
};
use crate::runtime::task::{Resume, RevokeReply, TaskMsg};
use crate::runtime::{Control, Shared, TopicPartition, POLL_INTERVAL};

mod recovery;

/// Runs the consumer thread until shutdown or a fatal error.
pub(crate) fn run(shared: Arc<Shared>, control: Receiver<Control>) -> Result<()> {
    let cfg = shared.cfg.clone();
    let handler = Rebalancer {
        shared: shared.clone(),
        resume: Mutex::new(Vec::new()),
        registry: Mutex::new(Registry::default()),
        fatal: Mutex::new(None),
        shutdown_deadline: Mutex::new(None),
    };
    let consumer: BaseConsumer<Rebalancer> = cfg.consumer_config().create_with_context(handler).map_err(|e| {
        Error::Config(format!("consumer configuration rejected by librdkafka: {}", crate::config::client_error(&e)))
    })?;
    let consumer = Arc::new(consumer);
    // Tasks read the group metadata through a weak reference: the consumer (whose context
    // holds the tasks) is never kept alive by them.
    let weak = Arc::downgrade(&consumer);
    let _ = shared.group.set(Box::new(move || weak.upgrade().and_then(|c| c.group_metadata())));
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
            wait_ready_unless(ready, deadline, || shared.shutdown.is_shutdown())?;
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
                Control::Rewind { task, partitions } => {
                    if let Err(why) = consumer.context().rewind(&consumer, task, partitions) {
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
            Some(Ok(m)) => consumer.context().dispatch(&consumer, InputRecord::from_message(&m)),
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
    Error::Kafka {
        op: format!("consuming as group {} ({reason})", cfg.application_id),
        class: crate::ErrorClass::Fatal,
        source: Box::new(rdkafka::error::KafkaError::MessageConsumption(code)),
        hint,
    }
}

/// Leaves the group (committing or dropping every task's batch) and joins it again, so that
/// the group hands this instance's partitions out anew.
fn rejoin(consumer: &BaseConsumer<Rebalancer>, cfg: &PipelineConfig, topics: &[&str]) -> Result<()> {
    leave_group(consumer, Instant::now() + cfg.task_timeout + Duration::from_secs(5));
    consumer.subscribe(topics).map_err(|e| Error::Config(format!("cannot re-subscribe to {topics:?}: {e}")))
}

/// Unsubscribes and polls until the revocation callback has finished every task's batch.
fn leave_group(consumer: &BaseConsumer<Rebalancer>, deadline: Instant) {
    consumer.unsubscribe();
    while consumer.context().registry().has_routes() && Instant::now() < deadline {
        // Records still arriving belong to partitions being revoked: never routed again.
        let _ = consumer.poll(POLL_INTERVAL);
    }
}

/// The consumer's context: owns the task registry and runs the rebalance callbacks.
struct Rebalancer {
    /// Where assigned partitions start instead of their committed offset: the offsets an
    /// exactly-once sink stores ([`crate::sink`]), set by `on_assign`, applied to the
    /// assignment in [`ConsumerContext::rebalance`] before librdkafka fetches anything.
    resume: Mutex<Resume>,
    shared: Arc<Shared>,
    registry: Mutex<Registry>,
    fatal: Mutex<Option<Error>>,
    /// Set when shutting down: bounds every wait from then on.
    shutdown_deadline: Mutex<Option<Instant>>,
}

impl Rebalancer {
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
    /// waits in this partition's pending queue and the partition is paused (backpressure
    /// without blocking this thread, which must keep polling to run rebalances). A record is
    /// dropped only when its partition has no task (revoked): never while a later record of
    /// the same partition could still be committed.
    fn dispatch(&self, consumer: &BaseConsumer<Self>, record: InputRecord) {
        let tp = (record.topic.clone(), record.partition);
        self.shared.shutdown.health_state().dispatched(&tp, record.offset);
        let mut reg = self.registry();
        let Some(tx) = reg.routes.get(&tp).and_then(|id| reg.tasks.get(id)).map(|t| t.tx.clone()) else {
            tracing::trace!(record = %record.origin(), "no task for this partition (revoked): not routed");
            return;
        };
        if let Some(queue) = reg.pending.get_mut(&tp) {
            queue.push_back(record);
            // Pausing makes librdkafka drop what it prefetched and fetch it again on resume,
            // so only pause once a full queue's worth waits here.
            if queue.len() >= queue_capacity(&self.shared.cfg) && reg.paused.insert(tp.clone()) {
                drop(reg);
                tracing::debug!(partition = ?tp, "task queue full: partition paused");
                if let Err(e) = consumer.pause(&to_tpl(&[(tp, 0)])) {
                    tracing::warn!(error = %e, "pausing a partition failed; its records wait in memory");
                }
            }
            return;
        }
        match tx.try_send(TaskMsg::Record(record)) {
            Ok(()) => {}
            Err(TrySendError::Full(TaskMsg::Record(r))) => {
                reg.pending.entry(tp).or_default().push_back(r);
            }
            Err(_) => {
                drop(reg);
                self.set_fatal(Error::Internal("a partition task exited while its partition was assigned".into()));
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
        let mut resumed = Vec::new();
        let Registry { pending, routes, tasks, .. } = &mut *reg;
        for (tp, queue) in pending.iter_mut() {
            let Some(task) = routes.get(tp).and_then(|id| tasks.get(id)) else { continue };
            while let Some(r) = queue.pop_front() {
                match task.tx.try_send(TaskMsg::Record(r)) {
                    Ok(()) => {}
                    Err(TrySendError::Full(TaskMsg::Record(r))) => {
                        queue.push_front(r);
                        break;
                    }
                    Err(_) => break,
                }
            }
            if queue.is_empty() {
                resumed.push((tp.clone(), 0));
            }
        }
        for (tp, _) in &resumed {
            reg.pending.remove(tp);
        }
        resumed.retain(|(tp, _)| reg.paused.remove(tp));
        drop(reg);
        if !resumed.is_empty() {
            tracing::debug!(partitions = ?resumed, "task queue drained: partitions resumed");
            if let Err(e) = consumer.resume(&to_tpl(&resumed)) {
                tracing::warn!(error = %e, "resuming partitions failed");
            }
        }
    }

    fn on_assign(&self, partitions: Vec<TopicPartition>) {
        let shared = &self.shared;
        shared.shutdown.stats().rebalances.inc();
        crate::metrics::rebalance(&shared.cfg.application_id);
        tracing::info!(?partitions, "partitions assigned");
        shared.shutdown.health_state().assigned(&partitions);
        let deadline = Instant::now() + shared.cfg.task_timeout;
        if shared.cfg.guarantee == Guarantee::ExactlyOnce {
            let mut pending = Vec::new();
            for tp in partitions {
                let id = self.registry().next_id();
                match spawn_partition_task(shared, id, &tp) {
                    Ok((handle, ready)) => pending.push((id, tp, handle, ready)),
                    Err(e) => return self.set_fatal(e),
                }
            }
            for (id, tp, handle, ready) in pending {
                match wait_ready(ready, deadline) {
                    Ok(resume) => {
                        self.resume_at(resume);
                        let mut reg = self.registry();
                        reg.routes.insert(tp, id);
                        reg.tasks.insert(id, handle);
                    }
                    Err(e) if retry_later(&e) => {
                        // One partition's trouble must not stop the others: paused once
                        // assigned, retried from the loop (`start_unstarted`).
                        tracing::warn!(partition = ?tp, error = %e, "the partition's producer cannot be initialised; retrying it while the others run");
                        self.registry().unstarted.insert(tp, Unstarted::new(e.to_string()));
                    }
                    Err(e) => self.set_fatal(e),
                }
            }
        } else {
            // Each new partition goes to the worker with the fewest, and stays there while
            // assigned: under incremental rebalancing the others keep theirs.
            let mut reg = self.registry();
            let mut load: BTreeMap<u64, usize> = reg.tasks.keys().map(|id| (*id, 0)).collect();
            if load.is_empty() {
                drop(reg);
                return self.set_fatal(Error::Internal("the instance's workers are missing".into()));
            }
            for id in reg.routes.values() {
                *load.entry(*id).or_default() += 1;
            }
            let mut shares: BTreeMap<u64, Vec<TopicPartition>> = BTreeMap::new();
            for tp in partitions {
                let (&id, n) = load.iter_mut().min_by_key(|(id, n)| (**n, **id)).expect("not empty");
                *n += 1;
                shares.entry(id).or_default().push(tp);
            }
            let mut replies = Vec::new();
            for (id, share) in shares {
                let (reply, claimed) = sync_channel(1);
                let msg = TaskMsg::Assign { partitions: share.clone(), reply };
                let Some(task) = reg.tasks.get(&id).filter(|h| send_bounded(&h.tx, msg, deadline)) else {
                    drop(reg);
                    return self.set_fatal(Error::Internal("a worker did not accept its assignment".into()));
                };
                replies.push(Ready::new(claimed, task));
                for tp in share {
                    reg.routes.insert(tp, id);
                }
            }
            drop(reg);
            // Only a sink can move where partitions start; without one the workers are not
            // waited for (they never wait for this thread, so waiting would be safe too).
            if shared.cfg.sink.is_some() {
                for claimed in replies {
                    match wait_ready(claimed, deadline) {
                        Ok(resume) => self.resume_at(resume),
                        Err(e) => self.set_fatal(e),
                    }
                }
            }
        }
    }

    fn on_revoke(&self, consumer: &BaseConsumer<Self>, partitions: Vec<TopicPartition>, lost: bool) {
        tracing::info!(?partitions, lost, "partitions revoked");
        self.shared.shutdown.health_state().revoked(&partitions);
        let deadline = self.revoke_deadline();
        let mut by_task: BTreeMap<u64, Vec<TopicPartition>> = BTreeMap::new();
        let mut paused = Vec::new();
        {
            let mut reg = self.registry();
            for tp in partitions {
                // Records waiting for room were never given to the task: the next owner
                // reads them again from the committed offset.
                reg.pending.remove(&tp);
                reg.unstarted.remove(&tp);
                if reg.paused.remove(&tp) {
                    paused.push((tp.clone(), 0));
                }
                if let Some(id) = reg.routes.remove(&tp) {
                    by_task.entry(id).or_default().push(tp);
                }
            }
        }
        // An application pause is a flag on librdkafka's partition object, which can outlive
        // an eager reassignment of the same partition: lift it, so that a partition paused
        // now cannot stay silent once it is assigned again.
        if !paused.is_empty() {
            if let Err(e) = consumer.resume(&to_tpl(&paused)) {
                tracing::warn!(error = %e, "resuming revoked partitions failed");
            }
        }
        // A task busy retrying a failing batch reads its inbox only once the batch is done
        // with: the interrupt, set first, ends the retries by the task's own deadline — at
        // once if lost (the partitions are someone else's already); otherwise after the
        // shutdown timeout at most, so that the group's rebalance, which waits for this
        // callback, is not held up for a whole task timeout.
        let task_deadline = if lost { Instant::now() } else { self.task_deadline(deadline) };
        let mut waiting = Vec::new();
        for (id, tps) in by_task {
            let (reply_tx, reply_rx) = sync_channel(1);
            let reg = self.registry();
            let Some(task) = reg.tasks.get(&id) else { continue };
            task.interrupt.revoke(lost, task_deadline);
            if !send_bounded(&task.tx, TaskMsg::Revoke { partitions: tps, lost, reply: reply_tx }, deadline) {
                tracing::error!(
                    task = id,
                    "task did not take its revocation before the deadline; abandoning it to fencing"
                );
            }
            waiting.push((id, reply_rx));
        }
        let mut acked = Vec::new();
        let per_partition = self.shared.cfg.guarantee == Guarantee::ExactlyOnce;
        // A per-partition task that is still busy past its interrupt deadline plus one
        // blocking call's bound is hung — librdkafka's send_offsets_to_transaction can block
        // forever once the group coordinator's broker has left the metadata
        // (confluentinc/librdkafka#5456, #5511; found by the chaos suite's coordinator-kill):
        // abandon it to fencing rather than hold the whole group's rebalance for the task
        // timeout. Workers are waited for until the deadline: they are long-lived.
        let call_bound = self.shared.cfg.transaction_timeout.max(Duration::from_secs(5)) + Duration::from_secs(5);
        let reply_by = if per_partition { deadline.min(task_deadline + call_bound) } else { deadline };
        for (id, reply_rx) in waiting {
            let reply: Option<RevokeReply> =
                reply_rx.recv_timeout(reply_by.saturating_duration_since(Instant::now())).ok();
            match reply {
                Some(r) => {
                    acked.extend(r.acked_offsets);
                    if per_partition {
                        if let Some(h) = self.registry().tasks.remove(&id) {
                            let _ = h.join.join();
                        }
                    }
                }
                None => {
                    tracing::error!(
                        task = id,
                        "task did not finish its transaction in time (hung in a librdkafka call, or past the task or shutdown timeout); abandoning it to fencing: the partitions' next owner fences its producer"
                    );
                    if per_partition {
                        self.registry().tasks.remove(&id);
                    }
                }
            }
        }
        if !lost && !acked.is_empty() {
            if let Err(e) = consumer.commit(&to_tpl(&acked), CommitMode::Sync) {
                tracing::warn!(error = %e, "committing offsets on revocation failed; the next owner may reprocess (at-least-once)");
            }
        }
    }

    /// Shuts down every remaining task (the instance task, in the long-lived modes).
    fn stop_all_tasks(&self, deadline: Instant) {
        let tasks: Vec<(u64, TaskHandle)> = self.registry().tasks.drain().collect();
        for (_, h) in &tasks {
            let _ = send_bounded(&h.tx, TaskMsg::Shutdown, deadline);
        }
        for (id, h) in tasks {
            while !h.join.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.join.is_finished() {
                let _ = h.join.join();
            } else {
                tracing::warn!(
                    task = id,
                    "task still busy at the shutdown deadline: abandoned to the transaction timeout"
                );
            }
        }
    }

    /// The deadline by which an interrupted task must let go of its batch, when this thread
    /// waits for it until `wait`: the shutdown timeout from now at most, and four fifths of
    /// the wait at most — the rest is left for the task's abort and reply, so that it
    /// answers before this thread gives up on it.
    fn task_deadline(&self, wait: Instant) -> Instant {
        let now = Instant::now();
        (now + self.shared.cfg.shutdown_timeout).min(now + wait.saturating_duration_since(now) * 4 / 5)
    }

    /// A revocation's deadline: the task timeout, or the shutdown deadline once shutting down.
    fn revoke_deadline(&self) -> Instant {
        let task = Instant::now() + self.shared.cfg.task_timeout;
        match *self.shutdown_deadline.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(d) => d.min(task),
            None => task,
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
                    crate::metrics::consumer_lag(app, &(topic.clone(), *p), s.consumer_lag);
                }
            }
        }
    }
}

impl Rebalancer {
    fn resume_at(&self, resume: Resume) {
        self.resume.lock().unwrap_or_else(|p| p.into_inner()).extend(resume);
    }
}

impl ConsumerContext for Rebalancer {
    /// rust-rdkafka's own `rebalance`, with two steps added: after `on_assign` started the
    /// partitions' tasks (which claimed them in the sink), the assignment gets the sink's
    /// offsets, so the partitions are fetched from there and never from the group's offset;
    /// and under incremental protocols (cooperative-sticky, KIP-848) the lists are the
    /// partitions that move, applied with `incremental_assign`/`incremental_unassign` while
    /// every other partition keeps its task.
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let tps = |tpl: &TopicPartitionList| -> Vec<TopicPartition> {
            tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect()
        };
        let incremental = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if tpl.count() > 0 {
                    self.on_assign(tps(tpl));
                }
                for ((topic, partition), offset) in
                    std::mem::take(&mut *self.resume.lock().unwrap_or_else(|p| p.into_inner()))
                {
                    if let Err(e) = tpl.set_partition_offset(&topic, partition, Offset::Offset(offset)) {
                        tracing::warn!(topic, partition, offset, error = %e, "cannot set the sink's resume offset");
                    }
                }
                let applied = if incremental { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                if let Err(e) = &applied {
                    // Tasks were started for partitions librdkafka did not take: stop them,
                    // so the registry matches the assignment.
                    tracing::error!(error = %e, "applying the assignment failed: dropping its tasks");
                    self.on_revoke(consumer, tps(tpl), true);
                } else {
                    self.pause_unstarted(consumer);
                }
                applied
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if tpl.count() > 0 {
                    self.on_revoke(consumer, tps(tpl), consumer.assignment_lost());
                }
                if incremental {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                // The registry follows what librdkafka is told: the callback's partitions
                // (incremental) or the whole assignment (eager `unassign`) are dropped.
                tracing::warn!(error = ?other, "rebalance error: giving up the partitions");
                let dropped = if incremental { tps(tpl) } else { self.registry().routes.keys().cloned().collect() };
                self.on_revoke(consumer, dropped, true);
                if incremental {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "applying the rebalance failed");
        }
    }
}
