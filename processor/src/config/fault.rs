//! **Test-only fault injection; not part of the API** (feature `test-hooks`): failures the
//! integration tests cannot provoke deterministically on a real broker — a commit whose
//! outcome the task does not learn, a reconcile that fails, a producer that cannot be
//! initialised, a poll thread slow to relay a lost assignment to the tasks. Every real
//! pipeline has none; each costs one branch where it would act.
//! One knob is for benchmarks instead: transactional calls without their watchdog, to
//! measure what the watchdog costs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a commit is made to end with an outcome unknown to the runtime. Every way, the
/// commit step reports a timeout (retriable).
#[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownOutcome {
    /// `commit_transaction` is called and succeeds; the task is told it timed out. The
    /// transaction is committed.
    CommittedButTimedOut,
    /// `commit_transaction` is not called (the offsets are already in the transaction, which
    /// stays open); the task is told it timed out. The transaction is never committed.
    TimedOutBeforeCommit,
    /// As [`TimedOutBeforeCommit`](Self::TimedOutBeforeCommit), reported once the call
    /// timeout has passed, as a commit whose request got no answer is.
    TimedOutSlowlyBeforeCommit,
    /// `commit_transaction` is called and succeeds, then the call does not return for an
    /// hour, as librdkafka's calls sometimes do not (librdkafka#5456): the call's watchdog
    /// abandons it after its timeout plus the grace and reports it timed out. The
    /// transaction is committed.
    CommittedThenHung,
}

/// What the builder was asked to inject.
#[derive(Debug, Clone, Default)]
pub(super) struct FaultSpec {
    pub(super) unknown: Option<(u64, UnknownOutcome, bool)>,
    pub(super) init_failures: HashMap<i32, u32>,
    pub(super) unguarded_calls: bool,
    pub(super) lost_relay_delay: Option<Duration>,
    pub(super) unknown_while_lost: Option<UnknownOutcome>,
    pub(super) log_start_failures: u32,
}

impl FaultSpec {
    pub(super) fn build(self) -> Option<Arc<FaultInjection>> {
        if self.unknown.is_none()
            && self.init_failures.is_empty()
            && !self.unguarded_calls
            && self.lost_relay_delay.is_none()
            && self.unknown_while_lost.is_none()
            && self.log_start_failures == 0
        {
            return None;
        }
        Some(Arc::new(FaultInjection {
            unknown: self.unknown.map(|(nth, fault, _)| (nth, fault)),
            unreconciled: self.unknown.is_some_and(|(_, _, u)| u),
            commits: AtomicU64::new(0),
            init_failures: Mutex::new(self.init_failures),
            unguarded_calls: self.unguarded_calls,
            lost_relay_delay: self.lost_relay_delay,
            unknown_while_lost: self.unknown_while_lost,
            relaying_lost: AtomicBool::new(false),
            commits_while_lost: AtomicU64::new(0),
            log_start_failures: AtomicU32::new(self.log_start_failures),
        }))
    }
}

/// The state of a pipeline's fault injection.
#[derive(Debug)]
pub(crate) struct FaultInjection {
    /// Which commit (counted from 1 across the pipeline's producers) gets which outcome.
    unknown: Option<(u64, UnknownOutcome)>,
    /// The reconcile of the injected unknown outcome fails too, as one that runs out of
    /// time does: the producer is given up.
    pub(crate) unreconciled: bool,
    commits: AtomicU64,
    /// Input partition → producer initialisations still to fail.
    init_failures: Mutex<HashMap<i32, u32>>,
    /// Transactional calls run on the task's own thread, without the watchdog.
    pub(crate) unguarded_calls: bool,
    /// How long the consumer's poll thread waits, in the rebalance callback, before it tells
    /// the tasks that their partitions are lost (the tasks go on meanwhile).
    pub(crate) lost_relay_delay: Option<Duration>,
    /// The outcome of every other commit made while the poll thread holds back a lost
    /// assignment ([`lost_relay_delay`](Self::lost_relay_delay)), the first included: the
    /// zombie's tasks reconcile, and the commits of their replays are made.
    unknown_while_lost: Option<UnknownOutcome>,
    /// Commits counted while a lost assignment is held back.
    commits_while_lost: AtomicU64,
    /// The poll thread is holding back a lost assignment.
    relaying_lost: AtomicBool,
    /// Reads of a partition's log start still to fail.
    log_start_failures: AtomicU32,
}

impl FaultInjection {
    /// Counts one commit; the fault to inject into it, if it is the chosen one.
    pub(crate) fn on_commit(&self) -> Option<UnknownOutcome> {
        let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        if self.relaying_lost.load(Ordering::SeqCst) && self.unknown_while_lost.is_some() {
            let k = self.commits_while_lost.fetch_add(1, Ordering::Relaxed);
            return self.unknown_while_lost.filter(|_| k % 2 == 0);
        }
        self.unknown.and_then(|(nth, fault)| (n == nth).then_some(fault))
    }

    /// The poll thread starts (`true`) or ends holding back a lost assignment.
    pub(crate) fn set_relaying_lost(&self, on: bool) {
        self.commits_while_lost.store(0, Ordering::Relaxed);
        self.relaying_lost.store(on, Ordering::SeqCst);
    }

    /// Whether this read of a partition's log start must fail.
    pub(crate) fn on_log_start(&self) -> bool {
        self.log_start_failures.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
    }

    /// Whether this initialisation of a producer for `partitions` must fail.
    pub(crate) fn on_init(&self, partitions: &[crate::partition::TopicPartition]) -> bool {
        let mut left = self.init_failures.lock().unwrap_or_else(|p| p.into_inner());
        partitions.iter().any(|(_, p)| match left.get_mut(p) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
    }
}
