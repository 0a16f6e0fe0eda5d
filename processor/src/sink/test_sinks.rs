//! Sinks for the crate's own tests: they never fail and never connect anywhere.

use super::{Sink, SinkBatch, SinkError, SinkErrorClass, SinkGuarantee};
use crate::record::Topic;

/// An error no call returns.
#[derive(Debug, thiserror::Error)]
#[error("never")]
pub(crate) struct Never;

impl SinkError for Never {
    fn class(&self) -> SinkErrorClass {
        SinkErrorClass::Fatal
    }
}

/// An at-least-once sink of `i64` rows that stores nothing.
pub(crate) struct Ledger;

impl Sink for Ledger {
    type Row = i64;
    type Error = Never;
    fn guarantee(&self) -> SinkGuarantee {
        SinkGuarantee::AtLeastOnce
    }
    async fn on_assigned(&mut self, partitions: &[(Topic, i32)]) -> Result<Vec<Option<i64>>, Never> {
        Ok(vec![None; partitions.len()])
    }
    async fn write(&mut self, _batch: &SinkBatch<i64>) -> Result<(), Never> {
        Ok(())
    }
}

/// An exactly-once sink of `i64` rows that stores nothing (every partition starts at the
/// group's committed offset).
pub(crate) struct Stored;

impl Sink for Stored {
    type Row = i64;
    type Error = Never;
    fn guarantee(&self) -> SinkGuarantee {
        SinkGuarantee::ExactlyOnce
    }
    async fn on_assigned(&mut self, partitions: &[(Topic, i32)]) -> Result<Vec<Option<i64>>, Never> {
        Ok(vec![None; partitions.len()])
    }
    async fn write(&mut self, _batch: &SinkBatch<i64>) -> Result<(), Never> {
        Ok(())
    }
}
