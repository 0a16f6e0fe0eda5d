//! Errors of the PostgreSQL sink, classified by what the runtime must do next.

use crate::TopicPartition;

/// Everything the sink can fail with. The runtime's reaction depends on the variant:
///
/// | variant | what happened to the batch | what the runtime does |
/// |---|---|---|
/// | [`Fenced`](SinkError::Fenced) | rolled back | stop the partition: another instance owns it |
/// | [`Overlap`](SinkError::Overlap) | rolled back | stop: the partition was read from elsewhere than its stored offset |
/// | [`NotClaimed`](SinkError::NotClaimed) | nothing sent | a bug: write before [`claim`](crate::PostgresSink::claim) |
/// | [`CommitOutcomeUnknown`](SinkError::CommitOutcomeUnknown) | committed or not | reconnect and write the same batch again (it is [`AlreadyApplied`](crate::Written::AlreadyApplied) if it committed) |
/// | [`Postgres`](SinkError::Postgres) | rolled back (or never begun) | retry the batch, or apply the error policy if the database refuses it (constraint, type) |
/// | [`Schema`](SinkError::Schema) / [`InvalidBatch`](SinkError::InvalidBatch) | nothing sent | fix the configuration / the processor |
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The partition was claimed by a newer owner (a higher epoch) since this sink claimed it.
    /// The transaction was rolled back: neither its rows nor its offsets were written.
    #[error("fenced: {tp} was claimed by a newer owner (epoch {current:?}) after this sink's epoch {ours}")]
    Fenced {
        /// The partition.
        tp: TopicPartition,
        /// The epoch this sink holds.
        ours: i64,
        /// The epoch in the database, if the row still exists.
        current: Option<i64>,
    },
    /// The stored next offset of a partition lies past the batch's first offset of it, and
    /// the batch is not one already applied (the stored offset is inside the batch's range,
    /// or another partition of the batch is not written yet): writing it would apply some
    /// records a second time. The transaction was rolled back.
    #[error(
        "{tp}: the batch's input offsets {first}..{next} overlap what is stored (next offset {stored}); \
         refused, as writing it would apply records a second time"
    )]
    Overlap {
        /// The partition.
        tp: TopicPartition,
        /// The stored next offset.
        stored: i64,
        /// The batch's first input offset of the partition.
        first: i64,
        /// The batch's next offset of the partition (its last input offset + 1).
        next: i64,
    },
    /// The batch names a partition this sink has not claimed.
    #[error("{0} is not claimed by this sink: call claim() on assignment before writing")]
    NotClaimed(TopicPartition),
    /// The connection broke while COMMIT was in flight: the transaction may or may not have
    /// committed. Writing the same batch again resolves it: the write is
    /// [`AlreadyApplied`](crate::Written::AlreadyApplied) if it had committed. (The stored
    /// offsets tell too: they equal the batch's next offsets exactly when it committed.)
    #[error("the outcome of the commit is unknown (connection lost during COMMIT): {0}")]
    CommitOutcomeUnknown(#[source] tokio_postgres::Error),
    /// A statement failed; the transaction is rolled back.
    #[error("{context}: {}", describe(.source))]
    Postgres {
        /// What was being done.
        context: String,
        /// The client's error (a `DbError` with SQLSTATE for server-side errors).
        #[source]
        source: tokio_postgres::Error,
    },
    /// The target table does not fit the configuration.
    #[error("table configuration: {0}")]
    Schema(String),
    /// The batch cannot be sent as given.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

/// The client's error, with the server's SQLSTATE and message when the server raised it
/// (tokio-postgres displays those only as "db error").
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => e.to_string(),
    }
}

impl SinkError {
    pub(crate) fn pg(context: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> SinkError {
        let context = context.into();
        move |source| SinkError::Postgres { context, source }
    }

    /// Whether another owner fenced this sink.
    pub fn is_fenced(&self) -> bool {
        matches!(self, SinkError::Fenced { .. })
    }

    /// The server's SQLSTATE, for errors the server raised.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            SinkError::Postgres { source, .. } | SinkError::CommitOutcomeUnknown(source) => {
                source.code().map(|c| c.code())
            }
            _ => None,
        }
    }
}
