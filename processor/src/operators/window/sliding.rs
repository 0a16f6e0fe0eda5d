//! Sliding windows: for every record time of a key, the window of `size` ending at it.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::list::{self, Listed, Merge};
use super::stored::{self, Slide};
use super::{window_options, ClosedWindow, Key, Policy, Val, WindowError, WindowUpdate};
use crate::record::InputRecord;
use crate::state::StateError;
use crate::{Context, PipelineBuilder};

/// Sliding event-time windows: for every distinct event time `t` of a key, the window
/// `(t - size, t]` — reported as `start_ms = t - size + 1`, `end_ms = t + 1` — holding every
/// record of the key whose time lies in it ("the total of the last 10 minutes, at each
/// payment"). Records at the same time share one window.
///
/// This is Kafka Streams' sliding window *ending at each record*; Kafka Streams also emits
/// the windows *starting just after* each record, which only ever hold a subset of some
/// record's later window, and which this operator does not produce. The same definition as
/// a hopping window with a 1 ms advance, restricted to the windows that end at a record.
///
/// Aggregates are built from each record's **contribution** (its `fold` applied to
/// `A::default()`), combined with `merge`, which must be associative and commutative (a
/// sum, a count, a max): a late record's contribution is merged into the later windows it
/// falls in after theirs.
///
/// The fold runs once per record, to make its contribution, so it is not told a window (no
/// `add_with_window`): under [`Trigger::every_update`](super::Trigger::every_update) the
/// update lists every window the contribution went into, by end.
///
/// Close, lateness, retention and corrections follow the [window rules](crate::operators#windows): the window
/// ending at `t` closes when the watermark passes `t`, and is returned at the first sweep
/// after that (sweeps run at most once per `size / 4` of watermark progress, since every
/// record time closes a window and each sweep reads the whole store); a record is late when its own window
/// is past its retention (`t + 1 + retention ≤ watermark`), and otherwise corrects every
/// closed window it falls in. State per key: every record time of the last `size` +
/// retention, with its contribution and its window; a record costs one read and one write of
/// that list, and a merge per window it falls in.
#[derive(Clone)]
pub struct SlidingWindows<K, A> {
    policy: Policy<K, A>,
    size_ms: i64,
    merge: Merge<A>,
}

window_options!(SlidingWindows);

impl<K, A> SlidingWindows<K, A>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Default + Clone + 'static,
{
    /// Windows of `size` ending at each record, kept in store `store`; late records go to
    /// `late_topic` (both declared on `builder`); `merge` combines contributions.
    ///
    /// # Errors
    /// [`WindowError::Shape`] if `size` is zero.
    pub fn new(
        builder: &mut PipelineBuilder,
        store: impl Into<String>,
        size: Duration,
        late_topic: &str,
        merge: impl Fn(&mut A, A) + Send + Sync + 'static,
    ) -> Result<Self, WindowError> {
        let (policy, size_ms, merge) =
            list::parts(builder, store.into(), (late_topic, "sliding windows"), (size, "a sliding window"), merge)?;
        Ok(SlidingWindows { policy, size_ms, merge })
    }

    /// Folds `record` (with `key` and event time `event_time_ms`) into the window ending at
    /// it and into every later window of the key that it falls in (corrections for those that
    /// closed); then closes the windows the new watermark has passed.
    pub fn add(
        &self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        fold: impl FnOnce(&mut A),
    ) -> Result<WindowUpdate<K, A>, StateError> {
        let (size, t) = (self.size_ms, event_time_ms);
        let mut own = A::default();
        fold(&mut own);
        let late_from = t.saturating_add(1);
        let mut update = list::visit(&self.policy, ctx, record, key, late_from, |slides, watermark, update, clock| {
            let at = slides.partition_point(|s: &Slide<A>| s.t < t);
            if slides.get(at).is_none_or(|s| s.t != t) {
                let mut window = A::default();
                for s in slides[..at].iter().filter(|s| s.t > t.saturating_sub(size)) {
                    (self.merge)(&mut window, s.own.clone());
                }
                let slide = Slide { t, own: A::default(), window, revision: None, closed: false, fired: false };
                slides.insert(at, slide);
            }
            (self.merge)(&mut slides[at].own, own.clone());
            for s in slides[at..].iter_mut().take_while(|s| s.t < t.saturating_add(size)) {
                (self.merge)(&mut s.window, own.clone());
                s.closed = false;
                let closing = s.close(size) <= watermark;
                list::report(&self.policy, update, key, s, size, closing);
                if closing {
                    update.closed.push(list::emit(key, s, size, false));
                }
                list::schedule(&self.policy, clock, s, size);
            }
        })?;
        update.closed.extend(self.advance(ctx, t)?);
        Ok(update)
    }

    /// Moves the watermark to at least `event_time_ms - allowed lateness` without adding a
    /// record (a heartbeat, a timer), and returns the windows that closes.
    pub fn advance(&self, ctx: &mut Context<'_>, event_time_ms: i64) -> Result<Vec<ClosedWindow<K, A>>, StateError> {
        list::advance::<K, A, Slide<A>>(&self.policy, ctx, event_time_ms, self.size_ms)
    }
}

impl<A> Listed<A> for Slide<A> {
    fn close(&self, _: i64) -> i64 {
        self.t.saturating_add(1)
    }
    /// Kept while a window that may still change needs its contribution.
    fn done(&self, size: i64) -> i64 {
        self.t.saturating_add(size).saturating_add(1)
    }
    fn span(&self, size: i64) -> (i64, i64) {
        (self.t.saturating_sub(size).saturating_add(1), self.t.saturating_add(1))
    }
    fn state(&mut self) -> (&mut A, &mut Option<u32>, &mut bool, &mut bool) {
        (&mut self.window, &mut self.revision, &mut self.closed, &mut self.fired)
    }
    fn entry<K>(key: K) -> Key<K> {
        Key::Slides(key)
    }
    fn list(value: Val<A>) -> Option<Vec<Self>> {
        match value {
            Val::Slides(list) => Some(list),
            Val::FiredSlides(list) => Some(stored::unpaired(list, |s| &mut s.fired)),
            _ => None,
        }
    }
    fn value_of(list: Vec<Self>) -> Val<A> {
        stored::paired(list, |s| &mut s.fired).map_or_else(Val::Slides, Val::FiredSlides)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{rec, results, run};
    use super::*;
    use crate::state::Tally;

    #[test]
    fn closes_are_swept_at_most_once_per_quarter_size_of_watermark_progress() {
        let mut b = crate::Pipeline::builder();
        let w =
            SlidingWindows::<String, u64>::new(&mut b, "sl", Duration::from_millis(8), "late", |a, b| *a += b).unwrap();
        run(&b, |mut ctx| {
            let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"k".to_string(), t, |a| *a += 1).unwrap();
            let ends = |c: Vec<ClosedWindow<String, u64>>| c.iter().map(|c| c.end_ms - 1).collect::<Vec<_>>();
            assert!(ends(add(&mut ctx, 0).closed).is_empty());
            assert_eq!(ends(add(&mut ctx, 1).closed), vec![0], "a sweep at watermark 1");
            assert!(ends(add(&mut ctx, 2).closed).is_empty(), "the window ending at 1 waits: 2 < 1 + 8 / 4");
            assert_eq!(ends(add(&mut ctx, 3).closed), vec![1, 2]);
            assert_eq!(ends(w.advance(&mut ctx, 4).unwrap()), Vec::<i64>::new());
            assert_eq!(ends(w.advance(&mut ctx, 5).unwrap()), vec![3]);
        });
    }

    #[test]
    fn each_record_time_has_the_window_ending_at_it_and_late_records_correct_later_windows() {
        let mut b = crate::Pipeline::builder();
        let w = SlidingWindows::<String, u64>::new(&mut b, "sl", Duration::from_millis(10), "late", |a, b| *a += b)
            .unwrap()
            .retention(Duration::from_millis(20));
        assert!(SlidingWindows::<String, u64>::new(&mut b, "z", Duration::ZERO, "late", |a, b| *a += b).is_err());
        let ran = run(&b, |mut ctx| {
            let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"k".to_string(), t, |a| *a += 1).unwrap();
            let mut closed = Vec::new();
            for t in [0, 5, 5, 12] {
                closed.extend(add(&mut ctx, t).closed);
            }
            // Watermark 12: (-10,0] and (-5,5] closed; (2,12] holds 5, 5 and 12.
            assert_eq!(results(&closed), vec![("k", -9, 1, 0), ("k", -4, 3, 0)]);
            assert_eq!((closed[1].start_ms, closed[1].end_ms), (-4, 6));
            // 3 is late: its own window (-7,3] is new (revision 0) and holds 0 and 3; it
            // corrects (-5,5]; (2,12] is still open.
            let u = add(&mut ctx, 3);
            assert_eq!(results(&u.closed), vec![("k", -6, 2, 0), ("k", -4, 4, 1)]);
            let closed = w.advance(&mut ctx, 40).unwrap();
            assert_eq!(results(&closed), vec![("k", 3, 4, 0)]);
            // Watermark 40: the window ending at 12 closed at 13, kept until 33: gone.
            assert!(add(&mut ctx, 12).late.is_some());
            // 12's contribution is kept until no window can need it (12 + 10 + 1 + 20).
            assert!(w.advance(&mut ctx, 43).unwrap().is_empty());
        });
        assert_eq!(ran.tallies.get(&(Tally::Correction, "sl".to_string())), Some(&2));
        assert_eq!(ran.tallies.get(&(Tally::Late, "sl".to_string())), Some(&1));
        assert_eq!(ran.entries, 1, "only the watermark is left");
    }
}
