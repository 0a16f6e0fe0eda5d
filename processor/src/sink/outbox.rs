//! An exactly-once sink beside state: the outbox.
//!
//! A pipeline with state stores cannot write an exactly-once sink in its own cycle: the
//! changelogs commit with the Kafka transaction, before the sink's offsets (see
//! [`crate::sink`]). So the rows take a detour through Kafka. The stateful pipeline writes
//! each row, encoded, to the outbox topic `<application-id>-<name>-outbox`, on its input
//! record's partition, inside the batch's transaction: rows, outputs, state changes and
//! offsets commit or abort together. An applier — a stateless pipeline of its own, group
//! `<application-id>-<name>-outbox`, started and stopped with the stateful one — reads the
//! outbox `read_committed` and hands the rows to the sink, which stores the outbox offsets
//! with the rows in one database transaction: the sink's exactly-once path, unchanged. A
//! row reaches the database once per committed input record, whatever crashes in between;
//! it arrives later than a sink in the cycle would write it, by the applier's batch.

use std::sync::Arc;

use super::erased::{AnyRow, SinkFactory};
use super::SinkGuarantee;
use crate::error::{BoxError, Error};
use crate::processor::driver::ProcessorFactory;
use crate::record::{InputRecord, OutputRecord, Topic};

/// Encodes a row the processor handed over into an outbox record's value.
pub(crate) type Encode = dyn Fn(&AnyRow) -> Result<Vec<u8>, BoxError> + Send + Sync;

/// A declared outbox: its name, how its rows are encoded, and the applier's processor
/// (outbox record → the sink's row) and sink.
#[derive(Clone)]
pub(crate) struct OutboxSpec {
    pub(crate) name: String,
    pub(crate) encode: Arc<Encode>,
    pub(crate) applier: ProcessorFactory,
    pub(crate) sink: SinkFactory,
}

/// The outbox of a validated pipeline: its topic, named after the application.
#[derive(Clone)]
pub(crate) struct Outbox {
    spec: OutboxSpec,
    pub(crate) topic: Topic,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("topic", &self.topic).field("sink", &self.spec.sink.type_name()).finish()
    }
}

impl Outbox {
    pub(crate) fn new(spec: OutboxSpec, application_id: &str) -> Outbox {
        let topic = Topic::new(outbox_topic(application_id, &spec.name));
        Outbox { spec, topic }
    }

    pub(crate) fn spec(&self) -> &OutboxSpec {
        &self.spec
    }

    /// The outbox record of `row`, handed over while processing `origin`: on the origin's
    /// partition, so a partition's rows keep their order.
    pub(crate) fn record(&self, origin: &InputRecord, row: &AnyRow) -> Result<OutputRecord, BoxError> {
        let value = (self.spec.encode)(row)?;
        Ok(OutputRecord::to(&self.topic).partition(origin.partition).value(value))
    }
}

/// The outbox topic of sink `name` of application `application_id`.
pub(crate) fn outbox_topic(application_id: &str, name: &str) -> String {
    format!("{application_id}-{name}-outbox")
}

/// `connect`'s sinks, refused unless exactly-once. The applier reads the outbox at-least-once
/// and relies on the sink to store the outbox offsets with its rows; any other sink would
/// apply a row again after a crash. A sink's guarantee is its instance's
/// ([`Sink::guarantee`](super::Sink::guarantee)), so the refusal comes at its connect.
pub(crate) fn exactly_once_only(name: &str, connect: SinkFactory) -> SinkFactory {
    let name = name.to_string();
    connect.checked(move |type_name, guarantee| match guarantee {
        SinkGuarantee::ExactlyOnce => Ok(()),
        other => Err(Box::new(NotExactlyOnce(format!(
            "outbox_sink({name:?}) needs an exactly-once sink, and {type_name} connected as {other:?}: the \
             outbox's applier reads the outbox at-least-once and relies on the sink to store the outbox \
             offsets with its rows, so this sink would apply rows again after a crash. Use a sink whose \
             guarantee is SinkGuarantee::ExactlyOnce (kafka_eos_postgres::PostgresSink), or declare this one \
             with PipelineBuilder::sink, which writes an effectively-once or at-least-once sink in the \
             batch's own cycle"
        )))),
    })
}

/// The refusal of an outbox sink that is not exactly-once ([`exactly_once_only`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotExactlyOnce(String);

/// `e`, as the configuration error it is if it is the applier's refusal of its sink
/// ([`exactly_once_only`]), which reaches it as the sink's failed connect.
pub(crate) fn refusal_as_config(e: Error) -> Error {
    match e {
        Error::Sink { source, .. } if source.is::<NotExactlyOnce>() => Error::Config(source.to_string()),
        e => e,
    }
}
