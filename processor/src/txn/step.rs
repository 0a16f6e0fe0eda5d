//! A cycle's steps and their errors: which librdkafka call failed, classified.

use rdkafka::error::KafkaError;

use crate::error::{classify, ErrorClass};

/// The steps of a cycle, named after the librdkafka call that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Create,
    Init,
    Begin,
    Produce,
    AwaitAcks,
    SendOffsets,
    Commit,
    Abort,
}

impl Step {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Step::Create => "create producer",
            Step::Init => "init_transactions",
            Step::Begin => "begin_transaction",
            Step::Produce => "produce",
            Step::AwaitAcks => "await delivery reports",
            Step::SendOffsets => "send_offsets_to_transaction",
            Step::Commit => "commit_transaction",
            Step::Abort => "abort_transaction",
        }
    }
}

/// A Kafka error at one step of the cycle, with its class.
#[derive(Debug, Clone)]
pub(crate) struct StepError {
    pub step: Step,
    pub class: ErrorClass,
    pub err: KafkaError,
}

impl StepError {
    pub(crate) fn new(step: Step, err: KafkaError) -> StepError {
        StepError { step, class: classify(&err), err }
    }

    /// Whether the group refused this member's offsets (it expired or fenced the member:
    /// `UNKNOWN_MEMBER_ID`, `FENCED_INSTANCE_ID`), rather than the transaction coordinator
    /// fencing the producer: the producer's epoch is still current there, and its open
    /// transaction stays open until aborted or timed out.
    pub(crate) fn refused_by_group(&self) -> bool {
        use rdkafka::error::RDKafkaErrorCode as C;
        self.step == Step::SendOffsets
            && matches!(self.err.rdkafka_error_code(), Some(C::UnknownMemberId | C::FencedInstanceId))
    }

    pub(crate) fn into_error(self, who: &str) -> crate::Error {
        let op = format!("{} for {who}", self.step.as_str());
        let source = crate::error::KafkaError::with_class(self.err, self.class);
        crate::Error::kafka_failure(op, source, crate::error::hint(self.class))
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed ({}): {}", self.step.as_str(), self.class, self.err)
    }
}
