//! Partition health: what `/health` serves, and what [`ShutdownHandle::health`](crate::ShutdownHandle::health)
//! returns to applications that serve it themselves.
//!
//! A partition is healthy while it has no input waiting, or while its last commit (or its
//! assignment, before the first commit) is younger than the health threshold. An idle
//! partition is healthy however old its last commit: there is nothing to commit. As JSON
//! (the report is `serde::Serialize`):
//!
//! ```json
//! {"healthy":true,"partitions":[{"topic":"orders","partition":0,"last_commit_age_ms":80,"uncommitted_records":12,"stalled_ms":0}],"starting":[],"unserved":[]}
//! ```
//!
//! `starting` lists the tasks whose start has not completed — a producer's
//! `init_transactions` waiting for its coordinator, a sink that does not answer — with what
//! they are doing: the first place to look when partitions are assigned and nothing moves.
//! A start older than the threshold makes the report unhealthy too.
//!
//! `unserved` lists the assigned partitions that have no task: per-partition mode's task
//! bound left them waiting for room
//! ([`max_partition_tasks`](crate::PipelineBuilder::max_partition_tasks)), or their task's
//! start failed and is being retried. They do not make the report unhealthy — restarting
//! the instance would not serve them, more instances (or a higher bound) would — so alert
//! on the list, or on the `kafka_eos_partitions_unserved` gauge.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::partition::TopicPartition;
use crate::runtime::interrupt::Interrupt;

/// The health of one assigned partition.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PartitionHealth {
    /// Input topic.
    pub topic: String,
    /// Input partition.
    pub partition: i32,
    /// Milliseconds since the partition's last commit; `None` before its first.
    pub last_commit_age_ms: Option<u64>,
    /// Records read from Kafka but not yet committed (in memory, in a batch or queued).
    pub uncommitted_records: i64,
    /// How long input has been waiting without a commit (0 when nothing waits).
    pub stalled_ms: u64,
}

/// A task whose start has not completed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StartingTask {
    /// The task's label: `topic-partition` in per-partition mode, `all` or `worker-N` for
    /// the workers of the other guarantees.
    pub task: String,
    /// What the start is doing now, e.g. `initialising its producer: init_transactions`.
    pub phase: String,
    /// Milliseconds since the start began.
    pub starting_ms: u64,
}

/// An assigned partition that has no task.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UnservedPartition {
    /// Input topic.
    pub topic: String,
    /// Input partition.
    pub partition: i32,
    /// Why: `waiting for room: …` under the task bound, or the last start's error.
    pub reason: String,
    /// Milliseconds since it was left unserved.
    pub unserved_ms: u64,
}

/// What `/health` reports.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HealthReport {
    /// Every assigned partition's `stalled_ms`, and every starting task's `starting_ms`, is
    /// below the threshold.
    pub healthy: bool,
    /// The current assignment.
    pub partitions: Vec<PartitionHealth>,
    /// Tasks still starting, oldest first.
    pub starting: Vec<StartingTask>,
    /// Assigned partitions without a task, longest unserved first (see the module doc).
    pub unserved: Vec<UnservedPartition>,
}

/// Progress of one partition, updated by the consumer thread (dispatch) and its task (commit).
struct Progress {
    since: Instant,
    /// Next offset after the last record routed to the task.
    dispatched: AtomicI64,
    /// Next offset after the last committed record.
    committed: AtomicI64,
    /// Milliseconds after `since` of the last commit; `u64::MAX` before the first.
    last_commit_ms: AtomicU64,
}

/// The pipeline's health state.
pub(crate) struct Health {
    threshold: Duration,
    partitions: RwLock<HashMap<TopicPartition, Arc<Progress>>>,
    /// Tasks starting, by task id.
    starting: Mutex<HashMap<u64, Starting>>,
    /// Assigned partitions without a task: why, and since when.
    unserved: Mutex<HashMap<TopicPartition, (String, Instant)>>,
}

/// A task's start in progress: its label, where it reports its phase, since when.
type Starting = (String, Arc<Interrupt>, Instant);

impl Health {
    pub(crate) fn new(threshold: Duration) -> Health {
        Health {
            threshold,
            partitions: RwLock::new(HashMap::new()),
            starting: Mutex::new(HashMap::new()),
            unserved: Mutex::new(HashMap::new()),
        }
    }

    /// `tp` has no task, for `reason` (kept since the first time); returns how many
    /// partitions are unserved now.
    pub(crate) fn unserved(&self, tp: &TopicPartition, reason: &str) -> usize {
        let mut map = self.unserved.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(tp.clone()).or_insert_with(|| (String::new(), Instant::now()));
        reason.clone_into(&mut entry.0);
        map.len()
    }

    /// `tp` has a task, or is no longer assigned; returns how many partitions are unserved now.
    pub(crate) fn served(&self, tp: &TopicPartition) -> usize {
        let mut map = self.unserved.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(tp);
        map.len()
    }

    /// Task `id` (labelled `label`) begins its start; `interrupt` carries its phase.
    pub(crate) fn starting(&self, id: u64, label: &str, interrupt: &Arc<Interrupt>) {
        let mut map = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(id, (label.to_string(), interrupt.clone(), Instant::now()));
    }

    /// Task `id`'s start ended, either way.
    pub(crate) fn started(&self, id: u64) {
        self.starting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    pub(crate) fn assigned(&self, tps: &[TopicPartition]) {
        let mut map = self.partitions.write().unwrap_or_else(|p| p.into_inner());
        for tp in tps {
            map.insert(
                tp.clone(),
                Arc::new(Progress {
                    since: Instant::now(),
                    dispatched: AtomicI64::new(-1),
                    committed: AtomicI64::new(-1),
                    last_commit_ms: AtomicU64::new(u64::MAX),
                }),
            );
        }
    }

    pub(crate) fn revoked(&self, tps: &[TopicPartition]) {
        let mut map = self.partitions.write().unwrap_or_else(|p| p.into_inner());
        for tp in tps {
            map.remove(tp);
        }
    }

    /// Whether `partition` of `topic` is assigned to this instance (with a task or not).
    pub(crate) fn holds(&self, topic: &str, partition: i32) -> bool {
        let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        map.keys().any(|(t, p)| *p == partition && t.as_str() == topic)
    }

    /// The partitions of `topic` assigned to this instance, in order.
    pub(crate) fn assigned_partitions(&self, topic: &str) -> Vec<i32> {
        let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        let mut partitions: Vec<i32> = map.keys().filter(|(t, _)| t.as_str() == topic).map(|(_, p)| *p).collect();
        partitions.sort_unstable();
        partitions
    }

    fn with(&self, tp: &TopicPartition, f: impl FnOnce(&Progress)) {
        if let Some(p) = self.partitions.read().unwrap_or_else(|p| p.into_inner()).get(tp) {
            f(p);
        }
    }

    /// A record at `offset` was routed to its task.
    pub(crate) fn dispatched(&self, tp: &TopicPartition, offset: i64) {
        self.with(tp, |p| {
            p.dispatched.fetch_max(offset + 1, Ordering::Relaxed);
            // The first record after an idle period: count its wait from now.
            let _ = p.committed.compare_exchange(-1, offset, Ordering::Relaxed, Ordering::Relaxed);
        });
    }

    /// Everything before `next_offset` is committed.
    pub(crate) fn committed(&self, tp: &TopicPartition, next_offset: i64) {
        self.with(tp, |p| {
            p.committed.fetch_max(next_offset, Ordering::Relaxed);
            p.last_commit_ms.store(p.since.elapsed().as_millis() as u64, Ordering::Relaxed);
        });
    }

    pub(crate) fn report(&self) -> HealthReport {
        let map = self.partitions.read().unwrap_or_else(|p| p.into_inner());
        let mut partitions: Vec<PartitionHealth> = map
            .iter()
            .map(|((topic, partition), p)| {
                let now_ms = p.since.elapsed().as_millis() as u64;
                let last = p.last_commit_ms.load(Ordering::Relaxed);
                let last_commit_age_ms = (last != u64::MAX).then(|| now_ms.saturating_sub(last));
                let (dispatched, committed) =
                    (p.dispatched.load(Ordering::Relaxed), p.committed.load(Ordering::Relaxed));
                let uncommitted = if dispatched < 0 { 0 } else { (dispatched - committed.max(0)).max(0) };
                let stalled_ms = if uncommitted > 0 { last_commit_age_ms.unwrap_or(now_ms) } else { 0 };
                PartitionHealth {
                    topic: topic.to_string(),
                    partition: *partition,
                    last_commit_age_ms,
                    uncommitted_records: uncommitted,
                    stalled_ms,
                }
            })
            .collect();
        partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        drop(map);
        let mut starting: Vec<StartingTask> = (self.starting.lock().unwrap_or_else(|p| p.into_inner()).values())
            .map(|(task, interrupt, since)| StartingTask {
                task: task.clone(),
                phase: interrupt.phase().to_string(),
                starting_ms: since.elapsed().as_millis() as u64,
            })
            .collect();
        starting.sort_by(|a, b| b.starting_ms.cmp(&a.starting_ms).then_with(|| a.task.cmp(&b.task)));
        let threshold = self.threshold.as_millis() as u64;
        let healthy =
            partitions.iter().all(|p| p.stalled_ms < threshold) && starting.iter().all(|t| t.starting_ms < threshold);
        // One instant for every wait, so that their order is their start's.
        let now = Instant::now();
        let mut unserved: Vec<UnservedPartition> = (self.unserved.lock().unwrap_or_else(|p| p.into_inner()).iter())
            .map(|((topic, partition), (reason, since))| UnservedPartition {
                topic: topic.to_string(),
                partition: *partition,
                reason: reason.clone(),
                unserved_ms: now.saturating_duration_since(*since).as_millis() as u64,
            })
            .collect();
        unserved.sort_by(|a, b| {
            b.unserved_ms.cmp(&a.unserved_ms).then_with(|| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)))
        });
        HealthReport { healthy, partitions, starting, unserved }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_is_reported_with_its_phase_until_it_ends_and_unhealthy_past_the_threshold() {
        let health = Health::new(Duration::from_millis(50));
        let interrupt = Arc::new(Interrupt::default());
        interrupt.set_phase("connecting the sink");
        health.starting(7, "worker-0", &interrupt);
        let report = health.report();
        assert!(report.healthy, "{report:?}");
        assert_eq!(report.starting.len(), 1);
        assert_eq!(
            (report.starting[0].task.as_str(), report.starting[0].phase.as_str()),
            ("worker-0", "connecting the sink")
        );
        std::thread::sleep(Duration::from_millis(60));
        assert!(!health.report().healthy, "a start past the threshold is unhealthy");
        health.started(7);
        let report = health.report();
        assert!(report.healthy && report.starting.is_empty(), "{report:?}");
    }

    #[test]
    fn the_assignment_is_told_per_topic() {
        let health = Health::new(Duration::from_secs(1));
        assert!(!health.holds("in", 0));
        assert_eq!(health.assigned_partitions("in"), Vec::<i32>::new());
        health.assigned(&[("in".into(), 3), ("in".into(), 1), ("other".into(), 0)]);
        assert!(health.holds("in", 3) && !health.holds("in", 0) && health.holds("other", 0));
        assert_eq!(health.assigned_partitions("in"), vec![1, 3]);
        health.revoked(&[("in".into(), 3)]);
        assert_eq!(health.assigned_partitions("in"), vec![1]);
    }

    #[test]
    fn an_unserved_partition_is_listed_with_its_latest_reason_until_served_and_leaves_health_alone() {
        let health = Health::new(Duration::from_millis(10));
        let tp: TopicPartition = ("in".into(), 3);
        assert_eq!(health.unserved(&tp, "waiting for room"), 1);
        assert_eq!(health.unserved(&("in".into(), 4), "init_transactions timed out"), 2);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(health.unserved(&tp, "still waiting"), 2);
        let report = health.report();
        assert!(report.healthy, "unserved partitions do not make the report unhealthy: {report:?}");
        let listed: Vec<(i32, &str)> = report.unserved.iter().map(|u| (u.partition, u.reason.as_str())).collect();
        assert_eq!(
            listed,
            [(3, "still waiting"), (4, "init_transactions timed out")],
            "ordered by wait, then partition"
        );
        assert!(report.unserved.iter().all(|u| u.unserved_ms >= 20), "the wait counts from the first time: {report:?}");
        assert_eq!(health.served(&tp), 1);
        assert_eq!(health.served(&tp), 1, "serving twice is harmless");
        assert_eq!(health.report().unserved.len(), 1);
    }
}
