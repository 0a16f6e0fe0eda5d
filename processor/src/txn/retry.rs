//! How a transactional call is made: bounded by the call timeout and the step's deadline,
//! guarded by the watchdog, retried with backoff while retriable — except `send_offsets`,
//! which gets one call per epoch, and `commit`, whose retriable failure is resumed (see the
//! parent module's hazards) — and timed per step.

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::{watchdog, Step, StepError, TxnProducer};
use crate::error::ErrorClass;
use crate::metrics::add_ns;
use crate::runtime::interrupt::Deadline;

impl TxnProducer {
    pub(super) fn retrying(
        &mut self,
        step: Step,
        deadline: Deadline<'_>,
        mut call: impl FnMut() -> watchdog::Call,
    ) -> Result<(), StepError> {
        let started = Instant::now();
        let result = self.retry_until(step, deadline, &mut call);
        let timer = match step {
            Step::Init => &self.timers.init,
            Step::SendOffsets => &self.timers.send_offsets,
            Step::Commit => &self.timers.commit,
            Step::Abort => &self.timers.abort,
            _ => return result,
        };
        add_ns(timer, started.elapsed());
        result
    }

    fn retry_until(
        &mut self,
        step: Step,
        deadline: Deadline<'_>,
        call: &mut impl FnMut() -> watchdog::Call,
    ) -> Result<(), StepError> {
        let mut backoff = Duration::from_millis(50);
        loop {
            if self.wedged {
                // A call abandoned earlier may still run: a second one would race it.
                return Err(StepError { step, class: ErrorClass::Fatal, err: KafkaError::Canceled });
            }
            let timeout = deadline.remaining().max(Duration::from_millis(1)).min(self.call_timeout);
            let guarded = match &self.fault {
                Some(f) if f.unguarded_calls => Ok(call()(&self.inner, timeout)),
                _ => watchdog::run(&self.inner, timeout, watchdog::GRACE, call()),
            };
            let result = match guarded {
                Ok(result) => result,
                Err(watchdog::Abandoned) => {
                    self.wedged = true;
                    tracing::error!(
                        transactional_id = ?self.transactional_id,
                        step = step.as_str(),
                        ?timeout,
                        "librdkafka did not return from a transactional call within its timeout (librdkafka#5456): \
                         the call is abandoned and the producer will be replaced"
                    );
                    // Timed out, as far as the cycle knows: the outcome is unknown.
                    let err = KafkaError::Global(RDKafkaErrorCode::OperationTimedOut);
                    return Err(StepError { step, class: ErrorClass::Retriable, err });
                }
            };
            match result {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let err = StepError::new(step, e);
                    // Offsets are never sent twice on one epoch; a commit called again resumes
                    // the one in progress (see the module docs).
                    let once = step == Step::SendOffsets;
                    if once || err.class != ErrorClass::Retriable || backoff >= deadline.remaining() {
                        return Err(err);
                    }
                    let what = if step == Step::Commit { "resuming the commit" } else { "retrying" };
                    tracing::warn!(transactional_id = ?self.transactional_id, error = %err, "{what}");
                    deadline.sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}
