//! Tumbling event-time windows with a per-partition watermark.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::record::{InputRecord, OutputRecord, Topic};
use crate::state::{StateError, Store, Tally};
use crate::{Context, PipelineBuilder};

/// The header a late record carries on the late-records topic: the partition's watermark
/// (milliseconds) when it arrived.
pub const LATE_HEADER: &str = "kafka-eos.late-watermark";

/// Tumbling (fixed, non-overlapping) event-time windows of `size`, one aggregate per key
/// and window, folded by the caller.
///
/// **Watermark**: per input partition, the largest event time seen minus the allowed
/// lateness. A window `[start, start + size)` is **closed** once the watermark reaches its
/// end: its final aggregate is returned once, in [`WindowUpdate::closed`], and its state is
/// deleted — in the same transaction, so it is emitted exactly once even across crashes.
/// A record whose window is already closed is **late**: it is not folded but returned as a
/// copy bound for the late-records topic (with [`LATE_HEADER`]) and counted
/// (`kafka_eos_late_records_total`, [`Summary::late_records`](crate::Summary)); nothing is
/// dropped silently.
///
/// Trade-off of the allowed lateness (default zero): a larger one accepts more out-of-order
/// records into their window, and delays every window's result by as much, while keeping
/// that many more windows open in state.
///
/// A partition that receives no records does not advance its watermark: its windows close
/// when traffic resumes, or when the processor calls [`advance`](TumblingWindows::advance)
/// on a heartbeat record.
pub struct TumblingWindows<K, A> {
    store: Store<Key<K>, Val<A>>,
    size_ms: i64,
    lateness_ms: i64,
    late_topic: Topic,
}

impl<K, A> Clone for TumblingWindows<K, A> {
    fn clone(&self) -> Self {
        TumblingWindows {
            store: self.store.clone(),
            size_ms: self.size_ms,
            lateness_ms: self.lateness_ms,
            late_topic: self.late_topic.clone(),
        }
    }
}

/// A window's final aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedWindow<K, A> {
    /// The key.
    pub key: K,
    /// Window start, inclusive (ms since the epoch).
    pub start_ms: i64,
    /// Window end, exclusive.
    pub end_ms: i64,
    /// The aggregate.
    pub value: A,
}

/// What one record did to the windows.
#[derive(Debug)]
pub struct WindowUpdate<K, A> {
    /// The record itself, bound for the late-records topic, if its window had closed.
    pub late: Option<OutputRecord>,
    /// Windows that this record's event time closed, by end then key.
    pub closed: Vec<ClosedWindow<K, A>>,
}

#[derive(Serialize, Deserialize)]
enum Key<K> {
    Meta,
    Window(i64, K),
}

#[derive(Serialize, Deserialize)]
enum Val<A> {
    /// Largest event time seen; earliest end among the open windows.
    Meta {
        max_time: i64,
        next_close: i64,
    },
    Agg(A),
}

impl<K, A> TumblingWindows<K, A>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Default + 'static,
{
    /// Windows of `size` kept in store `store`; late records go to `late_topic`. Both are
    /// declared on `builder` (the late topic as an output topic).
    pub fn new(builder: &mut PipelineBuilder, store: impl Into<String>, size: Duration, late_topic: &str) -> Self {
        TumblingWindows {
            store: builder.store(store),
            size_ms: (size.as_millis() as i64).max(1),
            lateness_ms: 0,
            late_topic: builder.output_topic(late_topic),
        }
    }

    /// How far behind the largest event time a record may be and still join its window.
    /// Default: zero.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.lateness_ms = lateness.as_millis() as i64;
        self
    }

    /// The late-records topic.
    pub fn late_topic(&self) -> &Topic {
        &self.late_topic
    }

    /// Folds `record` (with `key` and event time `event_time_ms`) into its window, unless
    /// the window has closed; then closes the windows the new watermark has passed.
    pub fn add(
        &self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        fold: impl FnOnce(&mut A),
    ) -> Result<WindowUpdate<K, A>, StateError> {
        let start = event_time_ms.div_euclid(self.size_ms) * self.size_ms;
        let end = start.saturating_add(self.size_ms);
        let mut store = ctx.store(&self.store);
        let (max_time, next_close) = meta(&store.get(&Key::Meta)?);
        let watermark = max_time.saturating_sub(self.lateness_ms);
        if end <= watermark {
            ctx.tally(Tally::Late, self.store.name(), 1);
            let late = OutputRecord::copy_of(record, &self.late_topic);
            return Ok(WindowUpdate {
                late: Some(late.header(LATE_HEADER, watermark.to_string())),
                closed: Vec::new(),
            });
        }
        let window = Key::Window(start, key.clone());
        let mut agg = match store.get(&window)? {
            Some(Val::Agg(a)) => a,
            _ => A::default(),
        };
        fold(&mut agg);
        store.put(&window, &Val::Agg(agg))?;
        store.put(&Key::Meta, &Val::Meta { max_time, next_close: next_close.min(end) })?;
        let closed = self.advance(ctx, event_time_ms)?;
        Ok(WindowUpdate { late: None, closed })
    }

    /// Moves the watermark to at least `event_time_ms - allowed lateness` without adding a
    /// record (a heartbeat), and returns the windows that closes.
    pub fn advance(&self, ctx: &mut Context<'_>, event_time_ms: i64) -> Result<Vec<ClosedWindow<K, A>>, StateError> {
        let mut store = ctx.store(&self.store);
        let (max_time, mut next_close) = meta(&store.get(&Key::Meta)?);
        let max_time = max_time.max(event_time_ms);
        let watermark = max_time.saturating_sub(self.lateness_ms);
        let mut closed = Vec::new();
        if watermark >= next_close {
            next_close = i64::MAX;
            for (k, v) in store.entries()? {
                let (Key::Window(start, key), Val::Agg(value)) = (&k, v) else { continue };
                let end = start.saturating_add(self.size_ms);
                if end <= watermark {
                    closed.push(ClosedWindow { key: key.clone(), start_ms: *start, end_ms: end, value });
                    store.delete(&k)?;
                } else {
                    next_close = next_close.min(end);
                }
            }
            closed.sort_by_key(|w| w.end_ms);
        }
        store.put(&Key::Meta, &Val::Meta { max_time, next_close })?;
        Ok(closed)
    }
}

fn meta<A>(v: &Option<Val<A>>) -> (i64, i64) {
    match v {
        Some(Val::Meta { max_time, next_close }) => (*max_time, *next_close),
        _ => (i64::MIN, i64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::driver::tests::context;

    fn rec(offset: i64) -> InputRecord {
        InputRecord { value: Some(b"v".to_vec()), ..InputRecord::test("in", 0, offset) }
    }

    #[test]
    fn windows_close_once_when_the_watermark_passes_and_late_records_are_routed() {
        let mut b = crate::Pipeline::builder();
        let w = TumblingWindows::<String, u64>::new(&mut b, "w", Duration::from_millis(10), "late")
            .allowed_lateness(Duration::from_millis(5));
        let mut st = crate::state::tests::state_of(&b, 0);
        let mut out = Vec::new();
        let mut ctx = context(&mut st, &mut out);
        let add = |ctx: &mut Context<'_>, k: &str, t: i64| w.add(ctx, &rec(t), &k.to_string(), t, |a| *a += 1).unwrap();
        assert!(add(&mut ctx, "a", 1).closed.is_empty());
        assert!(add(&mut ctx, "b", 3).closed.is_empty());
        assert!(add(&mut ctx, "a", 12).closed.is_empty()); // watermark 7 < end 10
        let u = add(&mut ctx, "a", 8); // out of order but within lateness: joins [0,10)
        assert!(u.late.is_none() && u.closed.is_empty());
        let u = add(&mut ctx, "b", 15); // watermark 10: [0,10) closes
        let got: Vec<_> = u.closed.iter().map(|c| (c.key.as_str(), c.start_ms, c.value)).collect();
        assert_eq!(got.len(), 2);
        assert!(got.contains(&("a", 0, 2)) && got.contains(&("b", 0, 1)));
        let u = add(&mut ctx, "a", 9); // [0,10) is closed: late
        assert_eq!(u.late.as_ref().map(|r| r.topic.as_str()), Some("late"));
        assert!(add(&mut ctx, "a", 16).closed.is_empty(), "closed windows are never emitted again");
        let closed = w.advance(&mut ctx, 30).unwrap();
        assert_eq!(
            closed.iter().map(|c| (c.key.as_str(), c.start_ms, c.value)).collect::<Vec<_>>(),
            vec![("a", 10, 2), ("b", 10, 1)]
        );
        assert_eq!(st.commit(&Default::default()).tallies.get(&(Tally::Late, "w".to_string())), Some(&1));
    }
}
