//! Event-time windows with a per-partition watermark: tumbling, hopping, sliding and session
//! windows, with one close / late / correction rule set (stated in the
//! [`operators`](super) docs, where the window types are exported). Tumbling and hopping
//! windows are cut on one grid abstraction ([`WindowAlign`]: fixed, offset, calendar days in
//! a time zone); sliding and session windows are cut by the records themselves.
//!
//! Store layout: one store per operator; its entries are the watermark (`Key::Meta`), one
//! entry per open or retained (key, window) for grid windows, one entry per key holding its
//! sessions for session windows, one per key holding its recent records' times, contributions
//! and windows for sliding windows. A threshold [`Trigger`]'s "has fired" flag is part of the
//! window's value (`stored.rs`). Variants are only ever appended, so changelogs written by
//! earlier versions of [`TumblingWindows`] still restore.

mod align;
mod grid;
mod hopping;
mod list;
mod policy;
mod session;
mod sliding;
mod stored;
mod trigger;
mod tumbling;
mod update;

pub use align::WindowAlign;
pub use hopping::HoppingWindows;
use policy::Policy;
pub use session::SessionWindows;
pub use sliding::SlidingWindows;
use stored::{Clock, Key, Session, Val};
pub use trigger::Trigger;
pub use tumbling::TumblingWindows;
pub use update::{ClosedWindow, RetractedWindow, TriggeredWindow, Window, WindowError, WindowUpdate, LATE_HEADER};

/// The builder methods every kind shares (lateness, retention, trigger, late topic).
macro_rules! window_options {
    ($ty:ident) => {
        impl<K, A> $ty<K, A> {
            /// How far behind the largest event time a record may be and still be folded
            /// like an on-time one. Default: zero. A larger one admits more out-of-order
            /// records and delays every result by as much, keeping that many more windows
            /// open in state.
            pub fn allowed_lateness(mut self, lateness: std::time::Duration) -> Self {
                self.policy.lateness_ms = super::align::millis(lateness);
                self
            }

            /// How long (event time, past its close) a closed window keeps its aggregate so
            /// that late records correct it. Default: zero — late records go to the
            /// late-records topic and closed windows are deleted at once. A longer retention
            /// turns late records into corrections (a reader of the output sees the window
            /// again with a higher revision) and keeps every window in state for that much
            /// longer.
            pub fn retention(mut self, retention: std::time::Duration) -> Self {
                self.policy.retention_ms = super::align::millis(retention);
                self
            }

            /// When windows report before their result at close, in
            /// [`WindowUpdate::triggered`](super::WindowUpdate::triggered): never (the
            /// default, [`Trigger::at_close`](super::Trigger::at_close)), on every update,
            /// or once when a predicate on the aggregate first holds.
            pub fn trigger(mut self, trigger: super::Trigger<A>) -> Self {
                self.policy.trigger = trigger;
                self
            }

            /// The late-records topic.
            pub fn late_topic(&self) -> &crate::record::Topic {
                &self.policy.late_topic
            }
        }
    };
}
pub(super) use window_options;

#[cfg(test)]
mod trigger_tests;

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::record::InputRecord;
    use crate::state::Tally;
    use crate::Context;

    pub(in crate::operators) fn rec(offset: i64) -> InputRecord {
        InputRecord { value: Some(b"v".to_vec()), ..InputRecord::test("in", 0, offset) }
    }

    /// What a [`run`] committed.
    pub(in crate::operators) struct Ran {
        /// The operators' tallies, by (tally, store).
        pub tallies: std::collections::BTreeMap<(Tally, String), u64>,
        /// Entries left in the first store declared.
        pub entries: usize,
    }

    /// Runs `f` with a context over partition 0's state of the stores declared on `b`, then
    /// commits the transaction.
    pub(in crate::operators) fn run(b: &crate::PipelineBuilder, f: impl FnOnce(Context<'_>)) -> Ran {
        let mut st = crate::state::tests::state_of(b, 0);
        let mut out = Vec::new();
        f(crate::processor::driver::tests::context(&mut st, &mut out));
        let tallies = st.commit(&Default::default()).tallies;
        Ran { tallies, entries: st.committed_entries()[0].1.len() }
    }

    /// (key, start, value, revision) of each result.
    pub(in crate::operators) fn results(closed: &[ClosedWindow<String, u64>]) -> Vec<(&str, i64, u64, u32)> {
        closed.iter().map(|c| (c.key.as_str(), c.start_ms, c.value, c.revision)).collect()
    }
}
