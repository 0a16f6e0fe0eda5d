//! The engine of windows cut on a [`WindowAlign`] grid (tumbling: one step long; hopping:
//! several steps long, one starting every step).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::stored::Cell;
use super::{Clock, ClosedWindow, Key, Policy, Window, WindowAlign, WindowUpdate};
use crate::record::InputRecord;
use crate::state::StateError;
use crate::Context;

/// Windows `span` steps of `align` long, one starting on every boundary.
#[derive(Clone, Debug)]
pub(super) struct Shape {
    pub align: WindowAlign,
    pub span: i64,
}

impl Shape {
    fn end_of(&self, start: i64) -> i64 {
        self.align.step(start, self.span)
    }

    /// The windows `t` falls in, earliest start first.
    fn windows_of(&self, t: i64) -> impl Iterator<Item = (i64, i64)> + '_ {
        let latest = self.align.floor(t);
        (0..self.span).rev().map(move |k| {
            let start = self.align.step(latest, -k);
            (start, self.end_of(start))
        })
    }

    /// Folds the record into each of its windows that is open or still within its retention
    /// (a correction), earliest start first, reporting each to the trigger right after its
    /// fold; if any is past its retention the record is also returned as late.
    pub(super) fn add<K, A>(
        &self,
        policy: &Policy<K, A>,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        fold: &mut dyn FnMut(Window, &mut A),
    ) -> Result<WindowUpdate<K, A>, StateError>
    where
        K: Serialize + DeserializeOwned + Clone + 'static,
        A: Serialize + DeserializeOwned + Default + Clone + 'static,
    {
        let mut update = WindowUpdate::default();
        let mut missed = false;
        let mut store = ctx.store(&policy.store);
        let mut clock = Clock::load(&store)?;
        let watermark = policy.watermark(&clock);
        for (start, end) in self.windows_of(event_time_ms) {
            let closed = end <= watermark;
            if closed && policy.expired(end, watermark) {
                missed = true;
                continue;
            }
            let entry = Key::Window(start, key.clone());
            let mut cell = store.get(&entry)?.and_then(Cell::of).unwrap_or_default();
            let window = Window { start_ms: start, end_ms: end };
            fold(window, &mut cell.value);
            policy.report(&mut update, key, window, &cell.value, &mut cell.fired, closed);
            if closed {
                let revision = cell.emitted.map_or(0, |r| r.saturating_add(1));
                cell.emitted = Some(revision);
                let value = cell.value.clone();
                update.closed.push(ClosedWindow { key: key.clone(), start_ms: start, end_ms: end, value, revision });
                clock.next_expiry = clock.next_expiry.min(end.saturating_add(policy.retention_ms));
            } else {
                clock.next_close = clock.next_close.min(end);
            }
            store.put(&entry, &cell.into_val())?;
        }
        clock.save(&mut store)?;
        policy.corrected(ctx, update.closed.len());
        if missed {
            update.late = Some(policy.late(ctx, record, watermark));
        }
        update.closed.extend(self.advance(policy, ctx, event_time_ms)?);
        Ok(update)
    }

    /// Moves the watermark; returns the windows it closes (revision 0), keeping them for
    /// the retention, and deletes those past it.
    pub(super) fn advance<K, A>(
        &self,
        policy: &Policy<K, A>,
        ctx: &mut Context<'_>,
        event_time_ms: i64,
    ) -> Result<Vec<ClosedWindow<K, A>>, StateError>
    where
        K: Serialize + DeserializeOwned + Clone + 'static,
        A: Serialize + DeserializeOwned + Clone + 'static,
    {
        policy.advance(ctx, event_time_ms, |store, k, v, watermark, clock, closed| {
            let (Key::Window(start, key), Some(mut cell)) = (&k, Cell::of(v)) else { return Ok(()) };
            let end = self.end_of(*start);
            let expiry = end.saturating_add(policy.retention_ms);
            let keep = !policy.expired(end, watermark);
            match cell.emitted {
                None if end <= watermark => {
                    let value = if keep {
                        let value = cell.value.clone();
                        cell.emitted = Some(0);
                        store.put(&k, &cell.into_val())?;
                        clock.next_expiry = clock.next_expiry.min(expiry);
                        value
                    } else {
                        store.delete(&k)?;
                        cell.value
                    };
                    closed.push(ClosedWindow { key: key.clone(), start_ms: *start, end_ms: end, value, revision: 0 });
                }
                None => clock.next_close = clock.next_close.min(end),
                Some(_) if keep => clock.next_expiry = clock.next_expiry.min(expiry),
                Some(_) => store.delete(&k)?,
            }
            Ok(())
        })
    }
}
