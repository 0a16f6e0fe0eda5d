//! The timers workload (`kafka-eos chaos --workload timers`): the 1:1 copy, with every output sent
//! by a wall-clock timer instead of by its record.
//!
//! Each record is kept in a store and schedules a timer a fixed delay ahead; the timer
//! emits the record's output, with the record's origin header set by hand (the runtime adds
//! none to a timer's outputs), and deletes it. So most outputs leave in transactions of
//! timers alone, pending timers and records move with their partitions and are restored
//! from the changelog by the next owner, and the suite's checks apply unchanged: one output
//! per input, by origin.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kafka_eos::processor::{Context, ProcessError, Processor};
use kafka_eos::record::ORIGIN_HEADER;
use kafka_eos::state::Store;
use kafka_eos::timers::{Timer, Timers};
use kafka_eos::{InputRecord, OutputRecord, PipelineBuilder, Topic};

/// A record waiting for its timer: its key and value.
type Kept = (Option<Vec<u8>>, Vec<u8>);

/// What runs on every record before it is kept.
type Before = Arc<dyn Fn(&InputRecord) -> Result<(), ProcessError> + Send + Sync>;

#[derive(Clone)]
pub(crate) struct DelayedCopy {
    timers: Timers,
    kept: Store<i64, Kept>,
    input: String,
    out: Topic,
    delay: Duration,
    /// Called on every record before it is kept: the instance's stall and deliberate
    /// failures.
    before: Before,
}

impl DelayedCopy {
    /// The pipeline of `builder` (its input topic set) with this workload.
    pub(crate) fn pipeline(
        mut builder: PipelineBuilder,
        input: &str,
        output: &str,
        delay: Duration,
        before: impl Fn(&InputRecord) -> Result<(), ProcessError> + Send + Sync + 'static,
    ) -> PipelineBuilder {
        let timers = Timers::new(&mut builder, "delays");
        let kept = builder.store("kept");
        let out = builder.output_topic(output);
        let copy = DelayedCopy { timers, kept, input: input.to_string(), out, delay, before: Arc::new(before) };
        builder.processor_impl(copy)
    }
}

impl Processor for DelayedCopy {
    async fn process(&mut self, ctx: &mut Context<'_>, r: &InputRecord) -> Result<(), ProcessError> {
        (self.before)(r)?;
        ctx.store(&self.kept).put(&r.offset, &(r.key.clone(), r.value.clone().unwrap_or_default()))?;
        self.timers.at_wall_clock(ctx, SystemTime::now() + self.delay, r.offset as u64)?;
        Ok(())
    }

    async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        let offset = timer.tag as i64;
        let mut kept = ctx.store(&self.kept);
        // A timer without its record would be a lost output: the suite's checks count it.
        let Some((key, mut value)) = kept.get(&offset)? else { return Ok(()) };
        kept.delete(&offset)?;
        value.reverse();
        let partition = ctx.partition();
        let origin = format!("{}/{partition}/{offset}", self.input);
        let mut o = OutputRecord::to(&self.out).value(value).partition(partition).header(ORIGIN_HEADER, origin);
        o.key = key;
        ctx.emit(o);
        Ok(())
    }
}
