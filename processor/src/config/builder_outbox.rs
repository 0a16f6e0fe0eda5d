//! The builder's outbox sink: an exactly-once sink beside state stores
//! ([`PipelineBuilder::outbox_sink`]).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::PipelineBuilder;
use crate::error::BoxError;
use crate::processor::driver::ProcessorFactory;
use crate::processor::FnProcessor;
use crate::sink::erased::{AnyRow, SinkFactory};
use crate::sink::outbox::OutboxSpec;
use crate::sink::{Sink, SinkHandle};

impl PipelineBuilder {
    /// Declares the pipeline's sink behind an outbox topic, for an exactly-once sink (the
    /// PostgreSQL sink) in a pipeline with state stores, which [`sink`](Self::sink) refuses
    /// (the [`sink`](crate::sink) module says why). The processor hands over records of its
    /// own type `W` (serde: they are encoded with bincode) with
    /// [`Context::sink`](crate::Context::sink); they are written to the topic
    /// `<application-id>-<name>-outbox` in the batch's transaction, and an applier started
    /// with the pipeline — group `<application-id>-<name>-outbox` — turns each into the
    /// sink's row with `to_row` and writes it to the sink `connect` makes, the outbox
    /// offsets stored with the rows. The topic is created at start-up with the input's
    /// partition count and the changelogs' replication. `docs/sinks.md` (*Beside state: the
    /// outbox*) shows it with the PostgreSQL sink.
    ///
    /// Exactly once from input record to row under the exactly-once guarantees (refused
    /// under at-least-once, where [`sink`](Self::sink) applies rows directly). The rows reach
    /// the sink one applier batch after their input's commit; a pipeline that stops leaves
    /// the rest to its next start. At most one sink per pipeline, this or `sink`.
    ///
    /// The sink must be exactly-once ([`SinkGuarantee::ExactlyOnce`](crate::sink::SinkGuarantee::ExactlyOnce)):
    /// the applier reads the outbox at-least-once, and only the outbox offsets the sink stores
    /// with its rows make each row land once. The guarantee is the connected instance's
    /// ([`Sink::guarantee`]), so another sink is refused at the applier's first connect, before
    /// it applies a row: the pipeline stops with [`Error::Config`](crate::Error::Config).
    pub fn outbox_sink<W, S, F, Fut, T>(&mut self, name: impl AsRef<str>, connect: F, to_row: T) -> SinkHandle<W>
    where
        W: Serialize + DeserializeOwned + Send + 'static,
        S: Sink,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<S, S::Error>> + Send + 'static,
        T: Fn(W) -> S::Row + Send + Sync + 'static,
    {
        let encode = Arc::new(|row: &AnyRow| -> Result<Vec<u8>, BoxError> {
            let row = row.downcast_ref::<W>().ok_or("a row of another type than the outbox's")?;
            Ok(bincode::serialize(row)?)
        });
        let (to_row, rows) = (Arc::new(to_row), SinkHandle::<S::Row>::new());
        let apply = FnProcessor(move |ctx: &mut crate::Context<'_>, record: &crate::InputRecord| {
            let written: W = bincode::deserialize(record.value.as_deref().unwrap_or_default())
                .map_err(|e| format!("an outbox record that is not of the outbox's row type: {e}"))?;
            ctx.sink(&rows, (*to_row)(written));
            Ok(())
        });
        self.outboxes.push(OutboxSpec {
            name: name.as_ref().to_string(),
            encode,
            applier: ProcessorFactory::new(apply).named("outbox applier"),
            sink: crate::sink::outbox::exactly_once_only(name.as_ref(), SinkFactory::new(connect)),
        });
        SinkHandle::new()
    }
}
