//! Declaring a pipeline's timers on its builder: the timers' store and the pipeline's one
//! timers declaration.

use super::{TimerSpec, Timers};
use crate::PipelineBuilder;

impl Timers {
    /// Declares the pipeline's timers with the defaults of [`TimerSpec::new`].
    pub fn new(builder: &mut PipelineBuilder, name: impl Into<String>) -> Timers {
        Timers::with(builder, TimerSpec::new(name))
    }

    /// Declares the pipeline's timers as `spec` says.
    pub fn with(builder: &mut PipelineBuilder, spec: TimerSpec) -> Timers {
        let timers = Timers {
            store: builder.operator_store(spec.name, "timers"),
            idle: spec.idle,
            stream_time: spec.stream_time,
        };
        builder.declare_timers(timers.clone());
        timers
    }
}
