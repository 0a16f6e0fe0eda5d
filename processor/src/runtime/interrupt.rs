//! Interrupting a task that is busy with a failing batch: revocation, lost partitions,
//! shutdown.
//!
//! # Why
//! A task reads its inbox only between cycles, and one batch can keep it busy for long: a
//! processor failing every replay (under a retry policy), a Kafka error replayed with
//! backoff, a retriable call retried, a delivery report that does not come while the
//! brokers are away — each bounded only by the task timeout (300 s by default). Meanwhile:
//! - on a **revocation** the consumer thread waits for the task's reply *inside the
//!   rebalance callback*, so the whole group's rebalance waits for this member too (every
//!   partition of every instance stays unassigned until it rejoins, or until
//!   `max.poll.interval.ms` expels it);
//! - on a **lost** assignment the group has already given the partitions to someone else,
//!   and every further attempt is wasted work against a producer about to be fenced;
//! - on **shutdown** the consumer thread abandons the task at the shutdown deadline, and an
//!   abandoned task went on replaying (and calling the processor) after `run` returned.
//!
//! So the consumer thread sets the task's [`Interrupt`] *before* it sends the `Revoke` or
//! starts the shutdown, and every wait of the cycle — the retry loops and backoff sleeps in
//! [`crate::txn`] and `Task::commit_batch`, the wait for delivery reports, the wait for
//! room in librdkafka's queue — takes its end from a [`Deadline`] that the interrupt brings
//! forward; a backoff sleep wakes up as soon as the interrupt is set. What the task then
//! does with the batch:
//!
//! | interruption | set by the consumer thread | deadline | the batch |
//! |---|---|---|---|
//! | lost | on `Revoke { lost: true }` | at once | not tried again: the open transaction (if any) is aborted, briefly, and the batch dropped |
//! | revoked | on `Revoke { lost: false }` | the shutdown timeout from now, at most the consumer's own wait | committed if that can be done before the deadline ("commit what is collected", as before); otherwise aborted and dropped |
//! | shutdown | when the graceful shutdown starts | the shutdown deadline | as revoked |
//!
//! Dropping a batch is always safe: nothing of an aborted transaction is visible, and the
//! partitions' next owner (this instance or another) resumes from the committed offset —
//! the batch is redone, not lost. A dropped batch is reported as
//! [`Outcome::Dropped`](crate::observe::Outcome::Dropped).
//!
//! # What is not interrupted
//! A librdkafka call already running finishes (each is bounded by the producer's call
//! timeout, the transaction timeout or 5 s); neither is a processor call. The abort that
//! ends an interrupted batch gets a short grace ([`ABORT_GRACE`]) even past the deadline: an
//! abort refused for lack of time would give the producer up for nothing.
//!
//! # The design rule still holds
//! The task never waits for the consumer thread: the interrupt is a mutex-guarded state the
//! consumer thread writes and the task reads. The consumer thread's waits stay bounded as
//! before (a task that does not answer in time is abandoned to fencing); the interrupt only
//! makes the answer come sooner.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::observe::Interruption;

/// The least time an interrupted batch's abort may take (see the [module docs](self)).
pub(crate) const ABORT_GRACE: Duration = Duration::from_secs(5);

/// Set by the consumer thread, read by one task: why and by when the task must let go of the
/// batch it is working on.
#[derive(Debug, Default)]
pub(crate) struct Interrupt {
    state: Mutex<State>,
    wake: Condvar,
    /// What a starting task is doing (its producer, its sink), named in the error when its
    /// start does not complete in time.
    phase: Mutex<&'static str>,
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// The deadline of a revocation in progress.
    revoked: Option<Instant>,
    /// When the partitions were reported lost.
    lost: Option<Instant>,
    /// The shutdown deadline; never cleared.
    shutdown: Option<Instant>,
}

impl Interrupt {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Task: what its start is doing now.
    pub(crate) fn set_phase(&self, phase: &'static str) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase;
    }

    /// Consumer thread: what a task that has not started yet is doing.
    pub(crate) fn phase(&self) -> &'static str {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Consumer thread: the task's partitions are being revoked (`lost`: they are already
    /// someone else's). A normal revocation's batch may go on until `deadline`.
    pub(crate) fn revoke(&self, lost: bool, deadline: Instant) {
        let mut s = self.state();
        if lost {
            s.lost = Some(Instant::now());
        } else {
            s.revoked = Some(s.revoked.map_or(deadline, |d| d.min(deadline)));
        }
        drop(s);
        self.wake.notify_all();
    }

    /// Consumer thread: the pipeline is shutting down; finish by `deadline`.
    pub(crate) fn shut_down(&self, deadline: Instant) {
        let mut s = self.state();
        s.shutdown = Some(s.shutdown.map_or(deadline, |d| d.min(deadline)));
        drop(s);
        self.wake.notify_all();
    }

    /// Task: the revocation is handled (called before replying to it, so that it can never
    /// clear the next one). A shutdown stays in force.
    pub(crate) fn clear_revocation(&self) {
        let mut s = self.state();
        s.revoked = None;
        s.lost = None;
    }

    /// The interruption in force with the earliest deadline, if any.
    pub(crate) fn current(&self) -> Option<(Interruption, Instant)> {
        self.state().earliest()
    }

    /// The interruption whose deadline has passed: the batch must be let go now.
    pub(crate) fn expired(&self) -> Option<Interruption> {
        self.current().filter(|(_, at)| *at <= Instant::now()).map(|(why, _)| why)
    }
}

impl State {
    fn earliest(&self) -> Option<(Interruption, Instant)> {
        let s = self;
        [
            s.lost.map(|at| (Interruption::PartitionsLost, at)),
            s.revoked.map(|at| (Interruption::Revoked, at)),
            s.shutdown.map(|at| (Interruption::ShuttingDown, at)),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(_, at)| *at)
    }
}

/// When a step of a cycle must give up: a fixed instant (the task timeout), brought forward
/// by the task's [`Interrupt`]. Cheap to copy; every wait in [`crate::txn`] takes one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline<'a> {
    at: Instant,
    interrupt: Option<&'a Interrupt>,
    /// Never earlier than this, whatever the interrupt says (an abort's grace).
    floor: Option<Instant>,
}

impl From<Instant> for Deadline<'static> {
    fn from(at: Instant) -> Self {
        Deadline { at, interrupt: None, floor: None }
    }
}

impl<'a> Deadline<'a> {
    /// `at`, or earlier if `interrupt` says so.
    pub(crate) fn interruptible(at: Instant, interrupt: &'a Interrupt) -> Deadline<'a> {
        Deadline { at, interrupt: Some(interrupt), floor: None }
    }

    /// The same deadline, but at least `grace` from now (never past the fixed instant).
    pub(crate) fn with_grace(self, grace: Duration) -> Deadline<'a> {
        Deadline { floor: Some(Instant::now() + grace), ..self }
    }

    /// The instant in force now.
    pub(crate) fn instant(&self) -> Instant {
        self.given(self.interrupt.and_then(Interrupt::current))
    }

    /// The instant in force given the interrupt's `current` interruption.
    fn given(&self, current: Option<(Interruption, Instant)>) -> Instant {
        let interrupted = current.map(|(_, at)| match self.floor {
            Some(floor) => at.max(floor),
            None => at,
        });
        interrupted.map_or(self.at, |at| at.min(self.at))
    }

    /// Time left, zero once passed.
    pub(crate) fn remaining(&self) -> Duration {
        self.instant().saturating_duration_since(Instant::now())
    }

    /// Whether it has passed.
    pub(crate) fn passed(&self) -> bool {
        self.remaining().is_zero()
    }

    /// Sleeps for `d`, or less: until the deadline, which an interrupt set meanwhile can
    /// bring forward (it wakes the sleeper).
    pub(crate) fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        let Some(interrupt) = self.interrupt else {
            std::thread::sleep(d.min(self.remaining()));
            return;
        };
        let mut s = interrupt.state();
        loop {
            // From the guard: `instant()` would lock the state again.
            let end = until.min(self.given(s.earliest()));
            let now = Instant::now();
            if now >= end {
                return;
            }
            s = interrupt.wake.wait_timeout(s, end - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_earliest_interruption_wins_and_a_revocation_clears_but_a_shutdown_does_not() {
        let i = Interrupt::default();
        let now = Instant::now();
        assert!(i.current().is_none() && i.expired().is_none());
        i.shut_down(now + secs(20));
        i.revoke(false, now + secs(10));
        assert_eq!(i.current(), Some((Interruption::Revoked, now + secs(10))));
        assert_eq!(i.expired(), None, "the revocation's batch may still commit");
        i.revoke(true, now + secs(10));
        assert_eq!(i.expired(), Some(Interruption::PartitionsLost), "lost: at once");
        i.clear_revocation();
        assert_eq!(i.current(), Some((Interruption::ShuttingDown, now + secs(20))));
    }

    #[test]
    fn a_deadline_is_brought_forward_by_the_interrupt_but_not_below_its_grace() {
        let i = Interrupt::default();
        let task = Instant::now() + secs(300);
        let d = Deadline::interruptible(task, &i);
        assert_eq!(d.instant(), task);
        i.revoke(true, task);
        assert!(d.passed());
        let abort = d.with_grace(secs(5));
        assert!(abort.remaining() > secs(4) && abort.remaining() <= secs(5), "{:?}", abort.remaining());
        let fixed: Deadline = (Instant::now() + secs(1)).into();
        assert!(fixed.with_grace(secs(5)).remaining() <= secs(1), "a grace never extends the fixed instant");
    }

    #[test]
    fn a_backoff_sleep_wakes_when_the_task_is_interrupted() {
        let i = std::sync::Arc::new(Interrupt::default());
        let setter = i.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            setter.revoke(true, Instant::now());
        });
        let started = Instant::now();
        Deadline::interruptible(Instant::now() + secs(300), &i).sleep(secs(30));
        let slept = started.elapsed();
        t.join().unwrap();
        assert!(slept >= Duration::from_millis(100) && slept < secs(5), "slept {slept:?}");
    }
}
