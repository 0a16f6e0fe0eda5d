//! Hopping windows: overlapping windows of a fixed number of grid steps, one per step.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::grid::Shape;
use super::{window_options, ClosedWindow, Policy, Window, WindowAlign, WindowError, WindowUpdate};
use crate::record::InputRecord;
use crate::state::StateError;
use crate::{Context, PipelineBuilder};

/// Hopping (overlapping) event-time windows: a window of `size` starts every `advance`, so
/// each record falls in `size / advance` windows and is folded into each of them ("the last
/// hour, every 5 minutes"). Windows start on a [`WindowAlign`] grid of `advance` steps:
/// from the Unix epoch with [`new`](Self::new), offset or in calendar days of a time zone
/// with [`aligned`](Self::aligned) (a week of Berlin days, advancing by a day).
///
/// Close, lateness, retention and corrections follow the [window rules](crate::operators#windows), per window:
/// a late record is folded into each of its windows still open or within its retention
/// (correcting those that closed), and if any of its windows is past its retention it is
/// *also* returned in [`WindowUpdate::late`]: the windows that missed it are those whose
/// end + retention ≤ the watermark in its [`LATE_HEADER`](super::LATE_HEADER).
///
/// Cost: `size / advance` store reads and writes per record (tumbling: one), and as many
/// windows in state per key.
#[derive(Clone)]
pub struct HoppingWindows<K, A> {
    policy: Policy<K, A>,
    shape: Shape,
}

window_options!(HoppingWindows);

/// Most windows a record may belong to: size ÷ advance. Each costs a store write per record
/// (the cost against a keyed aggregate: `docs/state.md`).
pub const MAX_STEPS: u32 = 1_000;

impl<K, A> HoppingWindows<K, A>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Default + Clone + 'static,
{
    /// Windows of `size` starting every `advance` from the Unix epoch, kept in store `store`;
    /// late records go to `late_topic` (both declared on `builder`).
    ///
    /// # Errors
    /// [`WindowError::Shape`] unless `size` is a whole, non-zero number of `advance`s (every
    /// window then starts and ends on the same grid, which is what lets one grid serve
    /// offsets and calendar days alike).
    pub fn new(
        builder: &mut PipelineBuilder,
        store: impl Into<String>,
        size: Duration,
        advance: Duration,
        late_topic: &str,
    ) -> Result<Self, WindowError> {
        let (size_ms, advance_ms) = (size.as_millis(), advance.as_millis());
        if advance_ms == 0 || size_ms == 0 || size_ms % advance_ms != 0 {
            return Err(WindowError::Shape(format!(
                "a hopping size ({size_ms} ms) must be a non-zero multiple of its advance ({advance_ms} ms)"
            )));
        }
        let steps = u32::try_from(size_ms / advance_ms)
            .map_err(|_| WindowError::Shape(format!("{size_ms} ms / {advance_ms} ms windows per record")))?;
        Self::aligned(builder, store, WindowAlign::fixed(advance), steps, late_topic)
    }

    /// Windows `steps` steps of `advance` long, one starting on every boundary of `advance`
    /// (`aligned(b, "weekly", WindowAlign::days_in("Europe/Berlin")?, 7, "late")`: the last
    /// seven Berlin days, every day).
    ///
    /// # Errors
    /// [`WindowError::Shape`] if `steps` is zero.
    pub fn aligned(
        builder: &mut PipelineBuilder,
        store: impl Into<String>,
        advance: WindowAlign,
        steps: u32,
        late_topic: &str,
    ) -> Result<Self, WindowError> {
        if steps == 0 {
            return Err(WindowError::Shape("a hopping window must span at least one step".into()));
        }
        // Every record is folded into `steps` windows (a store write each): a 1-day window
        // advancing by 1 ms would mean 86.4 million writes per record.
        if steps > MAX_STEPS {
            return Err(WindowError::Shape(format!(
                "a hopping window spans {steps} advances, more than {MAX_STEPS}: each record would update that many windows; use a longer advance"
            )));
        }
        let shape = Shape { align: advance, span: i64::from(steps) };
        Ok(HoppingWindows { policy: Policy::new(builder, store.into(), late_topic, "hopping windows"), shape })
    }

    /// Folds `record` (with `key` and event time `event_time_ms`) into each of its windows
    /// (`fold` runs once per window, earliest start first), as corrections for those that
    /// closed within their retention; then closes the windows the new watermark has passed.
    pub fn add(
        &self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        mut fold: impl FnMut(&mut A),
    ) -> Result<WindowUpdate<K, A>, StateError> {
        self.add_with_window(ctx, record, key, event_time_ms, |_, a| fold(a))
    }

    /// [`add`](Self::add), with the fold told the window it folds into (each of the
    /// record's windows in turn, earliest start first).
    pub fn add_with_window(
        &self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        mut fold: impl FnMut(Window, &mut A),
    ) -> Result<WindowUpdate<K, A>, StateError> {
        self.shape.add(&self.policy, ctx, record, key, event_time_ms, &mut fold)
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

    #[test]
    fn shapes_that_do_not_fit_a_grid_are_refused() {
        let mut b = crate::Pipeline::builder();
        let ms = Duration::from_millis;
        assert!(HoppingWindows::<String, u64>::new(&mut b, "h1", ms(10), ms(3), "late").is_err());
        assert!(HoppingWindows::<String, u64>::new(&mut b, "h2", ms(10), ms(0), "late").is_err());
        let day = Duration::from_secs(86_400);
        let err = HoppingWindows::<String, u64>::new(&mut b, "h4", day, ms(1), "late").err();
        assert!(err.is_some_and(|e| e.to_string().contains("longer advance")), "a day advancing by 1 ms is refused");
        assert!(
            HoppingWindows::<String, u64>::new(&mut b, "h5", ms(10_000), ms(10), "late").is_ok(),
            "1,000 steps fit"
        );
        let err = HoppingWindows::<String, u64>::aligned(&mut b, "h3", WindowAlign::fixed(ms(5)), 0, "late").err();
        assert!(matches!(err, Some(WindowError::Shape(_))));
    }

    #[test]
    fn each_record_counts_in_every_overlapping_window_and_corrections_apply_per_window() {
        let mut b = crate::Pipeline::builder();
        let w = HoppingWindows::<String, u64>::new(
            &mut b,
            "h",
            Duration::from_millis(10),
            Duration::from_millis(5),
            "late",
        )
        .unwrap()
        .retention(Duration::from_millis(5));
        let ran = run(&b, |mut ctx| {
            let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"k".to_string(), t, |a| *a += 1).unwrap();
            assert!(add(&mut ctx, 3).closed.is_empty()); // [-5,5) and [0,10)
            let u = add(&mut ctx, 7); // [0,10) and [5,15); watermark 7 closes [-5,5)
            assert_eq!(results(&u.closed), vec![("k", -5, 1, 0)]);
            let u = add(&mut ctx, 12); // [5,15) and [10,20); watermark 12 closes [0,10)
            assert_eq!(results(&u.closed), vec![("k", 0, 2, 0)]);
            // Watermark 12: [-5,5) closed at 5 is past its retention (5 + 5 <= 12), [0,10) is
            // within it (10 + 5 > 12), [5,15) is open: folded into the last two, and late too.
            let u = add(&mut ctx, 4);
            assert_eq!(results(&u.closed), vec![("k", 0, 3, 1)]);
            let late = u.late.expect("[-5,5) missed it");
            assert!(late
                .headers
                .iter()
                .any(|(k, v)| k == crate::operators::LATE_HEADER && v.as_deref() == Some(&b"12"[..])));
            let closed = w.advance(&mut ctx, 25).unwrap();
            assert_eq!(results(&closed), vec![("k", 5, 2, 0), ("k", 10, 1, 0)]);
        });
        let tallies = ran.tallies;
        assert_eq!(tallies.get(&(Tally::Correction, "h".to_string())), Some(&1));
        assert_eq!(tallies.get(&(Tally::Late, "h".to_string())), Some(&1));
    }
}
