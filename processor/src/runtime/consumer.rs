//! The consumer thread: one loop that acts on the tasks' reports, polls, and hands each
//! record to the [`TaskManager`], which owns the tasks and the routes to them; librdkafka runs
//! the rebalance callbacks inside `poll` ([`rebalance`]), which hand the partitions to the
//! manager too. A fenced producer makes the consumer rejoin the group; a task's rewind or a
//! failed start is the manager's. Shutting down, the tasks are interrupted, the group left
//! (unless static) and the tasks stopped, all bounded by the shutdown timeout.

use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;

use crate::config::{Guarantee, PipelineConfig};
use crate::error::{Error, Result};
use crate::record::InputRecord;
use crate::runtime::protocol::Control;
use crate::runtime::task_manager::start::{spawn_task, wait_ready_unless};
use crate::runtime::task_manager::{to_tpl, TaskManager};
use crate::runtime::wake::FetchWaker;
use crate::runtime::{Shared, POLL_INTERVAL};
use crate::state::changelog::group_reader_config;
use rebalance::Rebalancer;

#[cfg(test)]
mod mock_cluster_tests;
mod rebalance;

/// Runs the consumer thread until shutdown or a fatal error.
pub(crate) fn run(shared: Arc<Shared>, control: Receiver<Control>) -> Result<()> {
    let cfg = shared.cfg.clone();
    let handler = Rebalancer::new(TaskManager::new(shared.clone()), &cfg);
    let consumer: BaseConsumer<Rebalancer> = cfg.consumer_config().create_with_context(handler).map_err(|e| {
        Error::Config(format!("consumer configuration rejected by librdkafka: {}", crate::config::client_error(&e)))
    })?;
    let consumer = Arc::new(consumer);
    let waker = FetchWaker::start(Arc::downgrade(&consumer))
        .map_err(|e| Error::Internal(format!("cannot start the fetch waker thread: {e}")))?;
    let tasks = &consumer.context().tasks;
    tasks.set_waker(waker);
    let _ = shared.group.set(if cfg.guarantee == Guarantee::ExactlyOncePerPartition {
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
    if cfg.guarantee != Guarantee::ExactlyOncePerPartition {
        // Long-lived workers (each with its own producer) that share the instance's
        // partitions, initialised in parallel and ready before joining.
        let deadline = Instant::now() + cfg.task_timeout;
        let mut starting = Vec::new();
        for k in 0..cfg.workers {
            let txn_id = (cfg.guarantee == Guarantee::ExactlyOncePerConsumer).then(|| cfg.worker_transactional_id(k));
            let label = if cfg.workers == 1 { "all".to_string() } else { format!("worker-{k}") };
            let id = tasks.next_id();
            starting.push((id, spawn_task(&shared, id, txn_id, Vec::new(), label)?));
        }
        for (id, (handle, ready)) in starting {
            // Shut down before every worker started: nothing was consumed, nothing to commit.
            // A worker still starting is dropped; its start ends on its own thread.
            if wait_ready_unless(ready, deadline, || shared.shutdown.is_shutdown())?.is_none() {
                drop(handle);
                tasks.stop_all_tasks(Instant::now() + cfg.shutdown_timeout);
                tracing::info!(application_id = %cfg.application_id, "pipeline stopped while starting");
                return Ok(());
            }
            tasks.add_worker(id, handle);
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
                    // A partition revoked since its batch cannot store: its revocation
                    // committed the offset.
                    if let Err(e) = consumer.store_offsets(&to_tpl(&offsets)) {
                        tracing::debug!(error = %e, "acknowledged offsets not stored (partitions revoked meanwhile)");
                    }
                }
                Control::Fenced { task, error } => {
                    if tasks.owns_partitions(task) {
                        tracing::warn!(task, %error, "producer fenced: leaving the group so that it reassigns the partitions");
                        if let Err(e) = rejoin(&consumer, &cfg, &topics) {
                            fatal = Some(e);
                            break 'run;
                        }
                    }
                }
                Control::Rewind { task, partitions, resume } => {
                    if let Err(why) = tasks.rewind(&consumer, task, partitions, &resume) {
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
        if let Some(e) = tasks.take_fatal() {
            fatal = Some(e);
            break;
        }
        let pending = tasks.drain_pending(&consumer);
        tasks.start_unstarted(&consumer);
        let wait = if pending { PENDING_POLL_INTERVAL } else { POLL_INTERVAL };
        match consumer.poll(wait) {
            Some(Ok(m)) => tasks.dispatch(&consumer, InputRecord::from_message_in(&m, tasks.topic(m.topic()))),
            Some(Err(e)) => {
                if let Some((code, reason)) = consumer.client().fatal_error() {
                    fatal = Some(consumer_failed(&cfg, code, reason));
                    break;
                }
                if let Some(refused) = refused(&consumer, &cfg, &e) {
                    fatal = Some(refused);
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
    tasks.shutting_down(deadline);
    tasks.interrupt_all(tasks.task_deadline(deadline));
    // A static member on the classic protocol must not leave the group (KIP-345): its
    // restart, within the session timeout, takes its partitions back with no rebalance. So
    // no unsubscribe: the tasks commit what they collected as they stop, and closing the
    // consumer sends no LeaveGroup. (KIP-848 has a temporary leave for static members.)
    let stays_in_group = cfg.group_instance_id().is_some() && cfg.rebalancing() != crate::Rebalancing::Consumer;
    if !stays_in_group {
        leave_group(&consumer, deadline);
    }
    tasks.stop_all_tasks(deadline);
    tasks.stop_waker(deadline.max(Instant::now() + Duration::from_millis(100)));
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
    match fatal.or_else(|| tasks.take_fatal()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How long the consumer thread waits in a poll while records wait for room in a task's
/// queue ([`TaskManager::drain_pending`]): a small fraction of the time a task takes to
/// process a full queue.
const PENDING_POLL_INTERVAL: Duration = Duration::from_millis(1);

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

/// A consumer error that is a refusal for want of an ACL, as the error that stops the
/// pipeline: the group's (joining it, its offsets) or an input topic's (fetching it). A
/// fetch's refusal does not say which input it was: the brokers are asked which one this
/// principal may not read.
fn refused(consumer: &BaseConsumer<Rebalancer>, cfg: &PipelineConfig, e: &rdkafka::error::KafkaError) -> Option<Error> {
    use crate::acl::{denied, Operation};
    let inputs: Vec<(String, Operation)> = cfg.input_topics.iter().map(|t| (t.clone(), Operation::Read)).collect();
    let (topic, operation) = match crate::error::refusal_code(e)? {
        rdkafka::error::RDKafkaErrorCode::TopicAuthorizationFailed => {
            denied::locate(consumer.client(), &inputs, Duration::from_secs(10))?
        }
        _ => inputs.first()?.clone(),
    };
    let during = || format!("consuming {:?} as group {}", cfg.input_topics, cfg.application_id);
    denied::refusal(cfg, &cfg.consumer_properties, e, (&topic, operation), during)
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
    while consumer.context().tasks.has_routes() && Instant::now() < deadline {
        // Records still arriving belong to partitions being revoked: never routed again.
        let _ = consumer.poll(POLL_INTERVAL);
    }
    if consumer.context().rebalancing() == crate::Rebalancing::Consumer {
        return;
    }
    let left_by = deadline.min(Instant::now() + LEAVE_WAIT);
    while rebalance::member_id(consumer).is_some() && Instant::now() < left_by {
        let _ = consumer.poll(POLL_INTERVAL);
    }
}

/// The longest a stopping consumer waits for librdkafka to send its LeaveGroup.
const LEAVE_WAIT: Duration = Duration::from_secs(5);
