//! Event-time windows with a per-partition watermark: tumbling, hopping, sliding and session
//! windows, with one close / late / correction rule set. Tumbling and hopping windows are cut
//! on one grid abstraction ([`WindowAlign`]: fixed, offset, calendar days in a time zone);
//! sliding and session windows are cut by the records themselves.
//!
//! Shared by every kind:
//! - **Watermark**, per input partition: the largest event time seen minus the allowed
//!   lateness (default zero). It only moves forward (with records, or with
//!   [`advance`](TumblingWindows::advance), which a timer or heartbeat can call) and lives in
//!   the window's store, so it survives restarts.
//! - A window **closes** once the watermark reaches its end (a session: its last record +
//!   gap; a sliding window: just past the record it ends at): its result is returned once,
//!   with revision 0, in [`WindowUpdate::closed`] — in the transaction that closed it.
//!   Closing sweeps the store; sliding and session windows, which close at any time, sweep
//!   at most once per quarter size or gap of watermark progress, so their results may come
//!   that much after their close.
//! - **Retention** (default zero): how long, in event time past its close, a closed window
//!   keeps its aggregate. A late record whose window closed less than the retention ago is
//!   folded in and the window is emitted again as a **correction** (revision + 1). Past the
//!   retention — always, with the default — the record goes to the late-records topic with
//!   [`LATE_HEADER`], as before corrections existed.
//!
//! Store layout: one store per operator; its entries are the watermark (`Key::Meta`), one
//! entry per open or retained (key, window) for grid windows, one entry per key holding its
//! sessions for session windows, one per key holding its recent records' times, contributions
//! and windows for sliding windows. Variants are only ever appended, so changelogs written by
//! earlier versions of [`TumblingWindows`] still restore.

mod align;
mod grid;
mod hopping;
mod list;
mod session;
mod sliding;
mod tumbling;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::record::{InputRecord, OutputRecord, Topic};
use crate::state::{StateError, Store, StoreMut, Tally};
use crate::Context;

pub use align::WindowAlign;
pub use hopping::HoppingWindows;
pub use session::SessionWindows;
pub use sliding::SlidingWindows;
pub use tumbling::TumblingWindows;

/// The header a late record carries on the late-records topic: the partition's watermark
/// (milliseconds) when it arrived. For a [`StreamJoin`](super::StreamJoin): its stream time
/// − window − grace, the oldest event time that was still on time.
pub const LATE_HEADER: &str = "kafka-eos.late-watermark";

/// A window's result: emitted once when the window closes (revision 0), then again for
/// every correction (revision 1, 2, ...). Downstream, key it by (key, start): the latest
/// revision is the window's total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedWindow<K, A> {
    /// The key.
    pub key: K,
    /// Window start, inclusive (ms since the epoch). For a session: its first record's time.
    pub start_ms: i64,
    /// Window end, exclusive. For a session: its last record's time + 1.
    pub end_ms: i64,
    /// The aggregate.
    pub value: A,
    /// 0 for the result emitted at close; each correction of the same (key, start) adds 1.
    pub revision: u32,
}

/// A session result emitted earlier that no longer exists: a late record merged its session
/// into an earlier one (whose start the merged session keeps). Downstream, delete the
/// (key, start) row (a tombstone on a compacted topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetractedWindow<K> {
    /// The key.
    pub key: K,
    /// The retracted session's start.
    pub start_ms: i64,
}

/// What one record did to the windows.
#[derive(Debug)]
pub struct WindowUpdate<K, A> {
    /// The record itself, bound for the late-records topic, if one of its windows was past
    /// its retention (see each kind for which windows still got it).
    pub late: Option<OutputRecord>,
    /// Results to emit: windows this record's watermark advance closed (revision 0), and
    /// windows this late record corrected (revision ≥ 1, or 0 if the window had never been
    /// emitted for this key). Closes come by end, then start.
    pub closed: Vec<ClosedWindow<K, A>>,
    /// Session results to delete downstream (session windows only).
    pub retracted: Vec<RetractedWindow<K>>,
}

impl<K, A> Default for WindowUpdate<K, A> {
    fn default() -> Self {
        WindowUpdate { late: None, closed: Vec::new(), retracted: Vec::new() }
    }
}

/// A window configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// [`WindowAlign::days_in`] with a name the compiled-in time-zone database lacks.
    #[error("unknown time zone {name:?} ({detail}): use an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    UnknownTimeZone {
        /// The name given.
        name: String,
        /// The time-zone library's message.
        detail: String,
    },
    /// Window sizes that do not fit together (a hopping size that is not a whole number of
    /// advances, a zero gap).
    #[error("invalid windows: {0}")]
    Shape(String),
}

/// Store keys of every window kind (variants only ever appended: see the module docs).
#[derive(Serialize, Deserialize)]
pub(super) enum Key<K> {
    Meta,
    /// A grid window: start, key.
    Window(i64, K),
    /// Every live session of a key.
    Sessions(K),
    /// A key's recent records for sliding windows.
    Slides(K),
}

/// Store values of every window kind (variants only ever appended).
#[derive(Serialize, Deserialize)]
pub(super) enum Val<A> {
    /// The watermark as written before corrections existed (read, never written).
    Meta { max_time: i64, next_close: i64 },
    /// An open grid window's aggregate.
    Agg(A),
    /// A closed grid window kept for corrections, with its last emitted revision.
    Closed { revision: u32, value: A },
    /// The watermark: largest event time seen, earliest close and earliest expiry due, and
    /// the watermark of the last sweep.
    Clock { max_time: i64, next_close: i64, next_expiry: i64, swept: i64 },
    /// A key's sessions, by start.
    Sessions(Vec<Session<A>>),
    /// A key's recent record times with their windows, by time.
    Slides(Vec<sliding::Slide<A>>),
}

/// One session of a key: `[start, last]` in event time.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Session<A> {
    pub start: i64,
    pub last: i64,
    pub value: A,
    /// The revision last emitted for (key, start), if any.
    pub revision: Option<u32>,
    /// Whether the session has closed (and its current value been emitted).
    pub closed: bool,
}

/// The per-partition watermark and the next times a sweep has work.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    pub max_time: i64,
    pub next_close: i64,
    pub next_expiry: i64,
    /// The watermark of the last sweep.
    pub swept: i64,
}

impl Clock {
    pub(super) fn load<K, A>(store: &StoreMut<'_, Key<K>, Val<A>>) -> Result<Clock, StateError>
    where
        K: Serialize + DeserializeOwned,
        A: Serialize + DeserializeOwned,
    {
        Ok(match store.get(&Key::Meta)? {
            Some(Val::Clock { max_time, next_close, next_expiry, swept }) => {
                Clock { max_time, next_close, next_expiry, swept }
            }
            Some(Val::Meta { max_time, next_close }) => {
                Clock { max_time, next_close, next_expiry: i64::MAX, swept: i64::MIN }
            }
            _ => Clock { max_time: i64::MIN, next_close: i64::MAX, next_expiry: i64::MAX, swept: i64::MIN },
        })
    }

    pub(super) fn save<K, A>(&self, store: &mut StoreMut<'_, Key<K>, Val<A>>) -> Result<(), StateError>
    where
        K: Serialize + DeserializeOwned,
        A: Serialize + DeserializeOwned,
    {
        let Clock { max_time, next_close, next_expiry, swept } = *self;
        store.put(&Key::Meta, &Val::Clock { max_time, next_close, next_expiry, swept })
    }
}

/// What every kind shares: its store, lateness, retention and late topic.
#[derive(Clone)]
pub(super) struct Policy<K, A> {
    pub store: Store<Key<K>, Val<A>>,
    pub lateness_ms: i64,
    pub retention_ms: i64,
    pub late_topic: Topic,
    /// Watermark progress between two sweeps at least (see [`Policy::advance`]).
    pub sweep_every_ms: i64,
}

impl<K, A> Policy<K, A>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + 'static,
{
    pub(super) fn new(builder: &mut crate::PipelineBuilder, store: String, late_topic: &str) -> Self {
        Policy {
            store: builder.store(store),
            lateness_ms: 0,
            retention_ms: 0,
            late_topic: builder.output_topic(late_topic),
            sweep_every_ms: 0,
        }
    }

    pub(super) fn watermark(&self, clock: &Clock) -> i64 {
        clock.max_time.saturating_sub(self.lateness_ms)
    }

    /// Whether a window that closed at `close` (event time) is past its retention.
    pub(super) fn expired(&self, close: i64, watermark: i64) -> bool {
        close.saturating_add(self.retention_ms) <= watermark
    }

    /// `record`, counted as late and bound for the late topic with the watermark header.
    pub(super) fn late(&self, ctx: &mut Context<'_>, record: &InputRecord, watermark: i64) -> OutputRecord {
        ctx.tally(Tally::Late, self.store.name(), 1);
        OutputRecord::copy_of(record, &self.late_topic).header(LATE_HEADER, watermark.to_string())
    }

    /// Counts `n` results changed after their close.
    pub(super) fn corrected(&self, ctx: &mut Context<'_>, n: usize) {
        if n > 0 {
            ctx.tally(Tally::Correction, self.store.name(), n as u64);
        }
    }

    /// Moves the watermark to at least `event_time_ms`; when a close or an expiry is due, and
    /// the watermark has moved `sweep_every_ms` since the last sweep, calls `sweep` on every
    /// entry (with the new watermark, updating the clock's next due
    /// times) and returns the results it closes, by end then start.
    pub(super) fn advance(
        &self,
        ctx: &mut Context<'_>,
        event_time_ms: i64,
        mut sweep: impl FnMut(
            &mut StoreMut<'_, Key<K>, Val<A>>,
            Key<K>,
            Val<A>,
            i64,
            &mut Clock,
            &mut Vec<ClosedWindow<K, A>>,
        ) -> Result<(), StateError>,
    ) -> Result<Vec<ClosedWindow<K, A>>, StateError> {
        let mut store = ctx.store(&self.store);
        let mut clock = Clock::load(&store)?;
        clock.max_time = clock.max_time.max(event_time_ms);
        let watermark = self.watermark(&clock);
        let mut closed = Vec::new();
        let due = clock.next_close.min(clock.next_expiry);
        if watermark >= due && watermark >= clock.swept.saturating_add(self.sweep_every_ms) {
            clock.swept = watermark;
            clock.next_close = i64::MAX;
            clock.next_expiry = i64::MAX;
            for (k, v) in store.entries()? {
                if !matches!(k, Key::Meta) {
                    sweep(&mut store, k, v, watermark, &mut clock, &mut closed)?;
                }
            }
            closed.sort_by_key(|w| (w.end_ms, w.start_ms));
        }
        clock.save(&mut store)?;
        Ok(closed)
    }
}

/// The builder methods every kind shares (lateness, retention, late topic).
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

            /// The late-records topic.
            pub fn late_topic(&self) -> &crate::record::Topic {
                &self.policy.late_topic
            }
        }
    };
}
pub(super) use window_options;

#[cfg(test)]
pub(super) mod tests {
    use super::*;

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
