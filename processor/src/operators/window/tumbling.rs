//! Tumbling windows: one window per grid step, each record in exactly one.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::grid::Shape;
use super::{window_options, ClosedWindow, Policy, Window, WindowAlign, WindowUpdate};
use crate::record::InputRecord;
use crate::state::StateError;
use crate::{Context, PipelineBuilder};

/// Tumbling (fixed, non-overlapping) event-time windows, one aggregate per key and window,
/// folded by the caller. Windows are `[start, start + size)` on a [`WindowAlign`] grid: UTC
/// aligned with [`new`](Self::new), offset or calendar days in a time zone with
/// [`aligned`](Self::aligned).
///
/// Close, lateness, retention and corrections follow the [window rules](crate::operators#windows): a window
/// closes once the watermark (largest event time − allowed lateness) reaches its end, and
/// its result is returned once with revision 0. A record whose window has closed is folded
/// into it as a correction while the window is within its
/// [`retention`](Self::retention) (default zero), and otherwise returned as a copy bound for
/// the late-records topic with [`LATE_HEADER`](super::LATE_HEADER) and counted
/// (`kafka_eos_late_records_total`, [`Summary::late_records`](crate::Summary)); nothing is
/// dropped silently.
///
/// A partition that receives no records does not advance its watermark: its windows close
/// when traffic resumes, or when the processor calls [`advance`](Self::advance) (on a
/// heartbeat record or a timer).
#[derive(Clone)]
pub struct TumblingWindows<K, A> {
    pub(super) policy: Policy<K, A>,
    shape: Shape,
}

window_options!(TumblingWindows);

impl<K, A> TumblingWindows<K, A>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Default + Clone + 'static,
{
    /// Windows of `size` from the Unix epoch (UTC days for a size of a day) kept in store
    /// `store`; late records go to `late_topic`. Both are declared on `builder` (the late
    /// topic as an output topic).
    pub fn new(builder: &mut PipelineBuilder, store: impl Into<String>, size: Duration, late_topic: &str) -> Self {
        Self::aligned(builder, store, WindowAlign::fixed(size), late_topic)
    }

    /// Windows of one step of `align`: `WindowAlign::fixed(day).offset(6 h)` for days from
    /// 06:00 UTC, `WindowAlign::days_in("Europe/Berlin")?` for Berlin calendar days.
    pub fn aligned(
        builder: &mut PipelineBuilder,
        store: impl Into<String>,
        align: WindowAlign,
        late_topic: &str,
    ) -> Self {
        TumblingWindows {
            policy: Policy::new(builder, store.into(), late_topic, "tumbling windows"),
            shape: Shape { align, span: 1 },
        }
    }

    /// Folds `record` (with `key` and event time `event_time_ms`) into its window — or, if
    /// the window has closed, into its retained result as a correction, or else returns it
    /// as late — then closes the windows the new watermark has passed.
    pub fn add(
        &self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        fold: impl FnOnce(&mut A),
    ) -> Result<WindowUpdate<K, A>, StateError> {
        self.add_with_window(ctx, record, key, event_time_ms, |_, a| fold(a))
    }

    /// [`add`](Self::add), with the fold told the window it folds into.
    pub fn add_with_window(
        &self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        fold: impl FnOnce(Window, &mut A),
    ) -> Result<WindowUpdate<K, A>, StateError> {
        // A tumbling record has exactly one window, so the fold runs at most once.
        let mut fold = Some(fold);
        let mut once = |w: Window, a: &mut A| {
            if let Some(f) = fold.take() {
                f(w, a)
            }
        };
        self.shape.add(&self.policy, ctx, record, key, event_time_ms, &mut once)
    }

    /// Moves the watermark to at least `event_time_ms - allowed lateness` without adding a
    /// record (a heartbeat, a timer), and returns the windows that closes.
    pub fn advance(&self, ctx: &mut Context<'_>, event_time_ms: i64) -> Result<Vec<ClosedWindow<K, A>>, StateError> {
        self.shape.advance(&self.policy, ctx, event_time_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{rec, results, run};
    use super::*;
    use crate::state::Tally;

    type Add<'w> = Box<dyn Fn(&mut Context<'_>, &str, i64) -> WindowUpdate<String, u64> + 'w>;

    fn counter(w: &TumblingWindows<String, u64>) -> Add<'_> {
        Box::new(move |ctx, k, t| w.add(ctx, &rec(t), &k.to_string(), t, |a| *a += 1).unwrap())
    }

    #[test]
    fn windows_close_once_when_the_watermark_passes_and_late_records_are_routed() {
        let mut b = crate::Pipeline::builder();
        let w = TumblingWindows::<String, u64>::new(&mut b, "w", Duration::from_millis(10), "late")
            .allowed_lateness(Duration::from_millis(5));
        let ran = run(&b, |mut ctx| {
            let add = counter(&w);
            assert!(add(&mut ctx, "a", 1).closed.is_empty());
            assert!(add(&mut ctx, "b", 3).closed.is_empty());
            assert!(add(&mut ctx, "a", 12).closed.is_empty()); // watermark 7 < end 10
            let u = add(&mut ctx, "a", 8); // out of order but within lateness: joins [0,10)
            assert!(u.late.is_none() && u.closed.is_empty());
            let u = add(&mut ctx, "b", 15); // watermark 10: [0,10) closes
            let got = results(&u.closed);
            assert_eq!(got.len(), 2);
            assert!(got.contains(&("a", 0, 2, 0)) && got.contains(&("b", 0, 1, 0)));
            let u = add(&mut ctx, "a", 9); // [0,10) is closed, no retention: late
            assert_eq!(u.late.as_ref().map(|r| r.topic.as_str()), Some("late"));
            assert!(u.closed.is_empty());
            assert!(add(&mut ctx, "a", 16).closed.is_empty(), "closed windows are never emitted again");
            let closed = w.advance(&mut ctx, 30).unwrap();
            assert_eq!(results(&closed), vec![("a", 10, 2, 0), ("b", 10, 1, 0)]);
        });
        let tallies = ran.tallies;
        assert_eq!(tallies.get(&(Tally::Late, "w".to_string())), Some(&1));
        assert_eq!(tallies.get(&(Tally::Correction, "w".to_string())), None);
        assert_eq!(ran.entries, 1, "only the watermark is left");
    }

    #[test]
    fn state_written_before_corrections_existed_is_read() {
        use super::super::{Key, Val};
        // The watermark as the first TumblingWindows wrote it: variant 0, then two i64s.
        let old = Val::<u64>::Meta { max_time: 20, next_close: 30 };
        let mut bytes = vec![0xB1, 1, 0, 0, 0, 0];
        bytes.extend(20i64.to_le_bytes().into_iter().chain(30i64.to_le_bytes()));
        assert_eq!(crate::state::format::encode_value(1, &old).unwrap(), bytes);
        let mut b = crate::Pipeline::builder();
        let w = TumblingWindows::<String, u64>::new(&mut b, "w", Duration::from_millis(10), "late");
        run(&b, |mut ctx| {
            let mut store = ctx.store(&w.policy.store);
            store.put(&Key::Meta, &old).unwrap();
            store.put(&Key::Window(20, "a".to_string()), &Val::Agg(5)).unwrap();
            let add = counter(&w);
            assert!(add(&mut ctx, "a", 19).late.is_some(), "the old watermark holds: [10,20) is closed");
            assert!(add(&mut ctx, "a", 25).closed.is_empty());
            assert_eq!(results(&add(&mut ctx, "a", 30).closed), vec![("a", 20, 6, 0)]);
        });
    }

    #[test]
    fn late_records_within_the_retention_correct_the_window_with_a_new_revision() {
        let mut b = crate::Pipeline::builder();
        let w = TumblingWindows::<String, u64>::new(&mut b, "w", Duration::from_millis(10), "late")
            .retention(Duration::from_millis(20));
        let ran = run(&b, |mut ctx| {
            let add = counter(&w);
            add(&mut ctx, "a", 1);
            assert_eq!(results(&add(&mut ctx, "a", 10).closed), vec![("a", 0, 1, 0)]);
            // Late for [0,10) but within its retention (closed at 10, kept until watermark 30).
            let u = add(&mut ctx, "a", 5);
            assert!(u.late.is_none());
            assert_eq!(results(&u.closed), vec![("a", 0, 2, 1)]);
            assert_eq!(results(&add(&mut ctx, "a", 2).closed), vec![("a", 0, 3, 2)]);
            // A key the window never held: its first result is revision 0.
            assert_eq!(results(&add(&mut ctx, "b", 3).closed), vec![("b", 0, 1, 0)]);
            // Watermark 29: [0,10) is still kept (closed at 10, retained until 30).
            let u = add(&mut ctx, "a", 29);
            assert_eq!(results(&u.closed), vec![("a", 10, 1, 0)]);
            assert_eq!(results(&add(&mut ctx, "a", 9).closed), vec![("a", 0, 4, 3)]);
            // Watermark 30: [0,10) is past its retention and deleted; [20,30) closes.
            assert_eq!(results(&add(&mut ctx, "c", 30).closed), vec![("a", 20, 1, 0)]);
            let u = add(&mut ctx, "a", 8);
            assert!(u.closed.is_empty() && u.late.is_some(), "past the retention: late, as without corrections");
            assert_eq!(results(&add(&mut ctx, "a", 15).closed), vec![("a", 10, 2, 1)]);
        });
        let tallies = ran.tallies;
        assert_eq!(tallies.get(&(Tally::Correction, "w".to_string())), Some(&5));
        assert_eq!(tallies.get(&(Tally::Late, "w".to_string())), Some(&1));
        // Left: the watermark, a/[10,20) and a/[20,30) retained, c/[30,40) open.
        assert_eq!(ran.entries, 4);
    }

    #[test]
    fn offset_windows_start_at_the_offset() {
        let mut b = crate::Pipeline::builder();
        let align = WindowAlign::fixed(Duration::from_millis(10)).offset(Duration::from_millis(3));
        let w = TumblingWindows::<String, u64>::aligned(&mut b, "w", align, "late");
        run(&b, |mut ctx| {
            let add = counter(&w);
            let mut closed = add(&mut ctx, "a", 2).closed; // [-7, 3)
            closed.extend(add(&mut ctx, "a", 3).closed); // [3, 13); closes [-7, 3)
            closed.extend(add(&mut ctx, "a", 12).closed);
            closed.extend(w.advance(&mut ctx, 13).unwrap());
            assert_eq!(
                closed.iter().map(|c| (c.start_ms, c.end_ms, c.value)).collect::<Vec<_>>(),
                vec![(-7, 3, 1), (3, 13, 2)]
            );
        });
    }

    #[cfg(feature = "time-zones")]
    #[test]
    fn berlin_business_days_of_23_and_25_hours() {
        let ms = |s: &str| s.parse::<jiff::Timestamp>().unwrap().as_millisecond();
        let mut b = crate::Pipeline::builder();
        let days = WindowAlign::days_in("Europe/Berlin").unwrap();
        let w = TumblingWindows::<String, u64>::aligned(&mut b, "w", days, "late");
        run(&b, |mut ctx| {
            let add = counter(&w);
            let mut closed = Vec::new();
            for t in [
                "2024-03-30T22:59:59Z", // 23:59:59 CET, March 30th
                "2024-03-30T23:00:00Z", // 00:00 CET, March 31st
                "2024-03-31T21:59:59Z", // 23:59:59 CEST
                "2024-03-31T22:00:00Z", // 00:00 CEST, April 1st
                "2024-10-26T22:00:00Z", // 00:00 CEST, October 27th
                "2024-10-27T22:59:59Z", // 23:59:59 CET
                "2024-10-27T23:00:00Z", // 00:00 CET, October 28th
            ] {
                closed.extend(add(&mut ctx, "m", ms(t)).closed);
            }
            closed.extend(w.advance(&mut ctx, ms("2024-12-01T00:00:00Z")).unwrap());
            let got: Vec<_> =
                closed.iter().map(|c| (c.start_ms, (c.end_ms - c.start_ms) / 3_600_000, c.value)).collect();
            assert_eq!(
                got,
                vec![
                    (ms("2024-03-29T23:00:00Z"), 24, 1),
                    (ms("2024-03-30T23:00:00Z"), 23, 2), // the day clocks go forward
                    (ms("2024-03-31T22:00:00Z"), 24, 1),
                    (ms("2024-10-26T22:00:00Z"), 25, 2), // the day clocks go back
                    (ms("2024-10-27T23:00:00Z"), 24, 1),
                ]
            );
        });
    }
}
