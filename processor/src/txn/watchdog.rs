//! A transactional librdkafka call that does not return (confluentinc/librdkafka#5456, #5511:
//! `send_offsets_to_transaction` after the coordinator's broker dies). Every transactional
//! call runs on a [`pool`] thread and the task waits at most its timeout plus [`GRACE`]; past
//! that the call is abandoned with its producer (marked wedged), the step fails as timed out,
//! and the task fences and reconciles ([`crate::runtime::reconcile`]), which also makes the
//! stuck call harmless. The cost is below the noise (`docs/benchmarks.md`).

use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;

use super::delivery::DeliveryTracker;

/// How long past its own timeout a call may take before it is abandoned.
pub(crate) const GRACE: Duration = Duration::from_secs(5);

/// How long a commit is resumed past an interrupt: twice the call timeout, so that a commit
/// that timed out once is retried once more (see the parent module's hazards).
pub(crate) fn commit_grace(call_timeout: Duration) -> Duration {
    call_timeout * 2
}

/// The longest a commit step can hold its task past an interrupt: its [`commit_grace`], and
/// its last call may overrun by [`GRACE`].
pub(crate) fn commit_bound(cfg: &crate::config::PipelineConfig) -> Duration {
    commit_grace(cfg.call_timeout()) + GRACE
}

/// The stack of a call's thread: the call only waits inside librdkafka.
const STACK: usize = 256 * 1024;

/// One transactional call on the producer, with the timeout librdkafka is given.
pub(super) type Call = Box<dyn FnOnce(&BaseProducer<DeliveryTracker>, Duration) -> Result<(), KafkaError> + Send>;

/// A call did not return within its timeout plus [`GRACE`]; it still runs.
#[derive(Debug)]
pub(super) struct Abandoned;

/// Runs `call` with `timeout` on a thread of the call pool and waits for it at most
/// `timeout + grace`. A call that cannot get a thread fails as cancelled, without reaching
/// librdkafka.
pub(super) fn run(
    producer: &Arc<BaseProducer<DeliveryTracker>>,
    timeout: Duration,
    grace: Duration,
    call: Call,
) -> Result<Result<(), KafkaError>, Abandoned> {
    let (tx, rx) = sync_channel(1);
    let p = producer.clone();
    if let Err(e) = pool::submit(Box::new(move || {
        let _ = tx.send(call(&p, timeout));
    })) {
        tracing::warn!(error = %e, "cannot start a thread for a transactional call");
        return Ok(Err(KafkaError::Canceled));
    }
    match rx.recv_timeout(timeout + grace) {
        Ok(result) => Ok(result),
        Err(RecvTimeoutError::Timeout) => Err(Abandoned),
        // The call panicked inside rdkafka: a failed call of unknown outcome.
        Err(RecvTimeoutError::Disconnected) => Ok(Err(KafkaError::Canceled)),
    }
}

/// The threads the calls run on: an idle one takes the next call, and a call finding none
/// idle starts one; a thread idle for [`IDLE`](pool::IDLE) exits. They are detached, not a
/// runtime's blocking pool: a runtime waits for its blocking tasks when it is dropped, so a
/// call that never returns would keep the application from ending; a detached thread does
/// not. Idle threads are reused because spawning one per call costs more than the hand-over.
mod pool {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
    use std::sync::{Mutex, MutexGuard};
    use std::time::Duration;

    pub(super) type Job = Box<dyn FnOnce() + Send>;

    /// How long a thread waits for another call before it exits.
    pub(super) const IDLE: Duration = Duration::from_secs(30);

    struct Idle {
        id: u64,
        tx: SyncSender<Job>,
    }

    static IDLE_THREADS: Mutex<Vec<Idle>> = Mutex::new(Vec::new());
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);

    fn idle() -> MutexGuard<'static, Vec<Idle>> {
        IDLE_THREADS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `job` on an idle thread, or on a new one.
    pub(super) fn submit(job: Job) -> std::io::Result<()> {
        let taken = idle().pop();
        let job = match taken {
            // Its channel is empty (it waits on it) and it holds the receiver: this succeeds
            // unless the thread died, and then the job comes back.
            Some(w) => match w.tx.send(job) {
                Ok(()) => return Ok(()),
                Err(e) => e.0,
            },
            None => job,
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        std::thread::Builder::new()
            .name("kafka-eos-txn-call".into())
            .stack_size(crate::txn::watchdog::STACK)
            .spawn(move || work(id, job))
            .map(drop)
    }

    fn work(id: u64, mut job: Job) {
        let (tx, rx) = sync_channel::<Job>(1);
        loop {
            job();
            idle().push(Idle { id, tx: tx.clone() });
            job = loop {
                match rx.recv_timeout(IDLE) {
                    Ok(next) => break next,
                    Err(RecvTimeoutError::Timeout) => {
                        let mut idle = idle();
                        match idle.iter().position(|w| w.id == id) {
                            Some(i) => {
                                idle.swap_remove(i);
                                return;
                            }
                            // Taken by a caller just now: its job is on the way.
                            None => continue,
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => return, // unreachable: `tx` is ours
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::ClientConfig;

    use super::*;

    fn producer() -> Arc<BaseProducer<DeliveryTracker>> {
        let p =
            ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1").create_with_context(DeliveryTracker::default());
        Arc::new(p.expect("producer"))
    }

    #[test]
    fn a_call_that_returns_in_time_gives_its_result() {
        let p = producer();
        let r = run(
            &p,
            Duration::from_millis(100),
            Duration::from_millis(100),
            Box::new(|_, t| {
                assert_eq!(t, Duration::from_millis(100), "the call gets the timeout");
                Err(KafkaError::Canceled)
            }),
        );
        assert!(matches!(r, Ok(Err(KafkaError::Canceled))), "{r:?}");
    }

    #[test]
    fn idle_threads_are_reused() {
        let p = producer();
        let name = || {
            let (tx, rx) = sync_channel(1);
            let r = run(
                &p,
                Duration::from_millis(500),
                Duration::from_millis(500),
                Box::new(move |_, _| {
                    let _ = tx.send(std::thread::current().id());
                    Ok(())
                }),
            );
            assert!(matches!(r, Ok(Ok(()))), "{r:?}");
            rx.recv().expect("ran")
        };
        let first = name();
        // The first thread is back in the idle list once it has replied and pushed itself:
        // give it a moment, then the next call must find it (other tests may add threads).
        std::thread::sleep(Duration::from_millis(50));
        let ids: Vec<_> = (0..5).map(|_| name()).collect();
        assert!(ids.iter().all(|id| *id != std::thread::current().id()), "not on the caller's thread");
        assert!(ids.contains(&first) || ids.windows(2).any(|w| w[0] == w[1]), "threads reused: {first:?} {ids:?}");
    }

    #[test]
    fn a_call_that_never_returns_is_abandoned_after_its_timeout_and_the_grace() {
        let p = producer();
        let started = std::time::Instant::now();
        let r = run(
            &p,
            Duration::from_millis(100),
            Duration::from_millis(200),
            Box::new(|_, _| {
                std::thread::sleep(Duration::from_secs(3600));
                Ok(())
            }),
        );
        assert!(matches!(r, Err(Abandoned)), "{r:?}");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(Arc::strong_count(&p), 2, "the abandoned call still holds the producer");
    }
}
