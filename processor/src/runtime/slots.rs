//! Transaction slots: at most N partition tasks run a transaction cycle at once.
//!
//! Why: in per-partition mode ([`Guarantee::ExactlyOnce`](crate::Guarantee)) every partition
//! has its own task and producer. Hundreds of them committing at once flood the brokers with
//! small requests (AddPartitionsToTxn, Produce, TxnOffsetCommit, EndTxn per partition per
//! commit interval) and the machine with runnable threads: produce requests time out, the
//! batches abort and replay, and the load grows. With slots, a task that has collected its
//! batch waits for a free slot before it begins its transaction; collecting is not limited.
//! The wait is bounded by the batch's deadline and shortened like it by a revocation, so a
//! task never holds the rebalance up longer than without slots.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::runtime::interrupt::Deadline;

/// A counting semaphore for transaction cycles.
#[derive(Debug)]
pub(crate) struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

/// A slot held for one cycle; released when dropped.
pub(crate) struct Slot<'a>(&'a Slots);

impl Slots {
    pub(crate) fn new(n: usize) -> Slots {
        Slots { free: Mutex::new(n.max(1)), freed: Condvar::new() }
    }

    /// Waits for a free slot until `deadline` (which a revocation may bring forward);
    /// `None` if it passed first.
    pub(crate) fn acquire<'a>(&'a self, deadline: &Deadline<'_>) -> Option<Slot<'a>> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if *free > 0 {
                *free -= 1;
                return Some(Slot(self));
            }
            let left = deadline.remaining();
            if left.is_zero() {
                return None;
            }
            // Re-check the deadline now and then: an interruption moves it without a notify.
            let wait = left.min(Duration::from_millis(50));
            free = self.freed.wait_timeout(free, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Slots {
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
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn at_most_n_holders_at_once_and_every_waiter_gets_a_turn() {
        let slots = Arc::new(Slots::new(3));
        let (now, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads: Vec<_> = (0..12)
            .map(|_| {
                let (slots, now, max) = (slots.clone(), now.clone(), max.clone());
                std::thread::spawn(move || {
                    let deadline = Deadline::from(Instant::now() + Duration::from_secs(30));
                    let _slot = slots.acquire(&deadline).expect("a slot within 30 s");
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
        assert_eq!(*slots.free.lock().unwrap(), 3, "every slot released");
    }

    #[test]
    fn a_waiter_gives_up_at_its_deadline() {
        let slots = Slots::new(1);
        let forever = Deadline::from(Instant::now() + Duration::from_secs(30));
        let held = slots.acquire(&forever).unwrap();
        let started = Instant::now();
        assert!(slots.acquire(&Deadline::from(Instant::now() + Duration::from_millis(120))).is_none());
        assert!(started.elapsed() >= Duration::from_millis(120));
        drop(held);
        assert!(slots.acquire(&Deadline::from(Instant::now())).is_some(), "free again: no wait needed");
    }
}
