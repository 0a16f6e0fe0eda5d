//! The runtime's side of a [`Sink`]: the type-erased instance a task owns, and the rows a
//! batch collects before they are handed over. Tasks are not generic over the sink type, so
//! rows travel boxed from [`Context::sink`](crate::Context::sink) to here, where they are
//! unboxed once per batch into the sink's own [`SinkBatch`].

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;

use super::{PartitionRange, Sink, SinkBatch, SinkError, SinkErrorClass, SinkGuarantee, SinkRow};
use crate::error::BoxError;
use crate::record::Topic;

/// A row as the processor handed it, before it is unboxed into the sink's batch.
pub(crate) type AnyRow = Box<dyn Any + Send>;

/// A failed sink call: its class and the sink's error.
#[derive(Debug)]
pub(crate) struct SinkFailure {
    pub class: SinkErrorClass,
    pub error: BoxError,
}

impl SinkFailure {
    fn timed_out(what: &str, timeout: Duration) -> SinkFailure {
        let error = format!("sink {what} did not finish within the task timeout ({timeout:?})").into();
        SinkFailure { class: SinkErrorClass::Retriable, error }
    }
}

impl std::fmt::Display for SinkFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sink failed ({:?}): {}", self.class, self.error)
    }
}

/// A sink instance behind a vtable, driven from a task's thread.
pub(crate) trait ErasedSink: Send {
    fn guarantee(&self) -> SinkGuarantee;
    fn on_assigned(
        &mut self,
        rt: &Handle,
        partitions: &[(Topic, i32)],
        timeout: Duration,
    ) -> Result<Vec<Option<i64>>, SinkFailure>;
    /// Unboxes `rows` into the batch the next [`write`](Self::write) calls write.
    fn prepare(&mut self, partitions: Vec<PartitionRange>, rows: Vec<SinkRow<AnyRow>>) -> Result<(), SinkFailure>;
    /// Writes the prepared batch (again, after a failure).
    fn write(&mut self, rt: &Handle, timeout: Duration) -> Result<(), SinkFailure>;
    fn recover(&mut self, rt: &Handle, timeout: Duration) -> Result<(), SinkFailure>;
    fn on_revoked(&mut self, rt: &Handle, partitions: &[(Topic, i32)], timeout: Duration);
    /// Forgets the prepared batch (written, or dropped).
    fn clear(&mut self);
}

struct Erased<S: Sink> {
    sink: S,
    batch: SinkBatch<S::Row>,
}

fn run<T, E: SinkError>(
    rt: &Handle,
    what: &str,
    timeout: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, SinkFailure> {
    // A task abandoned to fencing can outlive the pipeline's runtime; tokio then panics on
    // the timer (its driver is gone). That is a failure of the call, not of the thread.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async { tokio::time::timeout(timeout, fut).await })
    }));
    match outcome {
        Ok(Ok(Ok(t))) => Ok(t),
        Ok(Ok(Err(e))) => Err(SinkFailure { class: e.class(), error: Box::new(e) }),
        Ok(Err(_)) => Err(SinkFailure::timed_out(what, timeout)),
        Err(_) => {
            let error = format!("sink {what}: the pipeline's async runtime has shut down").into();
            Err(SinkFailure { class: SinkErrorClass::Fatal, error })
        }
    }
}

impl<S: Sink> ErasedSink for Erased<S> {
    fn guarantee(&self) -> SinkGuarantee {
        self.sink.guarantee()
    }

    fn on_assigned(
        &mut self,
        rt: &Handle,
        partitions: &[(Topic, i32)],
        timeout: Duration,
    ) -> Result<Vec<Option<i64>>, SinkFailure> {
        let offsets = run(rt, "on_assigned", timeout, self.sink.on_assigned(partitions))?;
        if offsets.len() != partitions.len() {
            let error = format!("on_assigned returned {} offsets for {} partitions", offsets.len(), partitions.len());
            return Err(SinkFailure { class: SinkErrorClass::Fatal, error: error.into() });
        }
        Ok(offsets)
    }

    fn prepare(&mut self, partitions: Vec<PartitionRange>, rows: Vec<SinkRow<AnyRow>>) -> Result<(), SinkFailure> {
        self.batch.partitions = partitions;
        self.batch.rows.clear();
        self.batch.rows.reserve(rows.len());
        for r in rows {
            // The handle's type parameter is the sink's row type (checked when the sink is
            // declared), so a mismatch here is a bug of ours, reported as fatal.
            let row = r.row.downcast::<S::Row>().map_err(|_| SinkFailure {
                class: SinkErrorClass::Fatal,
                error: format!("a sink row is not a {}", std::any::type_name::<S::Row>()).into(),
            })?;
            self.batch.rows.push(SinkRow { topic: r.topic, partition: r.partition, offset: r.offset, row: *row });
        }
        Ok(())
    }

    fn write(&mut self, rt: &Handle, timeout: Duration) -> Result<(), SinkFailure> {
        run(rt, "write", timeout, self.sink.write(&self.batch))
    }

    fn recover(&mut self, rt: &Handle, timeout: Duration) -> Result<(), SinkFailure> {
        run(rt, "recover", timeout, self.sink.recover())
    }

    fn on_revoked(&mut self, rt: &Handle, partitions: &[(Topic, i32)], timeout: Duration) {
        if let Err(e) = run(rt, "on_revoked", timeout, self.sink.on_revoked(partitions)) {
            tracing::warn!(error = %e, "sink on_revoked failed (ignored: it is not needed for correctness)");
        }
    }

    fn clear(&mut self) {
        self.batch.partitions.clear();
        self.batch.rows.clear();
    }
}

type Connect = dyn Fn(&Handle, Duration) -> Result<Box<dyn ErasedSink>, SinkFailure> + Send + Sync;

/// Makes a task's sink instance (connects it), on the task's thread; knows the sink's type
/// name, for the topology description.
#[derive(Clone)]
pub(crate) struct SinkFactory(Arc<Connect>, &'static str);

impl SinkFactory {
    pub(crate) fn new<S, F, Fut>(connect: F) -> SinkFactory
    where
        S: Sink,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S, S::Error>> + Send + 'static,
    {
        SinkFactory(
            Arc::new(move |rt: &Handle, timeout: Duration| {
                let sink = run(rt, "connect", timeout, connect())?;
                let batch = SinkBatch { partitions: Vec::new(), rows: Vec::new() };
                Ok(Box::new(Erased { sink, batch }) as Box<dyn ErasedSink>)
            }),
            std::any::type_name::<S>(),
        )
    }

    /// This factory, with every sink it connects checked by `check` (given the sink's type
    /// name and guarantee, known only once an instance exists): a sink `check` refuses is
    /// dropped and its connect fails, fatal, with `check`'s error.
    pub(crate) fn checked<C>(self, check: C) -> SinkFactory
    where
        C: Fn(&'static str, SinkGuarantee) -> Result<(), BoxError> + Send + Sync + 'static,
    {
        let SinkFactory(connect, type_name) = self;
        SinkFactory(
            Arc::new(move |rt: &Handle, timeout: Duration| {
                let sink = connect(rt, timeout)?;
                check(type_name, sink.guarantee())
                    .map_err(|error| SinkFailure { class: SinkErrorClass::Fatal, error })?;
                Ok(sink)
            }),
            type_name,
        )
    }

    /// The sink's type name (`kafka_eos_postgres::PostgresSink`).
    pub(crate) fn type_name(&self) -> &'static str {
        self.1
    }

    pub(crate) fn connect(&self, rt: &Handle, timeout: Duration) -> Result<Box<dyn ErasedSink>, SinkFailure> {
        (self.0)(rt, timeout)
    }
}

impl std::fmt::Debug for SinkFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::test_sinks::Never;

    #[test]
    fn a_call_after_the_runtime_shut_down_fails_instead_of_panicking() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let handle = rt.handle().clone();
        assert!(run(&handle, "connect", Duration::from_secs(1), async { Ok::<_, Never>(7) }).is_ok_and(|v| v == 7));
        drop(rt);
        // A call that has to wait (a connect does) needs the timer, whose driver is gone.
        let waits = async {
            tokio::task::yield_now().await;
            Ok::<_, Never>(7)
        };
        let failed = run(&handle, "connect", Duration::from_secs(1), waits).expect_err("the runtime is gone");
        assert_eq!(failed.class, SinkErrorClass::Fatal);
        assert!(failed.to_string().contains("async runtime has shut down"), "{failed}");
    }
}
