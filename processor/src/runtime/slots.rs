//! Transaction slots: at most N partition tasks run a transaction cycle at once, because
//! hundreds of per-partition producers committing together time out and abort
//! (`docs/scaling.md`, *Transaction slots*). Invariants: the bound is engaged only above N
//! [`Member`]s (below it a slot is always free and batches stream); waiters are served first
//! come, first served, each woken on its own; a wait ends at the batch's deadline; and a
//! revoked or shutting-down waiter stops at once ([`Slots::acquire`]'s `give_up`) and hands its
//! batch back, since the rebalance callback waits for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::runtime::interrupt::Deadline;

/// A first-come-first-served counting semaphore for transaction cycles.
#[derive(Debug)]
pub(crate) struct Slots {
    capacity: usize,
    state: Mutex<State>,
    /// Live partition tasks ([`Member`]s): the bound is engaged past `capacity`.
    members: AtomicUsize,
}

#[derive(Debug)]
struct State {
    free: usize,
    /// Waiters in arrival order; a released slot goes straight to the front one.
    queue: VecDeque<Arc<Waiter>>,
}

#[derive(Debug)]
struct Waiter {
    /// Set (under the state's lock) when a released slot was handed to this waiter.
    granted: AtomicBool,
    woken: Condvar,
}

/// A slot held for one cycle; released when dropped (to the longest waiter, if any).
pub(crate) struct Slot<'a>(&'a Slots);

/// A partition task counted by the slots while it lives.
#[derive(Debug)]
pub(crate) struct Member(Arc<Slots>);

impl Slots {
    pub(crate) fn new(n: usize) -> Slots {
        let capacity = n.max(1);
        Slots {
            capacity,
            state: Mutex::new(State { free: capacity, queue: VecDeque::new() }),
            members: AtomicUsize::new(0),
        }
    }

    /// Counts a partition task until the returned guard is dropped.
    pub(crate) fn join(self: &Arc<Self>) -> Member {
        self.members.fetch_add(1, Ordering::SeqCst);
        Member(self.clone())
    }

    /// Whether more tasks live than there are slots: only then can a task have to wait, and
    /// only then do batches collect before their cycle instead of streaming.
    pub(crate) fn engaged(&self) -> bool {
        self.members.load(Ordering::SeqCst) > self.capacity
    }

    /// Waits for a free slot, behind the tasks that waited first, until `deadline` (which a
    /// revocation may bring forward) or until `give_up()` (checked on every wake-up: a
    /// revocation can come while the task waits); `None` if either came first.
    pub(crate) fn acquire<'a>(&'a self, deadline: &Deadline<'_>, give_up: &dyn Fn() -> bool) -> Option<Slot<'a>> {
        let mut state = self.lock();
        if state.free > 0 && state.queue.is_empty() {
            state.free -= 1;
            return Some(Slot(self));
        }
        let me = Arc::new(Waiter { granted: AtomicBool::new(false), woken: Condvar::new() });
        state.queue.push_back(me.clone());
        loop {
            if me.granted.load(Ordering::SeqCst) {
                return Some(Slot(self));
            }
            let left = deadline.remaining();
            if left.is_zero() || give_up() {
                state.queue.retain(|w| !Arc::ptr_eq(w, &me));
                return None;
            }
            // Re-check the deadline now and then: an interruption moves it without a notify.
            let wait = left.min(Duration::from_millis(50));
            state = me.woken.wait_timeout(state, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// A slot for a task's first `init_transactions`, only while the bound is engaged;
    /// [`Slots::timed_out`] if none came within `timeout`.
    pub(crate) fn acquire_if_engaged<'a>(
        &'a self,
        deadline: &Deadline<'_>,
        timeout: Duration,
    ) -> crate::error::Result<Option<Slot<'a>>> {
        if !self.engaged() {
            return Ok(None);
        }
        self.acquire(deadline, &|| false).map(Some).ok_or_else(|| Slots::timed_out(timeout))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The error of a task that found no free slot within the task timeout: every slot
    /// was held by cycles that kept failing or hanging that long.
    pub(crate) fn timed_out(timeout: Duration) -> crate::error::Error {
        crate::error::Error::TaskTimeout {
            what: "waiting for a transaction slot".into(),
            timeout,
            last: "every slot stayed busy: the other partitions' transactions are failing or hanging; \
                   check the brokers' health, or raise max_concurrent_transactions"
                .into(),
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        match state.queue.pop_front() {
            Some(next) => {
                next.granted.store(true, Ordering::SeqCst);
                next.woken.notify_one();
            }
            None => state.free += 1,
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.0.members.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    fn forever() -> Deadline<'static> {
        Deadline::from(Instant::now() + Duration::from_secs(30))
    }

    #[test]
    fn at_most_n_holders_at_once_and_every_waiter_gets_a_turn() {
        let slots = Arc::new(Slots::new(3));
        let (now, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads: Vec<_> = (0..12)
            .map(|_| {
                let (slots, now, max) = (slots.clone(), now.clone(), max.clone());
                std::thread::spawn(move || {
                    let _slot = slots.acquire(&forever(), &|| false).expect("a slot within 30 s");
                    let held = now.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(held, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    now.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(max.load(Ordering::SeqCst), 3);
        assert_eq!(slots.lock().free, 3, "every slot released");
    }

    #[test]
    fn waiters_are_served_in_the_order_they_came() {
        let slots = Arc::new(Slots::new(1));
        let held = slots.acquire(&forever(), &|| false).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for i in 0..8 {
            let (mine, order) = (slots.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                let _slot = mine.acquire(&forever(), &|| false).expect("a slot within 30 s");
                order.lock().unwrap().push(i);
            }));
            // Queued before the next one starts: the arrival order is i's order.
            while slots.lock().queue.len() < i + 1 {
                std::thread::yield_now();
            }
        }
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
        // A newcomer does not barge past a queue: with the slot held and one waiter queued,
        // a release goes to the waiter, not to whoever asks next.
        let held = slots.acquire(&forever(), &|| false).unwrap();
        let waiter = {
            let slots = slots.clone();
            std::thread::spawn(move || slots.acquire(&forever(), &|| false).map(|_| ()).is_some())
        };
        while slots.lock().queue.is_empty() {
            std::thread::yield_now();
        }
        drop(held);
        assert!(waiter.join().unwrap());
        assert_eq!(slots.lock().free, 1);
    }

    #[test]
    fn a_waiter_told_to_give_up_leaves_the_queue_at_once_and_the_others_keep_their_turn() {
        let slots = Arc::new(Slots::new(1));
        let held = slots.acquire(&forever(), &|| false).unwrap();
        let revoked = Arc::new(AtomicBool::new(false));
        let waiter = |give_up: Option<Arc<AtomicBool>>| {
            let slots = slots.clone();
            std::thread::spawn(move || {
                let give_up = move || give_up.as_ref().is_some_and(|g| g.load(Ordering::SeqCst));
                let started = Instant::now();
                (slots.acquire(&forever(), &give_up).is_some(), started.elapsed())
            })
        };
        let revoked_waiter = waiter(Some(revoked.clone()));
        while slots.lock().queue.is_empty() {
            std::thread::yield_now();
        }
        let other = waiter(None);
        while slots.lock().queue.len() < 2 {
            std::thread::yield_now();
        }
        revoked.store(true, Ordering::SeqCst);
        let (got, waited) = revoked_waiter.join().unwrap();
        assert!(!got, "gave up without a slot");
        assert!(waited < Duration::from_secs(5), "at once, not at its deadline: {waited:?}");
        assert_eq!(slots.lock().queue.len(), 1, "left the queue; the other still waits");
        drop(held);
        assert!(other.join().unwrap().0, "the release went to the remaining waiter");
        assert_eq!(slots.lock().free, 1);
    }

    #[test]
    fn a_waiter_gives_up_at_its_deadline_and_leaves_the_queue() {
        let slots = Slots::new(1);
        let held = slots.acquire(&forever(), &|| false).unwrap();
        let started = Instant::now();
        assert!(slots.acquire(&Deadline::from(Instant::now() + Duration::from_millis(120)), &|| false).is_none());
        assert!(started.elapsed() >= Duration::from_millis(120));
        assert!(slots.lock().queue.is_empty(), "the waiter that gave up is not served later");
        drop(held);
        assert!(slots.acquire(&Deadline::from(Instant::now()), &|| false).is_some(), "free again: no wait needed");
    }

    #[test]
    fn engaged_only_with_more_members_than_slots() {
        let slots = Arc::new(Slots::new(2));
        let (a, b) = (slots.join(), slots.join());
        assert!(!slots.engaged());
        let c = slots.join();
        assert!(slots.engaged());
        drop(c);
        assert!(!slots.engaged());
        drop((a, b));
        assert_eq!(slots.members.load(Ordering::SeqCst), 0);
    }
}
