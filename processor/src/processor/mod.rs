//! Processors: the user's code, one shape for sync, async and stateful work, with
//! per-partition `init`/`close` hooks.
//!
//! A [`Processor`] is called once per input record with the record's [`Context`], through
//! which it emits outputs ([`Context::emit`], [`Context::forward`]) and reads and writes
//! the partition's [state stores](crate::state) (`ctx.store(&handle)`). The closure forms
//! cover most pipelines:
//!
//! ```no_run
//! use kafka_eos::{codec::Json, OutputRecord, Pipeline};
//! # #[derive(serde::Deserialize, serde::Serialize)] struct Payment { merchant: String, cents: i64 }
//! let mut builder = Pipeline::builder().bootstrap_servers("127.0.0.1:9092").application_id("fees").input_topic("payments");
//! let fees = builder.output_topic("fees");               // declared once: no String per record
//! let totals = builder.store::<String, i64>("totals");  // typed handle, declared once
//! let pipeline = builder
//!     .processor(move |ctx, rec| {
//!         let p: Payment = rec.value_as(&Json)?;
//!         let mut store = ctx.store(&totals);
//!         let total = store.get(&p.merchant)?.unwrap_or(0) + p.cents / 100;
//!         store.put(&p.merchant, &total)?;
//!         ctx.emit(OutputRecord::to(&fees).key(&p.merchant).encode_value(&Json, &total)?);
//!         Ok(())
//!     })
//!     .build();
//! ```
//!
//! `.async_processor(async |ctx, rec| { .. })` takes an async closure (it may await while
//! holding the context: state and outputs included), and
//! [`processor_impl`](crate::PipelineBuilder::processor_impl) takes any type implementing
//! [`Processor`], which adds the [`init`](Processor::init) and [`close`](Processor::close)
//! hooks.
//!
//! # Instances, replays, effects
//! The runtime makes **one instance per input partition** (a clone of the one given to the
//! builder) when the partition's first record arrives, after its state is restored, and
//! calls `init` on it; `close` when the partition is revoked or lost, the producer is given
//! up, or the pipeline stops. So fields of `self` are per-partition and never shared.
//!
//! A processor may be called more than once for the same record: after an abort (a Kafka
//! error, a processor error, a rebalance) the runtime replays the uncommitted batch, and
//! only the outputs and state changes of the attempt that commits become visible. Fields
//! of `self` are *not* rolled back: keep what must be exactly-once in stores. Effects
//! outside Kafka (an HTTP call, a database write) are not covered by the transaction and
//! may happen more than once: make them idempotent.
//!
//! # How it is driven
//! Every call runs on the partition task's OS thread. A future that is ready at its first
//! poll (every sync closure, and async code that did not have to wait) costs no boxing and
//! no hand-off; one that is pending is driven to completion with the Tokio runtime that
//! called [`Pipeline::run`](crate::Pipeline::run) (`Handle::block_on`; it must be a
//! multi-thread runtime, the `#[tokio::main]` default), so it may await timers and I/O.
//! The task waits for each record before the next: ordering within a partition is kept,
//! and the future need not be `Send`. A panic is caught and becomes a processor error
//! ([`ProcessorPanic`]); errors keep their type all the way to
//! [`Error::Processor`](crate::Error::Processor).

mod context;
pub(crate) mod driver;

use std::future::Future;

pub use context::{Context, HookContext};

use crate::error::BoxError;
use crate::record::InputRecord;

/// What a processor returns on failure: any error, boxed (so `?` works on every error
/// type). It follows the pipeline's [`ProcessorErrorPolicy`](crate::ProcessorErrorPolicy).
pub type ProcessError = BoxError;

/// The processor: per-partition code that turns input records into outputs and state
/// changes. See the [module docs](self) for how it is instantiated and driven.
///
/// ```
/// use kafka_eos::processor::{Context, HookContext, ProcessError, Processor};
/// use kafka_eos::{InputRecord, Topic};
///
/// /// Forwards each record, enriched by an async lookup.
/// #[derive(Clone)]
/// struct Enrich { out: Topic, seen: u64 }
///
/// impl Processor for Enrich {
///     async fn init(&mut self, ctx: &HookContext<'_>) -> Result<(), ProcessError> {
///         tracing::info!(partition = ctx.partition(), "ready");
///         Ok(())
///     }
///     async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
///         tokio::task::yield_now().await; // a lookup, say
///         self.seen += 1;
///         ctx.forward(rec, &self.out);
///         Ok(())
///     }
///     fn close(&mut self, ctx: &HookContext<'_>) {
///         tracing::info!(partition = ctx.partition(), seen = self.seen, "closed");
///     }
/// }
/// ```
pub trait Processor: Send + 'static {
    /// Called once per partition instance, after the partition's state is restored and
    /// before its first record. It may read stores (not write them: it runs outside any
    /// transaction). An error is a processor error on the partition's first record (the
    /// policy applies; `init` runs again on the replay). Default: nothing.
    fn init(&mut self, ctx: &HookContext<'_>) -> impl Future<Output = Result<(), ProcessError>> {
        let _ = ctx;
        std::future::ready(Ok(()))
    }

    /// Processes one record: emit its outputs and make its state changes through `ctx`.
    fn process(
        &mut self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
    ) -> impl Future<Output = Result<(), ProcessError>>;

    /// Called when one of the partition's [timers](crate::timers) fires, with a context like
    /// a record's: its outputs and state changes join the open transaction. Default:
    /// nothing (a pipeline without timers never calls it).
    fn on_timer(
        &mut self,
        ctx: &mut Context<'_>,
        timer: &crate::timers::Timer,
    ) -> impl Future<Output = Result<(), ProcessError>> {
        let _ = (ctx, timer);
        std::future::ready(Ok(()))
    }

    /// Called once when the instance's partition goes away (revoked, lost, producer given
    /// up, pipeline stopping). Runs inside the rebalance, which the whole group waits for:
    /// release resources, do not block. Default: nothing.
    fn close(&mut self, ctx: &HookContext<'_>) {
        let _ = ctx;
    }
}

/// A sync closure as a [`Processor`]
/// ([`PipelineBuilder::processor`](crate::PipelineBuilder::processor)).
#[derive(Clone)]
pub struct FnProcessor<F>(pub F);

impl<F> Processor for FnProcessor<F>
where
    F: FnMut(&mut Context<'_>, &InputRecord) -> Result<(), ProcessError> + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
    ) -> impl Future<Output = Result<(), ProcessError>> {
        std::future::ready((self.0)(ctx, record))
    }
}

/// An async closure as a [`Processor`]
/// ([`PipelineBuilder::async_processor`](crate::PipelineBuilder::async_processor)).
#[derive(Clone)]
pub struct AsyncFnProcessor<F>(pub F);

impl<F> Processor for AsyncFnProcessor<F>
where
    F: AsyncFnMut(&mut Context<'_>, &InputRecord) -> Result<(), ProcessError> + Send + 'static,
{
    fn process(
        &mut self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
    ) -> impl Future<Output = Result<(), ProcessError>> {
        (self.0)(ctx, record)
    }
}

/// A processor panicked; the panic message, as the error of that attempt.
#[derive(Debug, Clone, thiserror::Error)]
#[error("processor panicked: {message}")]
pub struct ProcessorPanic {
    /// The panic's message (or "non-string panic payload").
    pub message: String,
}
