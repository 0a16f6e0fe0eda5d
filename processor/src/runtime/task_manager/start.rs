//! Starting a task: its thread and inbox ([`TaskHandle`]), the wait for its producer to be
//! ready ([`Ready`], always bounded), the partitions whose task could not start yet
//! ([`Unstarted`]), and the bounded sends the consumer thread makes to a task. The
//! consumer thread may wait for a task here because a task never waits for it.

use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::PipelineConfig;
use crate::error::{Error, Result};
use crate::partition::{Resume, TopicPartition};
use crate::runtime::interrupt::Interrupt;
use crate::runtime::protocol::TaskMsg;
use crate::runtime::task::Task;
use crate::runtime::Shared;

/// A running task, as the manager holds it.
pub(crate) struct TaskHandle {
    pub(crate) tx: SyncSender<TaskMsg>,
    pub(crate) join: JoinHandle<()>,
    /// Set before a revocation or shutdown is sent, so that a task busy retrying a failing
    /// batch notices at once (see [`interrupt`](crate::runtime::interrupt)).
    pub(crate) interrupt: Arc<Interrupt>,
}

/// An assigned partition whose task could not start yet: its start failed, or it waits
/// for room under per-partition mode's task bound ([`Shared::max_tasks`]).
pub(crate) struct Unstarted {
    /// Waiting for room, not failed: started as soon as the bound allows, never timed out.
    pub(crate) waiting: bool,
    /// When its first attempt failed (or, waiting, when it began to wait): a failed one is
    /// given up on after the task timeout.
    pub(crate) since: Instant,
    /// When to try again.
    pub(crate) next: Instant,
    /// The pause before the try after that (doubling, at most 30 s).
    pub(crate) backoff: Duration,
    /// Why the last attempt failed.
    pub(crate) last: String,
    /// The thread of the last attempt, if it was given up on while still starting (timed
    /// out): it may still be initialising the same transactional id, and a start beside it
    /// would fence it and be fenced back. The next attempt waits for it to end.
    pub(crate) previous: Option<Arc<JoinHandle<()>>>,
}

impl Unstarted {
    pub(crate) fn new(last: String) -> Unstarted {
        let now = Instant::now();
        Unstarted {
            waiting: false,
            since: now,
            next: now + Duration::from_secs(1),
            backoff: Duration::from_secs(2),
            last,
            previous: None,
        }
    }

    /// The same, with the thread of the attempt given up on (see [`Unstarted::previous`]).
    pub(crate) fn after(mut self, previous: Option<Arc<JoinHandle<()>>>) -> Unstarted {
        self.previous = previous;
        self
    }

    /// Whether its next attempt may start now: room came (waiting) or its pause is over,
    /// and no earlier attempt's thread still runs.
    pub(crate) fn due(&self, now: Instant) -> bool {
        let previous_running = self.previous.as_ref().is_some_and(|t| !t.is_finished());
        (self.waiting || self.next <= now) && !previous_running
    }

    /// A partition left without a task by the task bound.
    pub(crate) fn waiting(bound: usize) -> Unstarted {
        let mut u = Unstarted::new(format!("waiting for room: {bound} partition tasks running (max_partition_tasks)"));
        u.waiting = true;
        u.next = u.since;
        u
    }

    /// Another failed attempt (a waiting partition's first: its task timeout starts now).
    pub(crate) fn failed_again(&mut self, last: String, previous: Option<Arc<JoinHandle<()>>>) {
        if std::mem::take(&mut self.waiting) {
            *self = Unstarted::new(last).after(previous);
            return;
        }
        self.previous = previous;
        self.next = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(30));
        self.last = last;
    }
}

/// Whether a task that could not start should be retried later rather than stop the
/// pipeline: everything but a configuration or authorisation problem, which every
/// partition would hit.
pub(crate) fn retry_later(e: &Error) -> bool {
    use crate::ErrorClass::{Fatal, NotAuthorized};
    !matches!(e, Error::Config(_) | Error::NotAuthorized(_) | Error::Kafka { class: Fatal | NotAuthorized, .. })
}

/// Says when a starting task is ready (where its partitions resume) or why it failed; its
/// interrupt tells what it is doing meanwhile.
pub(crate) struct Ready {
    rx: Receiver<Result<Resume>>,
    interrupt: Arc<Interrupt>,
}

impl Ready {
    /// A reply from `task` (its start, or its claim of an assignment).
    pub(crate) fn new(rx: Receiver<Result<Resume>>, task: &TaskHandle) -> Ready {
        Ready { rx, interrupt: task.interrupt.clone() }
    }
}

/// Records a task's queue holds: a transaction's worth, within reason. Past it, records wait
/// in the consumer thread, up to the bound of [`Pending`](super::Pending).
pub(crate) fn queue_capacity(cfg: &PipelineConfig) -> usize {
    cfg.max_records_per_transaction.clamp(100, 10_000)
}

/// Starts the task of one input partition (per-partition mode) — or of partition *n* of
/// every input topic of a [co-partitioned](crate::PipelineConfig::co_partitioned) pipeline,
/// `tps` — with its own transactional.id, labelled `topic-partition`.
pub(crate) fn spawn_partition_task(
    shared: &Arc<Shared>,
    id: u64,
    tps: &[TopicPartition],
) -> Result<(TaskHandle, Ready)> {
    let (topic, partition) = shared.cfg.task_of(&tps[0].0, tps[0].1);
    let txn_id = shared.cfg.partition_transactional_id(&topic, partition);
    let topics: Vec<&str> = tps.iter().map(|tp| tp.0.as_str()).collect();
    spawn_task(shared, id, Some(txn_id), tps.to_vec(), format!("{}-{partition}", topics.join("+")))
}

/// `partitions` grouped by the per-partition task that owns them (see
/// [`task_of`](crate::PipelineConfig::task_of)), in order.
pub(crate) fn by_task(cfg: &PipelineConfig, partitions: Vec<TopicPartition>) -> Vec<Vec<TopicPartition>> {
    let mut groups: std::collections::BTreeMap<(String, i32), Vec<TopicPartition>> = Default::default();
    for tp in partitions {
        groups.entry(cfg.task_of(&tp.0, tp.1)).or_default().push(tp);
    }
    groups.into_values().collect()
}

/// Starts a task thread; its producer is initialised on that thread and `Ready` says when.
/// `label` names it in metrics and spans (see [`Task`]'s field).
pub(crate) fn spawn_task(
    shared: &Arc<Shared>,
    id: u64,
    txn_id: Option<String>,
    partitions: Vec<TopicPartition>,
    label: String,
) -> Result<(TaskHandle, Ready)> {
    let (tx, rx) = sync_channel(queue_capacity(&shared.cfg));
    let (ready_tx, ready_rx) = sync_channel(1);
    let interrupt = Arc::new(Interrupt::default());
    let task_interrupt = interrupt.clone();
    shared.shutdown.health_state().starting(id, &label, &interrupt);
    let task_shared = shared.clone();
    let spawned = std::thread::Builder::new().name(format!("kafka-eos-task-{id}")).spawn(move || {
        let health = task_shared.shutdown.clone();
        let started = Task::start(id, task_shared, txn_id, partitions, label, task_interrupt);
        health.health_state().started(id);
        match started {
            Ok((task, resume)) => {
                let _ = ready_tx.send(Ok(resume));
                task.run(rx);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        }
    });
    let join = spawned.map_err(|e| {
        shared.shutdown.health_state().started(id);
        Error::Internal(format!("cannot spawn a task thread: {e}"))
    })?;
    let ready = Ready { rx: ready_rx, interrupt: interrupt.clone() };
    Ok((TaskHandle { tx, join, interrupt }, ready))
}

pub(crate) fn wait_ready(ready: Ready, deadline: Instant) -> Result<Resume> {
    wait_ready_unless(ready, deadline, || false)?.ok_or_else(|| Error::Internal("a start given up unasked".into()))
}

/// [`wait_ready`], given up as soon as `stop` says so (checked every 100 ms): `None` then. A
/// pipeline shut down while a task's start hangs (a sink that does not answer) stops at
/// once; the hung start is left to end on its own thread, and the pipeline's
/// [health](crate::ShutdownHandle::health) said what it was doing.
pub(crate) fn wait_ready_unless(ready: Ready, deadline: Instant, stop: impl Fn() -> bool) -> Result<Option<Resume>> {
    let started = Instant::now();
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let stopping = stop();
        match ready.rx.recv_timeout(wait.min(Duration::from_millis(100))) {
            Ok(r) => return r.map(Some),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Internal("a task thread ended while starting".into()))
            }
            Err(RecvTimeoutError::Timeout) if stopping => {
                let phase = ready.interrupt.phase();
                tracing::info!(phase, waited = ?started.elapsed(), "shut down while a task was starting: its start is left to end on its own");
                return Ok(None);
            }
            Err(RecvTimeoutError::Timeout) if wait.is_zero() => {
                let phase = ready.interrupt.phase();
                return Err(Error::TaskTimeout {
                    what: format!("starting a task ({phase})"),
                    timeout: started.elapsed(),
                    last: "no answer".into(),
                });
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Sends a command to a task, waiting while its queue is full, until `deadline`.
pub(crate) fn send_bounded(tx: &SyncSender<TaskMsg>, mut msg: TaskMsg, deadline: Instant) -> bool {
    loop {
        match tx.try_send(msg) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(m)) => {
                if Instant::now() >= deadline {
                    return false;
                }
                msg = m;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Lets go of a task whose start failed or was given up on: told to stop at once (its
/// partitions are no longer its), its thread kept for the next attempt to wait for
/// ([`Unstarted::previous`]).
pub(crate) fn give_up_start(handle: TaskHandle) -> Arc<JoinHandle<()>> {
    handle.interrupt.revoke(true, Instant::now());
    Arc::new(handle.join)
}

/// Joins `thread` if it ends by `deadline`; `false` (and the thread left running) if not.
pub(crate) fn join_by(thread: JoinHandle<()>, deadline: Instant) -> bool {
    while !thread.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let finished = thread.is_finished();
    if finished {
        let _ = thread.join();
    }
    finished
}

#[cfg(test)]
mod tests {
    /// A task refused an ACL at its start stops the pipeline: every partition would be.
    #[test]
    fn a_refused_start_is_not_retried() {
        use crate::error::{Error, KafkaError};
        use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode as C};
        let refused = KafkaError::new(RdKafkaError::MessageProduction(C::TransactionalIdAuthorizationFailed));
        let acl = crate::acl::Acl::cluster(crate::acl::Operation::IdempotentWrite);
        let props = crate::config::Properties::default();
        let not_authorized = crate::acl::denied::not_authorized(&props, "b:1", acl, "x".into(), Some(refused.clone()));
        assert!(!super::retry_later(&not_authorized));
        let hint = crate::error::hint(refused.class());
        assert!(!super::retry_later(&Error::kafka_failure("init_transactions", refused, hint)));
        let timed_out = KafkaError::new(RdKafkaError::MessageProduction(C::RequestTimedOut));
        assert!(super::retry_later(&Error::kafka_failure("init_transactions", timed_out, "")));
    }

    #[test]
    fn a_retry_waits_for_the_thread_of_the_start_given_up_on() {
        use super::Unstarted;
        use std::sync::{mpsc, Arc};
        use std::time::{Duration, Instant};
        let later = Instant::now() + Duration::from_secs(60);
        let (release, hold) = mpsc::channel::<()>();
        let running = Arc::new(std::thread::spawn(move || {
            let _ = hold.recv();
        }));
        let mut u = Unstarted::new("timed out".into()).after(Some(running.clone()));
        assert!(!u.due(later), "its first start still runs");
        release.send(()).unwrap();
        while !running.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(u.due(later), "its first start ended");
        assert!(!u.due(Instant::now()), "the pause is not over");
        u.failed_again("no answer".into(), None);
        assert!(u.due(later) && !u.due(Instant::now()));
        let waiting = Unstarted::waiting(4);
        assert!(waiting.due(Instant::now()), "waiting for room: due at once");
        assert!(!waiting
            .after(Some(Arc::new(std::thread::spawn(|| std::thread::sleep(Duration::from_secs(2))))))
            .due(later));
    }

    use super::*;

    #[test]
    fn a_waiting_partition_is_due_at_once_and_its_first_failure_starts_its_task_timeout() {
        let mut u = Unstarted::waiting(8);
        assert!(u.waiting && u.next <= Instant::now(), "due as soon as there is room");
        assert!(u.last.contains("8 partition tasks"), "{}", u.last);
        std::thread::sleep(Duration::from_millis(20));
        u.failed_again("init_transactions timed out".into(), None);
        assert!(!u.waiting, "a start that failed is a failure, retried with backoff");
        assert!(u.since.elapsed() < Duration::from_millis(20), "its task timeout counts from this failure");
        assert_eq!((u.backoff, u.last.as_str()), (Duration::from_secs(2), "init_transactions timed out"));
        u.failed_again("again".into(), None);
        assert_eq!(u.backoff, Duration::from_secs(4), "then doubling as before");
    }
}
