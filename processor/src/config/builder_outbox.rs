//! The builder's outbox sink: an exactly-once sink beside state stores
//! ([`PipelineBuilder::outbox_sink`]).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::PipelineBuilder;
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
    /// partition count and the changelogs' replication.
    ///
    /// `docs/sinks.md` (*Beside state: the outbox*) shows it with the PostgreSQL sink.
    ///
    /// Exactly once from input record to row under the exactly-once guarantees (refused
    /// under at-least-once, where [`sink`](Self::sink) applies rows directly). The rows reach
    /// the sink one applier batch after their input's commit; a pipeline that stops leaves
    /// the rest to its next start. At most one sink per pipeline, this or `sink`.
    pub fn outbox_sink<W, S, F, Fut, T>(&mut self, name: impl AsRef<str>, connect: F, to_row: T) -> SinkHandle<W>
    where
        W: Serialize + DeserializeOwned + Send + 'static,
        S: Sink,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<S, S::Error>> + Send + 'static,
        T: Fn(W) -> S::Row + Send + Sync + 'static,
    {
        let (spec, handle) = OutboxSpec::new(name.as_ref(), connect, to_row);
        self.outboxes.push(spec);
        handle
    }
}
