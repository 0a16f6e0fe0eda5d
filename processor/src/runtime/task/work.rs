//! What one cycle runs for a task: the processor (or the dead-letter route), then the
//! batch's state changes.

use std::collections::HashMap;

use crate::config::Exhausted;
use crate::processor::driver::Instances;
use crate::record::{InputRecord, OutputRecord};
use crate::runtime::{Shared, TopicPartition};
use crate::state::PartitionState;
use crate::txn::Work;

/// One cycle's work for [`run_cycle`](crate::txn::run_cycle): the processor (with the record's partition state),
/// or the dead-letter route; then the state changes.
pub(super) struct BatchWork<'a> {
    pub(super) shared: &'a Shared,
    /// Records that exhausted their retries under a dead-letter policy, with their error.
    pub(super) dead: &'a HashMap<String, (String, u32)>,
    pub(super) states: &'a mut HashMap<i32, PartitionState>,
    pub(super) processors: &'a mut Instances,
    pub(super) outputs_per_partition: HashMap<TopicPartition, u64>,
}

impl Work for BatchWork<'_> {
    /// A record's outputs: the processor's, or — once it exhausted its retries under a
    /// dead-letter policy — the record itself, to the dead-letter topic.
    fn process(&mut self, r: &InputRecord) -> Result<&[OutputRecord], crate::error::BoxError> {
        let outputs = match dead_letter(self.shared, self.dead, r) {
            Some(out) => self.processors.only(out),
            None => self.processors.process(&self.shared.rt, r, self.states.get_mut(&r.partition))?,
        };
        *self.outputs_per_partition.entry((r.topic.clone(), r.partition)).or_default() += outputs.len() as u64;
        Ok(outputs)
    }

    fn state_changes(&mut self) -> Vec<OutputRecord> {
        self.states.values().flat_map(PartitionState::changelog_records).collect()
    }
}

/// The dead-letter copy of `r`, if it exhausted its retries under a dead-letter policy.
fn dead_letter(shared: &Shared, dead: &HashMap<String, (String, u32)>, r: &InputRecord) -> Option<OutputRecord> {
    if dead.is_empty() {
        return None; // the usual case: no need to format the record's origin to look it up
    }
    if let (Some((message, attempts)), Exhausted::DeadLetter(topic)) =
        (dead.get(&r.origin()), &shared.cfg.processor_error_policy.then)
    {
        let out = OutputRecord::copy_of(r, topic.as_str());
        return Some(out.header("kafka-eos.error", message).header("kafka-eos.attempts", attempts.to_string()));
    }
    None
}
