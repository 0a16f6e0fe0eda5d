//! Errors, and the classification that decides what the runtime does with a Kafka error
//! (the rules are on [`ErrorClass`]). Exported at the crate root.
//!
//! Errors that reach the user ([`Error`]) say what failed and what to do about it. A
//! failed Kafka call carries a [`KafkaError`]: its code, its name and its class, with
//! librdkafka's own error as its `source()`.

use std::time::Duration;

use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};

/// What a processor returns on failure: any error type, kept whole (with its `source()`
/// chain) until it reaches [`Error::Processor`] or, as text, a dead-letter header.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// How the runtime reacts to a Kafka error.
///
/// Every Kafka failure inside the transaction cycle is put in one of five classes; the class
/// alone decides the reaction, so the reaction is the same wherever in the cycle the error
/// comes from:
///
/// | class | examples | what the runtime does |
/// |---|---|---|
/// | [`Retriable`](ErrorClass::Retriable) | request timed out, coordinator moving, brokers briefly down | repeats the same call with backoff, until the task timeout — except in the commit step (`send_offsets_to_transaction`, `commit_transaction`), whose outcome is then unknown: fenced and reconciled with a fresh producer (`runtime/reconcile.rs`) |
/// | [`Abortable`](ErrorClass::Abortable) | a produce failed inside the transaction, offsets rejected for an old generation, anything unknown | aborts, replays the batch from the last committed offset, retries with backoff, until the task timeout |
/// | [`Fenced`](ErrorClass::Fenced) | `PRODUCER_FENCED`, `_FENCED`, `INVALID_PRODUCER_EPOCH` (also what a transaction timeout turns into); per consumer, offsets refused with `UNKNOWN_MEMBER_ID` or `FENCED_INSTANCE_ID` (the group expired this member) | drops the producer and gives the partitions up: the consumer rejoins the group, and whoever is assigned the partition fences the zombie and resumes from the committed offset |
/// | [`NotAuthorized`](ErrorClass::NotAuthorized) | `TOPIC_AUTHORIZATION_FAILED`, `GROUP_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`, `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `DELEGATION_TOKEN_AUTHORIZATION_FAILED`, from any call | aborts the open transaction and stops the pipeline with [`Error::NotAuthorized`], which names the missing ACL |
/// | [`Fatal`](ErrorClass::Fatal) | any other error librdkafka marks fatal | the producer is unusable and the outcome unknown: fenced and reconciled with a fresh producer (at-least-once: as fenced) |
///
/// Why "unknown" is abortable and not retriable: reporting a transaction as committed when
/// it was not would lose data silently, while aborting a transaction that could have
/// committed only costs its replay.
///
/// Why a refused authorization is a class of its own: it is not a fencing (no one else owns
/// anything) and not fatal (the broker refused before acting, so nothing needs
/// reconciling), and no retry, replay or fresh producer can succeed until an operator grants
/// the ACL. Every partition would hit the same refusal, so the pipeline stops at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Repeat the same call; the transaction is still usable.
    Retriable,
    /// Abort the transaction, rewind to the last committed offset, retry.
    Abortable,
    /// Another producer owns the transactional.id (or the group moved on): this one is a zombie.
    Fenced,
    /// The principal lacks an ACL: stop the pipeline, naming it.
    NotAuthorized,
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
            ErrorClass::NotAuthorized => "not_authorized",
            ErrorClass::Fatal => "fatal",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

///
/// `UNKNOWN_MEMBER_ID` and `FENCED_INSTANCE_ID` reach a transaction only as the refusal of
/// its offsets (`TxnOffsetCommit`, per consumer): the group expired this member (its session
/// timed out) or another instance took its `group.instance.id`. No replay can succeed as
/// this member, and its partitions are another's: that is a fencing. (A generation that
/// moved on, `ILLEGAL_GENERATION`, is not: the member is still in the group, and a replay
/// reads the metadata afresh.)
fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::TransactionCoordinatorFenced
            | RDKafkaErrorCode::FencedInstanceId
            | RDKafkaErrorCode::UnknownMemberId
    )
}

/// Classifies an error returned by a Kafka call or a delivery report.
pub(crate) fn classify(err: &RdKafkaError) -> ErrorClass {
    // Before librdkafka's own verdicts: it marks a transactional producer refused its
    // transactional id fatal, and a refused produce abortable.
    if refusal_code(err).is_some() {
        return ErrorClass::NotAuthorized;
    }
    match err {
        RdKafkaError::Transaction(e) => {
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
        RdKafkaError::Flush(_) => ErrorClass::Retriable,
        RdKafkaError::MessageProduction(code) if is_fencing(*code) => ErrorClass::Fenced,
        RdKafkaError::MessageProduction(RDKafkaErrorCode::Fatal) => ErrorClass::Fatal,
        _ => ErrorClass::Abortable,
    }
}

/// A failed Kafka call: librdkafka's error code and name, and how the runtime classed it.
/// librdkafka's error itself is the `source()` (its type is not part of this crate's API,
/// so that a new librdkafka binding is no breaking change).
#[derive(Debug, Clone)]
pub struct KafkaError {
    inner: Box<RdKafkaError>,
    class: ErrorClass,
}

impl KafkaError {
    /// `err`, classified by [`classify`].
    pub(crate) fn new(err: RdKafkaError) -> KafkaError {
        let class = classify(&err);
        KafkaError { inner: Box::new(err), class }
    }

    /// `err`, with the class the caller decided on (a consumer error the runtime cannot
    /// go on after is fatal whatever its code).
    pub(crate) fn with_class(err: RdKafkaError, class: ErrorClass) -> KafkaError {
        KafkaError { inner: Box::new(err), class }
    }

    /// How the runtime reacts to it (see [`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// librdkafka's error code: a Kafka protocol error code (positive, e.g. 90 for
    /// `PRODUCER_FENCED`) or one of librdkafka's own (negative, e.g. -185 for
    /// `_TIMED_OUT`). `None` for a failure without a code (a client that could not be
    /// created, a cancelled call).
    pub fn code(&self) -> Option<i32> {
        match &*self.inner {
            RdKafkaError::AdminOp(code) => Some(*code as i32),
            e => e.rdkafka_error_code().map(|c| c as i32),
        }
    }

    /// librdkafka's name of the [`code`](Self::code), e.g. `"PRODUCER_FENCED"` or
    /// `"_TIMED_OUT"` (librdkafka's own errors start with `_`).
    pub fn code_name(&self) -> Option<&'static str> {
        let code = rdkafka::types::RDKafkaRespErr::try_from(self.code()?).ok()?;
        // SAFETY: rd_kafka_err2name returns a pointer into librdkafka's static table of
        // names, valid and unchanged for the life of the process.
        let name = unsafe { std::ffi::CStr::from_ptr(rdkafka::bindings::rd_kafka_err2name(code)) };
        name.to_str().ok()
    }
}

impl std::fmt::Display for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::error::Error for KafkaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.inner)
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
    /// The brokers refused a request for want of an ACL: the principal, the ACL to grant,
    /// what the pipeline was doing, and the `kafka-acls` command that grants it. Nothing is
    /// retried: the pipeline stops, its open transaction aborted, and resumes from its last
    /// commit once restarted with the ACL. (Boxed, as [`Error::State`].)
    #[error(transparent)]
    NotAuthorized(Box<NotAuthorized>),
    /// A Kafka call failed in a way the runtime could not recover from.
    #[error("{op} failed ({class}): {source}. {hint}")]
    Kafka {
        /// The operation, e.g. `"init_transactions for my-app:orders:3"`.
        op: String,
        /// Its classification (the same as `source.class()`).
        class: ErrorClass,
        /// The failure: its code, its name, and librdkafka's error as its `source()`.
        source: KafkaError,
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
    /// A partition's position kept going back below the group's committed offset (librdkafka's
    /// `auto.offset.reset` on a fetch out of range or a truncated log): its committed offset
    /// lies outside the partition's log. Nothing below the committed offset was processed.
    #[error(
        "partition {partition} was read from offset {offset}, below its committed offset \
         {committed}, after every rewind: the committed offset lies outside the partition's \
         log (the topic was deleted and created again, or the cluster lost records). Nothing \
         below the committed offset was processed. To read the partition from its start, reset \
         the group's offsets (kafka-consumer-groups --reset-offsets --group <application id> \
         --topic <topic> --to-earliest --execute) and restart"
    )]
    OffsetReset {
        /// `topic-partition`.
        partition: String,
        /// Where its records started.
        offset: i64,
        /// The group's committed offset for it.
        committed: i64,
    },
    /// A partition's records were deleted before the pipeline processed them: its log now
    /// starts past the offset the pipeline resumes it from (retention ran out while the
    /// pipeline was stopped or behind, or the records were deleted). Nothing past the gap
    /// was processed.
    #[error(
        "records {resume}..{log_start} of partition {partition} were deleted before this pipeline \
         processed them: the partition's log now starts at {log_start}, past the offset it resumes \
         from ({resume}), so they are lost to it (a topic's retention ran out while the pipeline was \
         stopped or behind, or records were deleted). Nothing past them was processed. Give the \
         topic a retention longer than the pipeline may lag; to go on from the log's start \
         without them, set PipelineBuilder::skip_deleted_records(true) and restart"
    )]
    RecordsDeleted {
        /// `topic-partition`.
        partition: String,
        /// The offset the pipeline resumes the partition from (its committed offset, or the
        /// one its exactly-once sink stored).
        resume: i64,
        /// Where the partition's log starts now.
        log_start: i64,
    },
    /// A partition's state stores hold committed changes, but the group has no committed
    /// offset for the partition (nor for any input partition of the same number): the
    /// group's offsets were deleted, or expired while the pipeline was stopped. Nothing was
    /// processed: from the log's start, every record would apply a second time to the
    /// restored state and send its outputs again.
    #[error(
        "partition {partition} has state in its changelogs ({changes} changes restored) but the group \
         has no committed offset for it: the group's offsets were deleted, or expired while the \
         pipeline was stopped (offsets.retention.minutes, 7 days by default, counted from when the \
         group became empty). Processing it from its start would apply every record to that state a \
         second time. Nothing was processed. To go on where it stopped, set the group's offsets \
         (kafka-consumer-groups --reset-offsets --group <application id> --topic <topic>:<partition> \
         --to-offset <offset> --execute); to start over, delete the application's changelog topics \
         (or use a new application id); then restart"
    )]
    StateWithoutOffsets {
        /// `topic-partition` of each input topic with this partition number.
        partition: String,
        /// The changelog records read into the partition's state (0: it came from a local
        /// or standby copy).
        changes: u64,
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
    /// hint of its class: for the test kit and the CLI, which call librdkafka themselves
    /// (feature `test-hooks`, outside semver: its argument is rdkafka's type).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn kafka(op: impl Into<String>, err: RdKafkaError) -> Error {
        let source = KafkaError::new(err);
        let hint = hint(source.class);
        Error::kafka_failure(op, source, hint)
    }

    /// A failed Kafka operation `op`, with what to do about it.
    pub(crate) fn kafka_failure(op: impl Into<String>, source: KafkaError, hint: &'static str) -> Error {
        Error::Kafka { op: op.into(), class: source.class, source, hint }
    }
}

/// A hint for the user, per class, appended to [`Error::Kafka`] messages.
pub(crate) fn hint(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::Retriable => "Retried until the task timeout; check broker health and network",
        ErrorClass::Abortable => "The transaction was aborted and nothing from it is visible",
        ErrorClass::Fenced => {
            "Another owner took over: a producer with this transactional.id, or (per consumer) \
             the group, which expired this member; usually a rebalance or a stall longer than \
             transaction.timeout.ms or session.timeout.ms; if it repeats, check that no two \
             deployments share the application id"
        }
        ErrorClass::NotAuthorized => {
            "The principal lacks an ACL: grant it and restart (Pipeline::acls() lists every ACL the pipeline needs)"
        }
        ErrorClass::Fatal => "The producer is unusable; check broker logs and ACLs",
    }
}

/// The code of `e` if it is a refusal (rust-rdkafka's own `rdkafka_error_code` leaves an
/// admin call's code out).
pub(crate) fn refusal_code(e: &RdKafkaError) -> Option<RDKafkaErrorCode> {
    match e {
        RdKafkaError::AdminOp(code) => Some(*code),
        e => e.rdkafka_error_code(),
    }
    .filter(|code| is_refusal(*code))
}

/// Whether `code` is a broker's refusal for want of an ACL.
pub(crate) fn is_refusal(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
            | RDKafkaErrorCode::DelegationTokenAuthorizationFailed
    )
}

/// A request the brokers refused for want of an ACL ([`Error::NotAuthorized`]): whom they
/// refused, the ACL that would have allowed it, and how to grant it. Its `source()` is the
/// refusal as librdkafka reported it, when it came from a call (a start-up check that reads
/// the principal's operations has none). Never holds a secret.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{principal} is not authorized to {} {} {:?} ({during}). The pipeline stopped; what it had not \
     committed is read again once it restarts. Grant the ACL ({} pattern) and restart it: {command} \
     (Pipeline::acls() lists every ACL the pipeline needs)",
    acl.operation,
    acl.resource_type,
    acl.name,
    acl.pattern_type
)]
#[non_exhaustive]
pub struct NotAuthorized {
    /// Whom the brokers refused: `User:<sasl.username>` under SASL/PLAIN or SCRAM,
    /// `User:ANONYMOUS` without authentication, else a description of the principal the
    /// brokers derive (from a TLS certificate, a Kerberos or an OAuth identity).
    pub principal: String,
    /// The ACL to grant: the resource (its type, its name or prefix, the pattern) and the
    /// operation refused.
    pub acl: crate::acl::Acl,
    /// What the pipeline was doing.
    pub during: String,
    /// The `kafka-acls` command that grants it ([`Acl::kafka_acls_command`](crate::acl::Acl::kafka_acls_command); with a
    /// placeholder principal, `User:<principal>`, when the client's settings do not name
    /// it).
    pub command: String,
    #[source]
    pub(crate) source: Option<KafkaError>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode as C;

    #[test]
    fn produce_and_flush_errors_are_classified() {
        assert_eq!(classify(&RdKafkaError::Flush(C::OperationTimedOut)), ErrorClass::Retriable);
        assert_eq!(classify(&RdKafkaError::MessageProduction(C::ProducerFenced)), ErrorClass::Fenced);
        assert_eq!(classify(&RdKafkaError::MessageProduction(C::Fatal)), ErrorClass::Fatal);
        assert_eq!(classify(&RdKafkaError::Canceled), ErrorClass::Abortable);
    }

    #[test]
    fn a_kafka_error_names_its_code_and_keeps_librdkafkas_error_as_its_source() {
        let e = KafkaError::new(RdKafkaError::MessageProduction(C::ProducerFenced));
        assert_eq!((e.class(), e.code(), e.code_name()), (ErrorClass::Fenced, Some(90), Some("PRODUCER_FENCED")));
        let source = std::error::Error::source(&e).expect("librdkafka's error");
        assert_eq!(source.to_string(), e.to_string());
        assert!(source.downcast_ref::<RdKafkaError>().is_some());

        let local = KafkaError::new(RdKafkaError::Flush(C::OperationTimedOut));
        assert_eq!((local.code(), local.code_name()), (Some(-185), Some("_TIMED_OUT")));
        let none = KafkaError::with_class(RdKafkaError::Canceled, ErrorClass::Fatal);
        assert_eq!((none.class(), none.code(), none.code_name()), (ErrorClass::Fatal, None, None));

        let err = Error::kafka_failure("commit_transaction for app:t:0", e, hint(ErrorClass::Fenced));
        assert!(matches!(&err, Error::Kafka { class: ErrorClass::Fenced, source, .. } if source.code() == Some(90)));
    }
}
