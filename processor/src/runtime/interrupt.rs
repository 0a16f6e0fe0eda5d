//! Interrupting a task that is busy with a failing batch: revocation, lost partitions,
//! shutdown.
//!
//! One batch can keep a task from its inbox until the task timeout, while the consumer thread
//! (and, on a revocation, the whole group's rebalance) waits for it. So the consumer thread
//! sets the task's [`Interrupt`] *before* it sends the `Revoke` or starts the shutdown, and
//! every wait of the cycle ends by a [`Deadline`] the interrupt brings forward:
//!
//! | interruption | set by the consumer thread | deadline | the batch |
//! |---|---|---|---|
//! | lost | on `Revoke { lost: true }` | at once | not tried again: the open transaction (if any) is aborted, briefly, and the batch dropped |
//! | revoked | on `Revoke { lost: false }` | the shutdown timeout from now, at most the consumer's own wait | committed if that can be done before the deadline; otherwise aborted and dropped |
//! | shutdown | when the graceful shutdown starts | the shutdown deadline | as revoked |
//!
//! Dropping is always safe: the next owner redoes the batch from the committed offset
//! ([`Outcome::Dropped`](crate::observe::Outcome::Dropped)). A running librdkafka or processor
//! call is not cut short; the final abort gets [`ABORT_GRACE`] past the deadline. The task still
//! never waits for the consumer thread: the interrupt is state the consumer writes and the task
//! reads.

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
