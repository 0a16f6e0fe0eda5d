//! A transactional librdkafka call that does not return.
//!
//! # Why
//! librdkafka 2.12 can block in `send_offsets_to_transaction` forever after the broker
//! hosting the transaction coordinator was killed: the call's own timeout is never checked
//! on one path (confluentinc/librdkafka#5456, #5511; found by the chaos suite's
//! coordinator-kill scenario, where gdb showed the call waiting with no deadline). A task
//! stuck there holds its partitions for good: nothing is committed, and without a
//! revocation nothing notices.
//!
//! # What
//! Every transactional call (`init_transactions`, `send_offsets_to_transaction`,
//! `commit_transaction`, `abort_transaction`) runs on another thread — one of the pipeline
//! runtime's blocking pool (`spawn_blocking`), or one of its own where there is no runtime
//! (the mock-cluster tests) — and the task waits for it at most the call's timeout plus [`GRACE`]. A call that outlives
//! that is abandoned: its thread keeps the producer (a shared reference) until librdkafka
//! returns, if ever; the task's [`TxnProducer`](super::TxnProducer) is marked wedged and
//! makes no further call; and the step fails as timed out. Its outcome is then unknown, so
//! the task fences the producer with a fresh one of the same transactional.id and
//! reconciles ([`crate::runtime::reconcile`]): the epoch bump also makes whatever the stuck
//! call might still send harmless.
//!
//! # Cost
//! A hand-over to an idle blocking-pool thread per call, two per committed transaction.
//! Measured with `commit_latency --quick` against one local broker, A/B pairs run in turn
//! on a quiet 2-core machine (load 0.2–1.0), as the median over its 12 configurations of
//! the commit step's p50: without the watchdog 1.46 / 1.58 / 1.56 ms, with it 1.89 / 1.67 /
//! 1.53 ms — within the noise of 20-transaction samples. A thread spawned per call, tried
//! first, cost 53–59 µs per call (spawn and reply, median) and 1.91 / 1.74 ms against
//! 1.79 / 1.50 ms.

use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;
use tokio::runtime::Handle;

use super::delivery::DeliveryTracker;

/// How long past its own timeout a call may take before it is abandoned.
pub(crate) const GRACE: Duration = Duration::from_secs(5);

/// The stack of a call's thread: the call only waits inside librdkafka.
const STACK: usize = 256 * 1024;

/// One transactional call on the producer, with the timeout librdkafka is given.
pub(super) type Call = Box<dyn FnOnce(&BaseProducer<DeliveryTracker>, Duration) -> Result<(), KafkaError> + Send>;

/// A call did not return within its timeout plus [`GRACE`]; it still runs.
#[derive(Debug)]
pub(super) struct Abandoned;

/// Runs `call` with `timeout` on a thread of `pool` (a Tokio runtime's blocking pool; without
/// one, a thread of its own) and waits for it at most `timeout + grace`. A call that cannot
/// get a thread fails as cancelled, without reaching librdkafka.
pub(super) fn run(
    producer: &Arc<BaseProducer<DeliveryTracker>>,
    pool: Option<&Handle>,
    timeout: Duration,
    grace: Duration,
    call: Call,
) -> Result<Result<(), KafkaError>, Abandoned> {
    let (tx, rx) = sync_channel(1);
    let p = producer.clone();
    let job = move || {
        let _ = tx.send(call(&p, timeout));
    };
    match pool {
        // The pool's idle threads make a call's hand-over cheap (a thread spawn per call
        // added 0.1–0.2 ms to the commit step's median); a hung call keeps one of them.
        Some(rt) => drop(rt.spawn_blocking(job)),
        None => {
            let spawned = std::thread::Builder::new().name("kafka-eos-txn-call".into()).stack_size(STACK).spawn(job);
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot spawn a thread for a transactional call");
                return Ok(Err(KafkaError::Canceled));
            }
        }
    }
    match rx.recv_timeout(timeout + grace) {
        Ok(result) => Ok(result),
        Err(RecvTimeoutError::Timeout) => Err(Abandoned),
        // The call panicked inside rdkafka (or the runtime is shutting down and dropped it):
        // a failed call of unknown outcome.
        Err(RecvTimeoutError::Disconnected) => Ok(Err(KafkaError::Canceled)),
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
            None,
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
    fn with_a_runtime_a_call_runs_on_its_blocking_pool() {
        let p = producer();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().expect("runtime");
        let r = run(
            &p,
            Some(rt.handle()),
            Duration::from_millis(100),
            Duration::from_millis(100),
            Box::new(|_, _| {
                let name = std::thread::current().name().map(str::to_string);
                assert_ne!(name.as_deref(), Some("kafka-eos-txn-call"), "not a thread of its own");
                Ok(())
            }),
        );
        assert!(matches!(r, Ok(Ok(()))), "{r:?}");
    }

    #[test]
    fn a_call_that_never_returns_is_abandoned_after_its_timeout_and_the_grace() {
        let p = producer();
        let started = std::time::Instant::now();
        let r = run(
            &p,
            None,
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
