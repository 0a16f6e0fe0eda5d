//! What every window kind shares: its store, lateness, retention, late topic and trigger,
//! and the watermark advance that sweeps the store for windows to close or drop.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::stored::{Clock, Key, Val};
use super::trigger::Trigger;
use super::update::{ClosedWindow, TriggeredWindow, Window, WindowUpdate, LATE_HEADER};
use crate::record::{InputRecord, OutputRecord, Topic};
use crate::state::{StateError, Store, StoreMut, Tally};
use crate::Context;

/// What every kind shares: its store, lateness, retention, late topic and trigger.
#[derive(Clone)]
pub(super) struct Policy<K, A> {
    pub store: Store<Key<K>, Val<A>>,
    pub lateness_ms: i64,
    pub retention_ms: i64,
    pub late_topic: Topic,
    pub trigger: Trigger<A>,
    /// Watermark progress between two sweeps at least (see [`Policy::advance`]).
    pub sweep_every_ms: i64,
}

impl<K, A> Policy<K, A>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + 'static,
{
    /// `role` names the window kind in the topology description (`tumbling windows`).
    pub(super) fn new(
        builder: &mut crate::PipelineBuilder,
        store: String,
        late_topic: &str,
        role: &'static str,
    ) -> Self {
        let late_topic = builder.late_topic(late_topic, &store);
        Policy {
            store: builder.operator_store(store, role),
            lateness_ms: 0,
            retention_ms: 0,
            late_topic,
            trigger: Trigger::at_close(),
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

    /// Adds `key`'s `window`, just updated to `value`, to `update.triggered` if the trigger
    /// fires (`fired`: the window's stored flag; `closed`: the update is a correction).
    pub(super) fn report(
        &self,
        update: &mut WindowUpdate<K, A>,
        key: &K,
        window: Window,
        value: &A,
        fired: &mut bool,
        closed: bool,
    ) where
        A: Clone,
    {
        if self.trigger.fires(value, fired) {
            let Window { start_ms, end_ms } = window;
            update.triggered.push(TriggeredWindow { key: key.clone(), start_ms, end_ms, value: value.clone(), closed });
        }
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
