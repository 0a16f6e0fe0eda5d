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

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::erased::AnyRow;
use super::{Sink, SinkHandle};
use crate::config::PipelineConfig;
use crate::error::BoxError;
use crate::record::{InputRecord, OutputRecord, Topic};
use crate::{Guarantee, Pipeline, PipelineBuilder};

type Encode = dyn Fn(&AnyRow) -> Result<Vec<u8>, BoxError> + Send + Sync;
type Applier = dyn Fn(PipelineBuilder) -> PipelineBuilder + Send + Sync;

/// A declared outbox: its name, how its rows are encoded, and how its applier is built.
#[derive(Clone)]
pub(crate) struct OutboxSpec {
    pub(crate) name: String,
    encode: Arc<Encode>,
    applier: Arc<Applier>,
    type_name: &'static str,
}

impl OutboxSpec {
    /// The outbox of sink `S` (what `connect` makes): the processor hands over records `W`,
    /// which the applier turns into the sink's rows with `to_row`.
    pub(crate) fn new<W, S, F, Fut, T>(name: &str, connect: F, to_row: T) -> (OutboxSpec, SinkHandle<W>)
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
        let to_row = Arc::new(to_row);
        let connect = Arc::new(connect);
        let applier = Arc::new(move |mut b: PipelineBuilder| {
            let (connect, to_row) = (connect.clone(), to_row.clone());
            let sink = b.sink(move || (*connect)());
            b.processor(move |ctx, record| {
                let written: W = bincode::deserialize(record.value.as_deref().unwrap_or_default())
                    .map_err(|e| format!("an outbox record that is not of the outbox's row type: {e}"))?;
                ctx.sink(&sink, (*to_row)(written));
                Ok(())
            })
        });
        let spec = OutboxSpec { name: name.to_string(), encode, applier, type_name: std::any::type_name::<S>() };
        (spec, SinkHandle::new())
    }

    /// The sink's type name, for the topology description.
    pub(crate) fn type_name(&self) -> &'static str {
        self.type_name
    }
}

/// The outbox of a validated pipeline: its topic, named after the application.
#[derive(Clone)]
pub(crate) struct Outbox {
    spec: OutboxSpec,
    pub(crate) topic: Topic,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("topic", &self.topic).field("sink", &self.spec.type_name).finish()
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

    /// The applier of `cfg`'s outbox: a stateless pipeline from the outbox topic to the
    /// sink, with the stateful pipeline's cluster, client properties and timeouts.
    pub(crate) fn applier(&self, cfg: &PipelineConfig) -> crate::Result<Pipeline> {
        let mut b = Pipeline::builder()
            .bootstrap_servers(&cfg.bootstrap_servers)
            .application_id(self.topic.as_str())
            .instance_id(&cfg.instance_id)
            .input_topic(self.topic.as_str())
            .guarantee(Guarantee::AtLeastOnce)
            .commit_interval(cfg.commit_interval)
            .task_timeout(cfg.task_timeout)
            .startup_timeout(cfg.startup_timeout)
            .shutdown_timeout(cfg.shutdown_timeout)
            .handle_signals(false);
        for (k, v) in cfg.consumer_properties.iter() {
            b = b.consumer_property(k, v);
        }
        for (k, v) in cfg.producer_properties.iter() {
            b = b.producer_property(k, v);
        }
        (self.spec.applier)(b).build()
    }
}

/// The outbox topic of sink `name` of application `application_id`.
pub(crate) fn outbox_topic(application_id: &str, name: &str) -> String {
    format!("{application_id}-{name}-outbox")
}
