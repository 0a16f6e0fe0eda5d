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
//! `commit_transaction`, `abort_transaction`) runs on a short-lived thread of its own, and
//! the task waits for it at most the call's timeout plus [`GRACE`]. A call that outlives
//! that is abandoned: its thread keeps the producer (a shared reference) until librdkafka
//! returns, if ever; the task's [`TxnProducer`](super::TxnProducer) is marked wedged and
//! makes no further call; and the step fails as timed out. Its outcome is then unknown, so
//! the task fences the producer with a fresh one of the same transactional.id and
//! reconciles ([`crate::runtime::reconcile`]): the epoch bump also makes whatever the stuck
//! call might still send harmless.
//!
//! # Cost
//! A thread spawn per call (two per committed transaction: about 20–40 µs against a commit
//! step of 2 ms or more), with a small stack. No standing thread.

use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;

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

/// Runs `call` with `timeout` on its own thread and waits for it at most `timeout + grace`.
/// A call that cannot get a thread (the process is out of them) fails as cancelled, without
/// reaching librdkafka.
pub(super) fn run(
    producer: &Arc<BaseProducer<DeliveryTracker>>,
    timeout: Duration,
    grace: Duration,
    call: Call,
) -> Result<Result<(), KafkaError>, Abandoned> {
    let (tx, rx) = sync_channel(1);
    let p = producer.clone();
    let spawned = std::thread::Builder::new().name("kafka-eos-txn-call".into()).stack_size(STACK).spawn(move || {
        let _ = tx.send(call(&p, timeout));
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot spawn a thread for a transactional call");
        return Ok(Err(KafkaError::Canceled));
    }
    match rx.recv_timeout(timeout + grace) {
        Ok(result) => Ok(result),
        Err(RecvTimeoutError::Timeout) => Err(Abandoned),
        // The call panicked inside rdkafka: report it as a failed call of unknown outcome.
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
