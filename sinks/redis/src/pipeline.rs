//! [`RedisCounterSink`] as a pipeline's sink ([`kafka_eos::sink`]): effectively-once within
//! the TTL (or at-least-once, [`RedisCounterSink::without_dedup`]).
//!
//! A processor hands the sink [`Increment`]s; the rows of one input record become one
//! [`Event`] whose dedup id is the record's position ([`event_id`]), so a replayed record
//! is skipped as a whole while its dedup key lives.

use kafka_eos::sink::{Sink, SinkBatch, SinkErrorClass, SinkGuarantee};
use redis::aio::ConnectionLike;

use crate::{event_id, Event, Increment, RedisCounterSink, RedisSinkError};

impl kafka_eos::sink::SinkError for RedisSinkError {
    /// A lost connection or a timeout is retriable (the same events again are deduplicated);
    /// a refusal (`WRONGTYPE`, `NOTINT`, out of memory) stops the pipeline: the script
    /// applied nothing, and the batch is read again after a fix.
    fn class(&self) -> SinkErrorClass {
        match self {
            RedisSinkError::Redis { source, .. }
                if source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal() =>
            {
                SinkErrorClass::Retriable
            }
            RedisSinkError::Redis { .. } | RedisSinkError::InvalidBatch(_) => SinkErrorClass::Rejected,
        }
    }
}

/// The batch's rows as events: one per input record, in input order.
fn events(batch: &SinkBatch<Increment>) -> Vec<Event> {
    let mut events: Vec<Event> = Vec::new();
    let mut last = None;
    for r in &batch.rows {
        let at = (r.topic.as_str(), r.partition, r.offset);
        if last != Some(at) {
            events.push(Event::new(event_id(at.0, at.1, at.2)));
            last = Some(at);
        }
        if let Some(e) = events.last_mut() {
            e.increments.push(r.row.clone());
        }
    }
    events
}

impl<C: ConnectionLike + Send + Sync + 'static> Sink for RedisCounterSink<C> {
    type Row = Increment;
    type Error = RedisSinkError;

    fn guarantee(&self) -> SinkGuarantee {
        if self.dedup {
            SinkGuarantee::EffectivelyOnce { window: self.ttl }
        } else {
            SinkGuarantee::AtLeastOnce
        }
    }

    async fn on_assigned(&mut self, partitions: &[(kafka_eos::Topic, i32)]) -> Result<Vec<Option<i64>>, Self::Error> {
        Ok(vec![None; partitions.len()])
    }

    async fn write(&mut self, batch: &SinkBatch<Increment>) -> Result<(), Self::Error> {
        let events = events(batch);
        if self.dedup {
            let applied = self.apply(&events).await?;
            if applied.duplicates > 0 {
                tracing::info!(duplicates = applied.duplicates, "replayed records skipped by their dedup keys");
            }
            Ok(())
        } else {
            self.apply_without_dedup(&events).await
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_eos::sink::{PartitionRange, SinkRow};
    use kafka_eos::Topic;

    use super::*;

    #[test]
    fn one_event_per_input_record_in_order() {
        let t = Topic::new("views");
        let row =
            |offset, key: &str| SinkRow { topic: t.clone(), partition: 1, offset, row: Increment::new(key, "f", 1) };
        let batch = SinkBatch {
            partitions: vec![PartitionRange { topic: t.clone(), partition: 1, first_offset: 4, next_offset: 7 }],
            rows: vec![row(4, "a"), row(4, "b"), row(6, "a")],
        };
        let got = events(&batch);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].id, "views/1/4");
        assert_eq!(got[0].increments.len(), 2);
        assert_eq!(got[1].id, "views/1/6");
    }
}
