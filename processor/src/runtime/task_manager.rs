//! The task manager: which task owns each assigned partition, the tasks themselves, the
//! records waiting for room in their queues, and every change to these — task starts and
//! their retries, revocations, rewinds. The consumer thread's loop and its rebalance
//! callbacks call into it; tasks never touch it (they report on the control channel).
//!
//! Deadlock freedom: only the consumer thread takes its locks, and a task never waits for
//! that thread, so it may wait for a task — always bounded, after setting the task's
//! interrupt when the task may be busy — even inside a rebalance callback, which librdkafka
//! runs on the consumer's poll thread.
//!
//! Routing never blocks: when a task's queue is full its records wait here ([`Pending`]),
//! and past a bound the partition is paused. Pausing makes librdkafka drop and re-fetch its
//! prefetch, so the bound leaves a task records on hand while the partition fetches again:
//! [`PENDING_FACTOR`] queues' worth per partition while the instance's pending records stay
//! under [`PENDING_BUDGET`] bytes, one queue's worth once over it (`docs/operations.md`,
//! *Sizing*).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::mpsc::TrySendError;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::PipelineConfig;
use crate::error::Error;
use crate::partition::TopicPartition;
use crate::record::{InputRecord, Topic};
use crate::runtime::protocol::TaskMsg;
use crate::runtime::wake::FetchWaker;
use crate::runtime::Shared;
use start::{join_by, queue_capacity, send_bounded, TaskHandle, Unstarted};

mod assign;
mod recovery;
mod revoke;
pub(crate) mod start;

pub(crate) fn to_tpl(offsets: &[(TopicPartition, i64)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::with_capacity(offsets.len());
    for ((t, p), o) in offsets {
        let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*o));
    }
    tpl
}

/// The owner of the instance's tasks and of the routes to them (see the module docs).
pub(crate) struct TaskManager {
    shared: Arc<Shared>,
    /// The input topics' names, made once: every record and assigned partition of a topic
    /// shares its name ([`topic`](Self::topic)), so that routing a record allocates none.
    topics: Vec<Topic>,
    /// Records a task's queue holds ([`queue_capacity`]).
    capacity: usize,
    registry: Mutex<Registry>,
    /// Why the pipeline must stop, set inside a callback and read by the consumer's loop.
    fatal: Mutex<Option<Error>>,
    /// Set when shutting down: bounds every wait from then on.
    shutdown_deadline: Mutex<Option<Instant>>,
    /// Set once the consumer exists ([`crate::runtime::wake`]).
    waker: OnceLock<FetchWaker>,
}

/// What the manager holds behind its lock.
#[derive(Default)]
struct Registry {
    /// Which task owns each assigned partition.
    routes: HashMap<TopicPartition, u64>,
    tasks: HashMap<u64, TaskHandle>,
    /// Records waiting for room in their task's queue, per partition.
    pending: Pending,
    /// Assigned partitions whose task could not start (its producer failed to initialise),
    /// or that wait for room under the task bound: paused, routed nowhere, retried from the
    /// consumer thread's loop.
    unstarted: HashMap<TopicPartition, Unstarted>,
    /// Partitions paused because their pending queue grew past its bound (see [`Pending`]),
    /// or because they are unstarted.
    paused: HashSet<TopicPartition>,
    next: u64,
}

impl Registry {
    fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn owns_partitions(&self, task: u64) -> bool {
        self.routes.values().any(|t| *t == task)
    }

    /// The task already owning a partition that `tp` shares its task with (co-partitioned
    /// inputs), if any.
    fn task_sharing(&self, cfg: &PipelineConfig, tp: &TopicPartition) -> Option<u64> {
        if !cfg.co_partitioned() {
            return None; // each partition is its own task: no scan of every route
        }
        let key = cfg.task_of(&tp.0, tp.1);
        self.routes.iter().find(|(other, _)| cfg.task_of(&other.0, other.1) == key).map(|(_, id)| *id)
    }
}

impl TaskManager {
    /// Tells the standby replicas ([`crate::state::standby`]) this instance's member id.
    pub(crate) fn set_member(&self, id: Option<String>) {
        if let Some(standbys) = &self.shared.standbys {
            standbys.set_member(id);
        }
    }

    pub(crate) fn new(shared: Arc<Shared>) -> TaskManager {
        TaskManager {
            topics: shared.cfg.input_topics.iter().map(Topic::new).collect(),
            capacity: queue_capacity(&shared.cfg),
            shared,
            registry: Mutex::new(Registry::default()),
            fatal: Mutex::new(None),
            shutdown_deadline: Mutex::new(None),
            waker: OnceLock::new(),
        }
    }

    /// Sets the helper that wakes resumed partitions' fetchers (once the consumer exists).
    pub(crate) fn set_waker(&self, waker: FetchWaker) {
        let _ = self.waker.set(waker);
    }

    /// Stops the fetch waker, waiting for it until `deadline`.
    pub(crate) fn stop_waker(&self, deadline: Instant) {
        if let Some(waker) = self.waker.get() {
            waker.stop(deadline);
        }
    }

    /// From now on every wait is bounded by `deadline` as well (shutting down).
    pub(crate) fn shutting_down(&self, deadline: Instant) {
        *self.shutdown_deadline.lock().unwrap_or_else(|p| p.into_inner()) = Some(deadline);
    }

    /// Whether any partition is routed to a task (some revocation is still to come).
    pub(crate) fn has_routes(&self) -> bool {
        !self.registry().routes.is_empty()
    }

    /// Whether `task` still owns a partition (a late report of a task whose partitions are
    /// gone is not acted on).
    pub(crate) fn owns_partitions(&self, task: u64) -> bool {
        self.registry().owns_partitions(task)
    }

    /// Sets every task's interrupt for the shutdown, with the deadline by which a busy task
    /// lets go of its batch.
    pub(crate) fn interrupt_all(&self, deadline: Instant) {
        for task in self.registry().tasks.values() {
            task.interrupt.shut_down(deadline);
        }
    }

    /// Takes a started long-lived worker in.
    pub(crate) fn add_worker(&self, id: u64, handle: TaskHandle) {
        self.registry().tasks.insert(id, handle);
    }

    /// An id for a new task.
    pub(crate) fn next_id(&self) -> u64 {
        self.registry().next_id()
    }

    /// The partitions routed to a task and not paused by this runtime: librdkafka has just
    /// resumed them after an incremental rebalance's callback.
    pub(crate) fn wake_routed(&self) {
        let reg = self.registry();
        let resumed: Vec<TopicPartition> = reg.routes.keys().filter(|tp| !reg.paused.contains(*tp)).cloned().collect();
        drop(reg);
        self.wake(resumed);
    }

    /// Every routed partition (an eager protocol's error drops them all).
    pub(crate) fn routed(&self) -> Vec<TopicPartition> {
        self.registry().routes.keys().cloned().collect()
    }

    /// Wakes the fetchers of `partitions`, just resumed ([`wake`]).
    pub(crate) fn wake(&self, partitions: impl IntoIterator<Item = TopicPartition>) {
        if let Some(w) = self.waker.get() {
            w.wake(partitions);
        }
    }

    /// The shared name of input topic `name` (a reference count; a topic the pipeline does
    /// not list, which the consumer does not deliver, is allocated).
    pub(crate) fn topic(&self, name: &str) -> Topic {
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

    pub(crate) fn take_fatal(&self) -> Option<Error> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Routes a record to its partition's task. When the task's queue is full the record
    /// waits in this partition's pending queue, and past that queue's bound the partition is
    /// paused (backpressure without blocking this thread, which must keep polling to run
    /// rebalances; see [`Pending`]). A record is dropped only when its partition has no task
    /// (revoked): never while a later record of the same partition could still be committed.
    pub(crate) fn dispatch<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>, record: InputRecord) {
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
        // the bound is generous (see [`Pending`]).
        if reg.pending.push(&tp, record, self.capacity) && reg.paused.insert(tp.clone()) {
            drop(reg);
            tracing::debug!(partition = ?tp, "task queue full: partition paused");
            if let Err(e) = consumer.pause(&to_tpl(&[(tp, 0)])) {
                tracing::warn!(error = %e, "pausing a partition failed; its records wait in memory");
            }
        }
    }

    /// Moves pending records into their tasks' queues as room appears; resumes a partition
    /// once its pending queue is empty. Returns whether records still wait: the consumer
    /// thread then polls briefly, so that a task emptying its queue gets the next records
    /// at once, not after a whole poll interval (while a partition is paused, no fetched
    /// record would end the poll early).
    pub(crate) fn drain_pending<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>) -> bool {
        let mut reg = self.registry();
        if reg.pending.is_empty() {
            return false;
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
        let mut resumed: Vec<(TopicPartition, i64)> = emptied.into_iter().map(|tp| (tp, 0)).collect();
        resumed.retain(|(tp, _)| reg.paused.remove(tp));
        let waiting = !reg.pending.is_empty();
        drop(reg);
        if !resumed.is_empty() {
            tracing::debug!(partitions = ?resumed, "task queue drained: partitions resumed");
            if let Err(e) = consumer.resume(&to_tpl(&resumed)) {
                tracing::warn!(error = %e, "resuming partitions failed");
            }
            self.wake(resumed.into_iter().map(|(tp, _)| tp));
        }
        waiting
    }

    /// Shuts down every remaining task (the instance task, in the long-lived modes).
    pub(crate) fn stop_all_tasks(&self, deadline: Instant) {
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

/// How many task queues' worth of records a partition may hold here while the instance is
/// under [`PENDING_BUDGET`]: with the queue, what a task finds on hand while librdkafka
/// fetches again after a pause. The consumer thread hands them on as soon as there is
/// room, so more would only hold memory.
const PENDING_FACTOR: usize = 2;

/// The records a partition may hold here under [`PENDING_BUDGET`] however small its task's
/// queue: a small queue (a small `max_records_per_transaction`) would otherwise pause the
/// partition, and make librdkafka fetch again, every few hundred records.
const PENDING_FLOOR: usize = 10_000;

/// The bytes of pending records (keys, values, headers and a fixed overhead per record)
/// under which partitions may hold more than one queue's worth: 16 MiB.
const PENDING_BUDGET: usize = 16 << 20;

/// Bytes a record holds besides its payload (the `InputRecord` and its queue slot).
const RECORD_OVERHEAD: usize = std::mem::size_of::<InputRecord>();

/// Records waiting for room in their task's queue, per partition, and their total size.
#[derive(Default)]
struct Pending {
    queues: HashMap<TopicPartition, VecDeque<InputRecord>>,
    bytes: usize,
}

/// What a send to a task did with a pending record.
enum Sent {
    /// The task took it.
    Taken,
    /// The task's queue is full, or the partition has no task right now: the record stays
    /// first in line.
    Full(InputRecord),
    /// The task is gone: the partition's records are dropped (never committed, so the
    /// partition's next owner reads them again).
    Gone,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Whether records of `tp` wait here (a later record must then queue behind them).
    fn contains(&self, tp: &TopicPartition) -> bool {
        self.queues.contains_key(tp)
    }

    /// Queues `record` behind `tp`'s others; `true` if the partition should now be paused:
    /// it holds a task queue's worth (`capacity`) and either [`PENDING_FACTOR`] times that
    /// (at least [`PENDING_FLOOR`]) or the instance is over [`PENDING_BUDGET`].
    fn push(&mut self, tp: &TopicPartition, record: InputRecord, capacity: usize) -> bool {
        self.bytes += size(&record);
        let queue = self.queues.entry(tp.clone()).or_default();
        queue.push_back(record);
        let len = queue.len();
        len >= capacity && (len >= (PENDING_FACTOR * capacity).max(PENDING_FLOOR) || self.bytes >= PENDING_BUDGET)
    }

    /// Drops `tp`'s records (revoked, or moved back to the committed offset).
    fn remove(&mut self, tp: &TopicPartition) {
        if let Some(queue) = self.queues.remove(tp) {
            self.bytes -= queue.iter().map(size).sum::<usize>();
        }
    }

    /// Hands each partition's records to `send` in order, as long as it takes them; returns
    /// the partitions it emptied (no longer pending).
    fn drain(&mut self, mut send: impl FnMut(&TopicPartition, InputRecord) -> Sent) -> Vec<TopicPartition> {
        let mut emptied = Vec::new();
        for (tp, queue) in self.queues.iter_mut() {
            while let Some(r) = queue.pop_front() {
                let bytes = size(&r);
                match send(tp, r) {
                    Sent::Taken => self.bytes -= bytes,
                    Sent::Full(r) => {
                        queue.push_front(r);
                        break;
                    }
                    Sent::Gone => {
                        self.bytes -= bytes;
                        break;
                    }
                }
            }
            if queue.is_empty() {
                emptied.push(tp.clone());
            }
        }
        for tp in &emptied {
            self.queues.remove(tp);
        }
        emptied
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

fn size(r: &InputRecord) -> usize {
    let headers: usize = r.headers.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
    RECORD_OVERHEAD + r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len) + headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Topic;

    fn rec(offset: i64, value_len: usize) -> InputRecord {
        InputRecord { value: Some(vec![0; value_len]), ..InputRecord::test("t", 0, offset) }
    }

    #[test]
    fn a_partition_holds_two_queues_or_the_floor_while_under_budget_and_one_over_it() {
        let first_pause = |capacity: usize| {
            let tp: TopicPartition = (Topic::new("t"), 0);
            let mut p = Pending::default();
            (0..3 * PENDING_FLOOR).position(|i| p.push(&tp, rec(i as i64, 10), capacity)).map(|i| i + 1)
        };
        assert_eq!(first_pause(PENDING_FLOOR), Some(2 * PENDING_FLOOR), "two queues' worth");
        assert_eq!(first_pause(3), Some(PENDING_FLOOR), "a small queue: the floor");
        // Over the budget: a partition pauses at one queue's worth.
        let big: TopicPartition = (Topic::new("big"), 1);
        let mut p = Pending::default();
        assert!(!p.push(&big, rec(0, PENDING_BUDGET), 2), "under one queue's worth");
        assert!(p.push(&big, rec(1, 1), 2), "one queue's worth, over the budget");
    }

    #[test]
    fn bytes_follow_every_record_in_and_out() {
        let (a, b): (TopicPartition, TopicPartition) = ((Topic::new("t"), 0), (Topic::new("t"), 1));
        let mut p = Pending::default();
        for i in 0..4 {
            p.push(&a, rec(i, 100), 1000);
            p.push(&b, rec(i, 50), 1000);
        }
        let one = |n: usize| RECORD_OVERHEAD + n;
        assert_eq!(p.bytes(), 4 * one(100) + 4 * one(50));
        // The task of `a` takes two records, then is full; `b` has no task now.
        let mut taken = 0;
        let emptied = p.drain(|tp, r| {
            if tp != &a {
                return Sent::Full(r);
            }
            taken += 1;
            if taken <= 2 {
                Sent::Taken
            } else {
                Sent::Full(r)
            }
        });
        assert!(emptied.is_empty());
        assert_eq!(p.bytes(), 2 * one(100) + 4 * one(50));
        // Its task gone: the record handed over is dropped, the rest stays until removed.
        let emptied = p.drain(|tp, r| if tp == &a { Sent::Gone } else { Sent::Full(r) });
        assert!(emptied.is_empty() && p.contains(&a));
        assert_eq!(p.bytes(), one(100) + 4 * one(50));
        p.remove(&a);
        let emptied = p.drain(|_, _| Sent::Taken);
        assert_eq!(emptied, vec![b.clone()]);
        assert!(p.is_empty() && p.bytes() == 0);
    }
}
