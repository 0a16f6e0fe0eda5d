//! [`PostgresSink`] as a pipeline's sink ([`kafka_eos::sink`]): exactly-once.
//!
//! ```text
//! on assignment   on_assigned  -> claim: epoch + stored next offset per partition
//! per batch       write        -> write_batch: BEGIN; offsets UPDATE … AND epoch = ours AND
//!                                 stored <= first; batch upsert; COMMIT (already applied: success)
//! after a failure recover      -> reconnect if the connection is gone (epochs kept: no claim)
//! on revocation   on_revoked   -> release the epochs
//! ```

use kafka_eos::sink::{Sink, SinkBatch, SinkErrorClass, SinkGuarantee};
use kafka_eos::Topic;

use crate::{PostgresSink, Row, SinkError, TopicPartition};

fn tps(partitions: &[(Topic, i32)]) -> Vec<TopicPartition> {
    partitions.iter().map(|(t, p)| TopicPartition::new(t.as_str(), *p)).collect()
}

impl kafka_eos::sink::SinkError for SinkError {
    /// Server errors that say "try again" (serialization failure, deadlock, shutdown, too
    /// many connections, a broken connection) are retriable; other server errors refuse the
    /// rows (constraint, type), so the pipeline stops rather than skip them.
    fn class(&self) -> SinkErrorClass {
        match self {
            SinkError::Fenced { .. } => SinkErrorClass::Fenced,
            SinkError::CommitOutcomeUnknown(_) => SinkErrorClass::OutcomeUnknown,
            SinkError::Postgres { source, .. } => match source.code().map(|c| c.code()) {
                None => SinkErrorClass::Retriable,
                Some(code) if ["40", "53", "57", "08"].iter().any(|class| code.starts_with(class)) => {
                    SinkErrorClass::Retriable
                }
                Some(_) => SinkErrorClass::Rejected,
            },
            SinkError::InvalidBatch(_) => SinkErrorClass::Rejected,
            SinkError::Overlap { .. } | SinkError::NotClaimed(_) | SinkError::Schema(_) => SinkErrorClass::Fatal,
        }
    }
}

impl Sink for PostgresSink {
    type Row = Row;
    type Error = SinkError;

    fn guarantee(&self) -> SinkGuarantee {
        SinkGuarantee::ExactlyOnce
    }

    async fn on_assigned(&mut self, partitions: &[(Topic, i32)]) -> Result<Vec<Option<i64>>, SinkError> {
        let wanted = tps(partitions);
        let claims = self.claim(&wanted).await?;
        Ok(wanted.iter().map(|tp| claims.iter().find(|c| c.tp == *tp).and_then(|c| c.next_offset)).collect())
    }

    async fn write(&mut self, batch: &SinkBatch<Row>) -> Result<(), SinkError> {
        let offsets: Vec<(TopicPartition, std::ops::Range<i64>)> = batch
            .partitions
            .iter()
            .map(|r| (TopicPartition::new(r.topic.as_str(), r.partition), r.first_offset..r.next_offset))
            .collect();
        self.write_rows(batch.rows.iter().map(|r| &r.row), &offsets).await.map(|_| ())
    }

    async fn recover(&mut self) -> Result<(), SinkError> {
        self.reconnect().await
    }

    async fn on_revoked(&mut self, partitions: &[(Topic, i32)]) -> Result<(), SinkError> {
        self.release(&tps(partitions));
        Ok(())
    }
}
