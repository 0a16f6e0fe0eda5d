//! Errors, and the classification that decides what the runtime does with a Kafka error.
//!
//! Every Kafka failure inside the transaction cycle is put in one of four classes
//! ([`ErrorClass`]); the class alone decides the reaction, so the reaction is the same
//! wherever in the cycle the error comes from:
//!
//! | class | examples | what the runtime does |
//! |---|---|---|
//! | [`Retriable`](ErrorClass::Retriable) | request timed out, coordinator moving, brokers briefly down | repeats the same call with backoff, until the task timeout — except in the commit step (`send_offsets_to_transaction`, `commit_transaction`), whose outcome is then unknown: fenced and reconciled with a fresh producer (`runtime/reconcile.rs`) |
//! | [`Abortable`](ErrorClass::Abortable) | a produce failed inside the transaction, offsets rejected for an old generation, anything unknown | aborts, replays the batch from the last committed offset, retries with backoff, until the task timeout |
//! | [`Fenced`](ErrorClass::Fenced) | `PRODUCER_FENCED`, `_FENCED`, `INVALID_PRODUCER_EPOCH` (also what a transaction timeout turns into) | drops the producer and gives the partitions up: the consumer rejoins the group, and whoever is assigned the partition fences the zombie and resumes from the committed offset |
//! | [`Fatal`](ErrorClass::Fatal) | any other error librdkafka marks fatal | the producer is unusable and the outcome unknown: fenced and reconciled with a fresh producer (at-least-once: as fenced) |
//!
//! Why "unknown" is abortable and not retriable: reporting a transaction as committed when
//! it was not would lose data silently, while aborting a transaction that could have
//! committed only costs its replay.
//!
//! Errors that reach the user ([`Error`]) say what failed and what to do about it.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// What a processor returns on failure: any error type, kept whole (with its `source()`
/// chain) until it reaches [`Error::Processor`] or, as text, a dead-letter header.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How the runtime reacts to a Kafka error; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Repeat the same call; the transaction is still usable.
    Retriable,
    /// Abort the transaction, rewind to the last committed offset, retry.
    Abortable,
    /// Another producer owns the transactional.id (or the group moved on): this one is a zombie.
    Fenced,
    /// The producer is unusable for another reason.
    Fatal,
}

impl ErrorClass {
    /// A short lowercase name, used in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Retriable => "retriable",
            ErrorClass::Abortable => "abortable",
            ErrorClass::Fenced => "fenced",
            ErrorClass::Fatal => "fatal",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::TransactionCoordinatorFenced
            | RDKafkaErrorCode::FencedInstanceId
    )
}

/// Classifies an error returned by a producer call or a delivery report.
pub fn classify(err: &KafkaError) -> ErrorClass {
    match err {
        KafkaError::Transaction(e) => {
            if is_fencing(e.code()) {
                ErrorClass::Fenced
            } else if e.is_fatal() {
                ErrorClass::Fatal
            } else if e.txn_requires_abort() {
                ErrorClass::Abortable
            } else if e.is_retriable() {
                ErrorClass::Retriable
            } else {
                ErrorClass::Abortable
            }
        }
        // rust-rdkafka's own flush before commit timed out: nothing is lost yet.
        KafkaError::Flush(_) => ErrorClass::Retriable,
        KafkaError::MessageProduction(code) if is_fencing(*code) => ErrorClass::Fenced,
        KafkaError::MessageProduction(RDKafkaErrorCode::Fatal) => ErrorClass::Fatal,
        _ => ErrorClass::Abortable,
    }
}

/// An error that stops a pipeline (or keeps it from starting).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid; the message names the option and the fix.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// No broker answered within the startup timeout, or the brokers refused the client's
    /// credentials (failed SASL authentication or TLS handshake: reported at once).
    #[error(
        "cannot reach Kafka at {servers} within {timeout:?}: {detail}. Check that the brokers \
         are running, that bootstrap.servers names their advertised listeners, and that the \
         security settings (security.protocol, sasl.*, ssl.*) and credentials match the listener"
    )]
    Unreachable {
        /// The bootstrap servers tried.
        servers: String,
        /// How long we waited at most (a refused authentication is reported sooner).
        timeout: Duration,
        /// librdkafka's reason, secrets redacted.
        detail: String,
    },
    /// Topics the pipeline reads or writes that do not exist on the cluster: inputs and the
    /// dead-letter topic are checked at start-up, an output topic when a produce to it fails.
    #[error(
        "topic(s) {topics:?} do not exist on {servers}; create them first (kafka-eos never \
         auto-creates the topics it reads or writes, apart from its changelogs)"
    )]
    UnknownTopics {
        /// The missing topics.
        topics: Vec<String>,
        /// The cluster asked.
        servers: String,
    },
    /// A Kafka call failed in a way the runtime could not recover from.
    #[error("{op} failed ({class}): {source}. {hint}")]
    Kafka {
        /// The operation, e.g. `"init_transactions for my-app:orders:3"`.
        op: String,
        /// Its classification.
        class: ErrorClass,
        /// librdkafka's error.
        source: Box<KafkaError>,
        /// What to do about it.
        hint: &'static str,
    },
    /// The processor failed on a record and the policy said stop.
    #[error(
        "processor failed on record {origin} after {attempts} attempt(s): {source}. Nothing \
         from that record's transaction was committed; fix the processor or the record (or \
         route failures to a dead-letter topic) and restart: processing resumes at that record"
    )]
    Processor {
        /// `topic/partition/offset` of the failing record.
        origin: String,
        /// How many times it was tried.
        attempts: u32,
        /// The processor's error of the last attempt, as it returned it (downcast it to
        /// your own error type), or a [`ProcessorPanic`](crate::processor::ProcessorPanic).
        source: BoxError,
    },
    /// A store's state cannot be restored (see
    /// [`StateError::Incompatible`](crate::state::StateError::Incompatible)).
    /// (Boxed: it is large, and every `Result` of the runtime carries an [`Error`].)
    #[error(transparent)]
    State(Box<crate::state::StateError>),
    /// A transaction could not be completed within the task timeout.
    #[error(
        "{what} did not complete within the task timeout ({timeout:?}); last error: {last}. \
         The pipeline stopped without committing the batch; restart it once the cluster is healthy"
    )]
    TaskTimeout {
        /// What was being attempted.
        what: String,
        /// The configured task timeout.
        timeout: Duration,
        /// The last error seen.
        last: String,
    },
    /// The pipeline's sink ([`crate::sink`]) failed in a way the runtime does not retry
    /// (refused rows, an unusable sink) or kept failing until the task timeout.
    #[error(
        "sink {op} failed ({class:?}): {source}. The batch's offsets were not stored in the \
         sink, so its records are read again once the pipeline restarts; fix the sink or the \
         rows, then restart"
    )]
    Sink {
        /// The call: `connect`, `on_assigned`, `write`.
        op: String,
        /// Its classification.
        class: crate::sink::SinkErrorClass,
        /// The sink's error, as it returned it.
        source: BoxError,
    },
    /// A bug or an unexpected state inside kafka-eos.
    #[error("internal error: {0} (please report this)")]
    Internal(String),
}

impl From<crate::state::StateError> for Error {
    fn from(e: crate::state::StateError) -> Error {
        Error::State(Box::new(e))
    }
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failed Kafka operation `op` (e.g. `"producing to orders"`), classified, with the
    /// hint of its class: for tools built on the library that call librdkafka themselves.
    pub fn kafka(op: impl Into<String>, err: KafkaError) -> Error {
        let class = classify(&err);
        Error::Kafka { op: op.into(), class, source: Box::new(err), hint: hint(class) }
    }
}

/// A hint for the user, per class, appended to [`Error::Kafka`] messages.
pub(crate) fn hint(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::Retriable => "Retried until the task timeout; check broker health and network",
        ErrorClass::Abortable => "The transaction was aborted and nothing from it is visible",
        ErrorClass::Fenced => {
            "Another producer took over this transactional.id: usually a rebalance or a stall \
             longer than transaction.timeout.ms; if it repeats, check that no two deployments \
             share the application id"
        }
        ErrorClass::Fatal => "The producer is unusable; check broker logs and ACLs",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode as C;

    #[test]
    fn produce_and_flush_errors_are_classified() {
        assert_eq!(classify(&KafkaError::Flush(C::OperationTimedOut)), ErrorClass::Retriable);
        assert_eq!(classify(&KafkaError::MessageProduction(C::ProducerFenced)), ErrorClass::Fenced);
        assert_eq!(classify(&KafkaError::MessageProduction(C::Fatal)), ErrorClass::Fatal);
        assert_eq!(classify(&KafkaError::MessageProduction(C::TopicAuthorizationFailed)), ErrorClass::Abortable);
        assert_eq!(classify(&KafkaError::Canceled), ErrorClass::Abortable);
    }
}
