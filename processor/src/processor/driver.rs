//! How the runtime holds and calls processors: type-erased, one instance per partition,
//! futures driven on the task thread, panics caught.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use tokio::runtime::Handle;

use super::{Context, HookContext, Processor, ProcessorPanic};
use crate::error::BoxError;
use crate::record::{InputRecord, OutputRecord};
use crate::state::PartitionState;
use crate::table::TableViews;
use crate::timers::Timer;

/// A processor behind a vtable: each method drives the processor's own future to the end,
/// so no future is boxed.
pub(crate) trait Erased: Send {
    fn init(&mut self, rt: &Handle, ctx: &HookContext<'_>) -> Result<(), BoxError>;
    fn process(&mut self, rt: &Handle, ctx: &mut Context<'_>, record: &InputRecord) -> Result<(), BoxError>;
    fn on_timer(&mut self, rt: &Handle, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), BoxError>;
    fn close(&mut self, ctx: &HookContext<'_>) -> Result<(), BoxError>;
}

impl<P: Processor> Erased for P {
    fn init(&mut self, rt: &Handle, ctx: &HookContext<'_>) -> Result<(), BoxError> {
        caught(|| drive(rt, Processor::init(self, ctx)))
    }
    fn process(&mut self, rt: &Handle, ctx: &mut Context<'_>, record: &InputRecord) -> Result<(), BoxError> {
        caught(|| drive(rt, Processor::process(self, ctx, record)))
    }
    fn on_timer(&mut self, rt: &Handle, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), BoxError> {
        caught(|| drive(rt, Processor::on_timer(self, ctx, timer)))
    }
    fn close(&mut self, ctx: &HookContext<'_>) -> Result<(), BoxError> {
        caught(|| {
            Processor::close(self, ctx);
            Ok(())
        })
    }
}

/// Polls `fut` once in the runtime's context (the sync fast path: a ready future never
/// leaves the stack); if it is pending, blocks on it with the runtime.
fn drive<F: Future>(rt: &Handle, fut: F) -> F::Output {
    let mut fut = pin!(fut);
    {
        let _entered = rt.enter();
        if let Poll::Ready(out) = fut.as_mut().poll(&mut std::task::Context::from_waker(Waker::noop())) {
            return out;
        }
    }
    rt.block_on(fut)
}

/// Runs `f`, turning a panic into a [`ProcessorPanic`]. (A panic may leave the open
/// transaction's state changes half made: the batch is aborted, which discards them.)
fn caught(f: impl FnOnce() -> Result<(), BoxError>) -> Result<(), BoxError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| Err(Box::new(ProcessorPanic { message: message(&panic) })))
}

fn message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Makes the per-partition instances: clones of the processor given to the builder.
#[derive(Clone)]
pub(crate) struct ProcessorFactory(Arc<dyn Fn() -> Box<dyn Erased> + Send + Sync>, Arc<str>);

impl ProcessorFactory {
    pub(crate) fn new<P: Processor + Clone>(prototype: P) -> ProcessorFactory {
        // Behind a mutex so the prototype needs only `Send`, not `Sync`: it is cloned once
        // per partition assignment, never per record.
        let prototype = Mutex::new(prototype);
        let make = move || Box::new(prototype.lock().unwrap_or_else(|p| p.into_inner()).clone()) as Box<dyn Erased>;
        ProcessorFactory(Arc::new(make), Arc::from(std::any::type_name::<P>()))
    }

    /// This factory, its processor named `name` in the topology description (a closure's
    /// type name says nothing a reader needs).
    pub(crate) fn named(self, name: &str) -> ProcessorFactory {
        ProcessorFactory(self.0, Arc::from(name))
    }

    /// What the topology description calls the processor: its type's name, or what
    /// [`named`](Self::named) gave it.
    pub(crate) fn name(&self) -> &str {
        &self.1
    }
}

impl std::fmt::Debug for ProcessorFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Processor")
    }
}

/// One task's processor instances, one per input partition, and the output buffer they
/// share (reused from record to record).
pub(crate) struct Instances {
    factory: ProcessorFactory,
    live: Vec<((String, i32), Box<dyn Erased>)>,
    out: Vec<OutputRecord>,
    /// The sink rows of the record being processed (see [`Instances::take_rows`]).
    rows: Vec<crate::sink::erased::AnyRow>,
}

impl Instances {
    pub(crate) fn new(factory: ProcessorFactory) -> Instances {
        Instances { factory, live: Vec::new(), out: Vec::new(), rows: Vec::new() }
    }

    /// The factory the instances are made by.
    pub(crate) fn factory(&self) -> ProcessorFactory {
        self.factory.clone()
    }

    /// Calls the processor of `record`'s partition (making and initialising it first if
    /// it has none) and returns the record's outputs.
    pub(crate) fn process(
        &mut self,
        rt: &Handle,
        record: &InputRecord,
        mut state: Option<&mut PartitionState>,
        tables: TableViews<'_>,
    ) -> Result<&[OutputRecord], BoxError> {
        self.out.clear();
        self.rows.clear();
        let i = self.instance(rt, &record.topic, record.partition, state.as_deref_mut())?;
        let mut ctx = Context {
            topic: &record.topic,
            partition: record.partition,
            state,
            tables,
            out: &mut self.out,
            rows: &mut self.rows,
        };
        self.live[i].1.process(rt, &mut ctx, record)?;
        Ok(&self.out)
    }

    /// Calls `on_timer` on the processor of `topic`/`partition` (made first if it has none);
    /// its outputs and sink rows are *added* to those of the call before.
    pub(crate) fn on_timer(
        &mut self,
        rt: &Handle,
        topic: &str,
        partition: i32,
        mut state: Option<&mut PartitionState>,
        tables: TableViews<'_>,
        timer: &Timer,
    ) -> Result<(), BoxError> {
        let i = self.instance(rt, topic, partition, state.as_deref_mut())?;
        let mut ctx = Context { topic, partition, state, tables, out: &mut self.out, rows: &mut self.rows };
        self.live[i].1.on_timer(rt, &mut ctx, timer)
    }

    /// Clears the outputs and sink rows (before timers fired without a record).
    pub(crate) fn clear(&mut self) {
        self.out.clear();
        self.rows.clear();
    }

    /// The index of `topic`/`partition`'s instance, made and initialised if it has none.
    fn instance(
        &mut self,
        rt: &Handle,
        topic: &str,
        partition: i32,
        state: Option<&mut PartitionState>,
    ) -> Result<usize, BoxError> {
        if let Some(i) = self.live.iter().position(|((t, p), _)| *p == partition && t == topic) {
            return Ok(i);
        }
        let mut instance = (self.factory.0)();
        let hook = HookContext { topic, partition, state: state.as_deref() };
        instance.init(rt, &hook)?;
        self.live.push(((topic.to_string(), partition), instance));
        Ok(self.live.len() - 1)
    }

    /// Whether the last calls left sink rows.
    pub(crate) fn has_rows(&self) -> bool {
        !self.rows.is_empty()
    }

    /// The outputs of the last [`process`](Self::process) call.
    pub(crate) fn outputs(&self) -> &[OutputRecord] {
        &self.out
    }

    /// Adds `records` to the outputs of the last call (an outbox's rows).
    pub(crate) fn extend_outputs(&mut self, records: Vec<OutputRecord>) {
        self.out.extend(records);
    }

    /// Places the outputs sent to a [repartition topic](crate::PipelineBuilder::repartition)
    /// without a partition on the partition of their key among `partitions` (murmur2, as
    /// the Java client; a record without a key as the empty key), so that the runtime and
    /// the test driver agree on where each key is processed.
    pub(crate) fn place(&mut self, repartition_topics: &[String], partitions: i32) {
        if repartition_topics.is_empty() {
            return;
        }
        let murmur2 = crate::query::Partitioner::murmur2();
        for out in self.out.iter_mut().filter(|o| o.partition.is_none()) {
            if repartition_topics.iter().any(|t| t.as_str() == out.topic.as_str()) {
                out.partition = Some(murmur2.partition(out.key.as_deref().unwrap_or_default(), partitions));
            }
        }
    }

    /// The sink rows of the last [`process`](Self::process) call.
    pub(crate) fn take_rows(&mut self) -> std::vec::Drain<'_, crate::sink::erased::AnyRow> {
        self.rows.drain(..)
    }

    /// Just `record`, as the outputs of a call (the dead-letter route).
    pub(crate) fn only(&mut self, record: OutputRecord) -> &[OutputRecord] {
        self.rows.clear();
        self.out.clear();
        self.out.push(record);
        &self.out
    }

    /// Closes and drops the instance of `topic`/`partition`, if any; `state` is its
    /// partition's state (read-only), if it has any.
    pub(crate) fn close(&mut self, topic: &str, partition: i32, state: Option<&PartitionState>) {
        if let Some(i) = self.live.iter().position(|((t, p), _)| *p == partition && t == topic) {
            let ((topic, partition), mut instance) = self.live.swap_remove(i);
            let hook = HookContext { topic: &topic, partition, state };
            if let Err(e) = instance.close(&hook) {
                tracing::warn!(topic, partition, error = %e, "processor close failed");
            }
        }
    }

    /// Closes every instance.
    pub(crate) fn close_all(&mut self, states: &std::collections::HashMap<i32, PartitionState>) {
        while let Some(((topic, partition), _)) = self.live.last() {
            let (topic, partition) = (topic.clone(), *partition);
            self.close(&topic, partition, states.get(&partition));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::processor::{AsyncFnProcessor, FnProcessor, ProcessError};
    use crate::record::Topic;

    /// A context on partition 0 of topic "in" with `state`, emitting into `out`.
    pub(crate) fn context<'a>(state: &'a mut PartitionState, out: &'a mut Vec<OutputRecord>) -> Context<'a> {
        // Leaked: a test's few contexts outlive nothing that needs the memory back.
        let rows = Box::leak(Box::default());
        Context {
            topic: "in",
            partition: state.partition(),
            state: Some(state),
            tables: TableViews::default(),
            out,
            rows,
        }
    }

    fn rec(partition: i32, offset: i64) -> InputRecord {
        InputRecord { value: Some(b"v".to_vec()), ..InputRecord::test("t", partition, offset) }
    }

    #[test]
    fn panics_and_errors_keep_their_type() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        #[derive(Debug, thiserror::Error)]
        #[error("bad offset {0}")]
        struct Bad(i64);
        let mut inst = Instances::new(ProcessorFactory::new(FnProcessor(|_: &mut Context<'_>, r: &InputRecord| {
            if r.offset == 5 {
                panic!("boom at {}", r.offset)
            }
            Err::<(), ProcessError>(Box::new(Bad(r.offset)))
        })));
        let err = inst.process(rt.handle(), &rec(0, 5), None, TableViews::default()).unwrap_err();
        assert_eq!(err.downcast_ref::<ProcessorPanic>().map(|p| p.message.as_str()), Some("boom at 5"));
        let err = inst.process(rt.handle(), &rec(0, 6), None, TableViews::default()).unwrap_err();
        assert!(matches!(err.downcast_ref::<Bad>(), Some(Bad(6))), "{err:?}");
    }

    #[derive(Clone, Default)]
    struct Counting {
        inits: Arc<AtomicUsize>,
        closes: Arc<AtomicUsize>,
        seen: u64,
        out: Option<Topic>,
    }

    impl Processor for Counting {
        async fn init(&mut self, _: &HookContext<'_>) -> Result<(), ProcessError> {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            self.inits.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
            self.seen += 1;
            if rec.offset % 2 == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await; // a pending future
            }
            for _ in 0..self.seen {
                ctx.forward(rec, self.out.as_ref().expect("topic"));
            }
            Ok(())
        }
        fn close(&mut self, _: &HookContext<'_>) {
            self.closes.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn one_instance_per_partition_with_init_and_close() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let proto = Counting { out: Some(Topic::new("out")), ..Counting::default() };
        let (inits, closes) = (proto.inits.clone(), proto.closes.clone());
        let mut inst = Instances::new(ProcessorFactory::new(proto));
        assert_eq!(inst.process(rt.handle(), &rec(0, 0), None, TableViews::default()).unwrap().len(), 1);
        assert_eq!(
            inst.process(rt.handle(), &rec(0, 1), None, TableViews::default()).unwrap().len(),
            2,
            "state of self is per instance"
        );
        assert_eq!(
            inst.process(rt.handle(), &rec(1, 0), None, TableViews::default()).unwrap().len(),
            1,
            "another partition, another instance"
        );
        assert_eq!(inits.load(Ordering::SeqCst), 2);
        inst.close("t", 0, None);
        assert_eq!(closes.load(Ordering::SeqCst), 1);
        assert_eq!(
            inst.process(rt.handle(), &rec(0, 2), None, TableViews::default()).unwrap().len(),
            1,
            "a fresh instance after close"
        );
        inst.close_all(&Default::default());
        assert_eq!((inits.load(Ordering::SeqCst), closes.load(Ordering::SeqCst)), (3, 3));
    }

    #[test]
    fn async_closures_may_await_with_the_context_borrowed() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let out = Topic::new("out");
        let mut inst = Instances::new(ProcessorFactory::new(AsyncFnProcessor(
            async move |ctx: &mut Context<'_>, rec: &InputRecord| -> Result<(), ProcessError> {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                ctx.forward(rec, &out);
                Ok(())
            },
        )));
        let outputs = inst.process(rt.handle(), &rec(0, 0), None, TableViews::default()).unwrap();
        assert_eq!(outputs[0].topic, "out");
    }
}
