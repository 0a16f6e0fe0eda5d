//! Processors: the user's code, in a sync or an async form, called with panics caught.
//!
//! A processor turns one [`InputRecord`] into zero or more [`OutputRecord`]s. It may be
//! called more than once for the same record: after an abort (a Kafka error, a processor
//! error, a rebalance) the runtime replays the uncommitted batch, and only the outputs of
//! the attempt that commits become visible to read_committed readers. Effects outside
//! Kafka (an HTTP call, a database write) are not covered by the transaction and may
//! therefore happen more than once: make them idempotent.
//!
//! The async form runs on the runtime's partition task thread through the Tokio runtime
//! that called [`Pipeline::run`](crate::Pipeline::run) (which must be a multi-thread
//! runtime, the `#[tokio::main]` default), so it may await timers and I/O. The task thread
//! waits for each future before the next record: ordering within a partition is kept.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::BoxError;
use crate::record::{InputRecord, OutputRecord};
use crate::state::{Context, PartitionState};

/// What a processor returns: the outputs of one input record, or why it failed.
pub type ProcessResult = Result<Vec<OutputRecord>, BoxError>;

type SyncFn = dyn Fn(&InputRecord) -> ProcessResult + Send + Sync;
type AsyncFn = dyn Fn(InputRecord) -> BoxFuture<'static, ProcessResult> + Send + Sync;
type StatefulFn = dyn Fn(&mut Context<'_>, &InputRecord) -> ProcessResult + Send + Sync;

/// A processor, sync or async. Built by
/// [`PipelineBuilder::processor`](crate::PipelineBuilder::processor) or
/// [`PipelineBuilder::async_processor`](crate::PipelineBuilder::async_processor).
#[derive(Clone)]
pub struct Processor(Kind);

#[derive(Clone)]
enum Kind {
    Sync(Arc<SyncFn>),
    Async(Arc<AsyncFn>),
    Stateful(Arc<StatefulFn>),
}

impl std::fmt::Debug for Processor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Kind::Sync(_) => "Processor::Sync",
            Kind::Async(_) => "Processor::Async",
            Kind::Stateful(_) => "Processor::Stateful",
        })
    }
}

impl Processor {
    /// Wraps a synchronous closure.
    pub fn sync<F>(f: F) -> Processor
    where
        F: Fn(&InputRecord) -> ProcessResult + Send + Sync + 'static,
    {
        Processor(Kind::Sync(Arc::new(f)))
    }

    /// Wraps an async closure (it receives the record by value so its future is `'static`).
    pub fn from_async<F, Fut>(f: F) -> Processor
    where
        F: Fn(InputRecord) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ProcessResult> + Send + 'static,
    {
        Processor(Kind::Async(Arc::new(move |r| Box::pin(f(r)))))
    }

    /// Wraps a stateful closure: it also receives the [`Context`] of the record's partition,
    /// through which it reads and writes its [state stores](crate::state). Stateful
    /// processors are synchronous: state must not be held across an await.
    pub fn stateful<F>(f: F) -> Processor
    where
        F: Fn(&mut Context<'_>, &InputRecord) -> ProcessResult + Send + Sync + 'static,
    {
        Processor(Kind::Stateful(Arc::new(f)))
    }

    /// Whether this processor uses state stores.
    pub fn is_stateful(&self) -> bool {
        matches!(self.0, Kind::Stateful(_))
    }

    /// Calls the processor on a (non-async) task thread, with the record's partition state if
    /// it is stateful. A panic becomes an `Err` with the panic message, so one bad record
    /// cannot take the pipeline down unannounced. (A panic may leave the open transaction's
    /// state changes half made: the batch is aborted, which discards them.)
    pub(crate) fn call(
        &self,
        rt: &tokio::runtime::Handle,
        record: &InputRecord,
        state: Option<&mut PartitionState>,
    ) -> Result<Vec<OutputRecord>, String> {
        let outcome = match (&self.0, state) {
            (Kind::Sync(f), _) => catch_unwind(AssertUnwindSafe(|| f(record))),
            (Kind::Async(f), _) => {
                let fut = f(record.clone());
                catch_unwind(AssertUnwindSafe(|| rt.block_on(fut)))
            }
            (Kind::Stateful(f), Some(state)) => catch_unwind(AssertUnwindSafe(|| f(&mut Context::new(state), record))),
            (Kind::Stateful(_), None) => return Err(format!("internal: no state for partition {}", record.partition)),
        };
        match outcome {
            Ok(Ok(outputs)) => Ok(outputs),
            Ok(Err(e)) => Err(e.to_string()),
            Err(panic) => Err(format!("processor panicked: {}", panic_message(&panic))),
        }
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> InputRecord {
        InputRecord {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            timestamp: None,
            key: None,
            value: Some(b"v".to_vec()),
            headers: vec![],
        }
    }

    #[test]
    fn panics_and_errors_become_messages() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let p = Processor::sync(|r| {
            if r.offset == 5 {
                panic!("boom at {}", r.offset)
            }
            Ok(vec![])
        });
        let err = p.call(rt.handle(), &rec(), None).unwrap_err();
        assert!(err.contains("boom at 5"), "{err}");
        let p = Processor::from_async(|r: InputRecord| async move {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            Err::<Vec<OutputRecord>, BoxError>(format!("bad {}", r.offset).into())
        });
        assert_eq!(p.call(rt.handle(), &rec(), None).unwrap_err(), "bad 5");
    }
}
