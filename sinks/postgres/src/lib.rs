//! # kafka-eos-postgres: an exactly-once PostgreSQL sink
//!
//! Kafka → PostgreSQL exactly-once *without a Kafka transaction*: each batch's rows and the
//! batch's input offsets are written in **one database transaction**, and on assignment a
//! partition resumes from the offset stored in the database, not from the consumer group's.
//! A batch is then either entirely in the database, offsets included, or not at all; a
//! replay after a crash starts exactly after the last committed batch.
//!
//! ```text
//! on assignment   claim(partitions)            -> epoch, next_offset per partition; seek there
//! per batch       write_batch(rows, first..next per partition)
//!                     -> BEGIN; UPDATE offsets SET next … AND epoch = ours AND stored <= first;
//!                        INSERT … ON CONFLICT (key) DO UPDATE; COMMIT
//!                        (or, the UPDATE matching nothing in our epoch with the stored offset
//!                        at `next`: ROLLBACK, already applied)
//! on revocation   release(partitions)
//! ```
//!
//! - **Rows** are upserted by the key the user names ([`TableSpec`]), so a batch applied
//!   twice leaves the table as applied once — which is also what makes the combined
//!   design in `docs/sinks.md` safe. The whole batch is one statement (`UNNEST` of one
//!   array per column), see [`upsert`].
//! - **Offsets** live in `kafka_eos_offsets (group_id, topic, partition) → next_offset,
//!   epoch`. A batch is written only if the stored offset is at or before its first input
//!   offset, so each input record's rows are applied at most once, and a retried batch that
//!   had committed is recognised and not written again: upserts that add are exact too.
//! - **Fencing.** After a rebalance two instances can both believe they own a partition
//!   (the old one has not noticed it was revoked: long GC pause, network partition). Each
//!   [`PostgresSink::claim`] increments the partition's `epoch` in the database and every
//!   batch's offset `UPDATE` is conditional on the epoch its sink holds, in the batch's own
//!   transaction. A stale writer's batch therefore matches no row, is rolled back and fails
//!   with [`SinkError::Fenced`]: it can neither add rows nor move the offsets back.
//!
//!   Why an epoch owned by the database rather than Kafka's group generation: the database
//!   is the source of truth for offsets, so the order of owners should be decided where the
//!   offsets are written, by the same row lock; it needs no broker round trip, works with
//!   manual assignment and with both rebalance protocols (KIP-848 has no group-wide
//!   generation to compare), and a claim that waits on the old owner's row lock also reads
//!   the old owner's final offsets. The cost is one write per partition per assignment.
//!   A fenced sink must stop writing that partition until Kafka assigns it again (then it
//!   claims anew); it must never re-claim on its own, or two instances would fence each
//!   other in turn.
//!
//! # Why tokio-postgres
//!
//! tokio-postgres (the `postgres` family, maintained by sfackler) is the lower layer that
//! sqlx's and diesel-async's PostgreSQL drivers also weigh against. It was chosen for what
//! this sink needs: **pipelining** on one connection — the offset updates and the batch
//! upsert of a transaction are sent without waiting for each other's replies; explicit
//! prepared statements (prepared once per sink) in the **binary protocol**, with a
//! [`ToSql`](tokio_postgres::types::ToSql) trait open enough to stream a batch column as
//! one typed array parameter; and errors that expose SQLSTATE and tell a server error
//! from a broken connection, which is how [`SinkError::CommitOutcomeUnknown`] is told from
//! a refused commit. sqlx would add a pool, macros whose checked queries need a database at
//! build time, and no pipelining on a connection; none of it helps here. Connection
//! pooling, if wanted, is a `deadpool-postgres` away (its clients deref to this `Client`).
//!
//! TLS is not built in: [`connect`] uses `NoTls`; pass a client connected with
//! `postgres-native-tls` or `tokio-postgres-rustls` to [`PostgresSink::new`] instead.
#![warn(missing_docs)]

mod error;
mod pipeline;
mod sink;
pub mod upsert;

pub use error::SinkError;
pub use sink::{Claim, PostgresSink, Written, DEFAULT_OFFSETS_TABLE};
pub use tokio_postgres;
pub use upsert::{Row, TableSpec, UpsertTable, Value};

/// A Kafka partition, as the sink stores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`/`partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition { topic: topic.into(), partition }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// Connects without TLS and drives the connection on a Tokio task (which ends, logging the
/// cause, when the connection breaks; the client's calls then fail with "connection
/// closed"). `config` is a libpq key/value string or a `postgresql://` URL.
pub async fn connect(config: &str) -> Result<tokio_postgres::Client, SinkError> {
    let (client, connection) = tokio_postgres::connect(config, tokio_postgres::NoTls)
        .await
        .map_err(SinkError::pg("connecting to PostgreSQL"))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "PostgreSQL connection ended");
        }
    });
    Ok(client)
}
