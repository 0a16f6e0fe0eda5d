//! Session windows: a key's records closer than an inactivity gap form one session.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::list::{self, Listed, Merge};
use super::stored;
use super::{
    window_options, ClosedWindow, Key, Policy, RetractedWindow, Session, Val, Window, WindowError, WindowUpdate,
};
use crate::record::InputRecord;
use crate::state::StateError;
use crate::{Context, PipelineBuilder};

/// Session windows: per key, records whose event times are at most `gap` apart belong to
/// one session `[first, last]`, reported as `start_ms = first`, `end_ms = last + 1`. A
/// record within `gap` of two sessions bridges them into one, combining their aggregates
/// with the `merge` function given to [`new`](Self::new) (called in start order: the
/// earlier session's aggregate absorbs the later's).
///
/// - A session **closes** when the watermark reaches `last + gap` (no on-time record can
///   join it any more) and is returned once, revision 0 — at the first sweep after that:
///   sweeps run at most once per `gap / 4` of watermark progress (each one reads the whole
///   store, and with many keys some session is always about to close).
/// - With a [`retention`](Self::retention) `R` (default zero), closed sessions are kept
///   until the watermark reaches `last + gap + R`. A record is **late** — returned in
///   [`WindowUpdate::late`] and not folded — when `event time + R ≤ watermark`; otherwise
///   it is folded even if its session closed, which emits a **correction**: the session's
///   result again, revision + 1. (That bound guarantees no session within `gap` of a
///   folded record has been deleted, so a record never starts a session that should have
///   merged with a forgotten one.)
/// - A late record that extends a closed session backwards, or bridges it with a later
///   session, changes which (key, start) the merged session has: the results emitted for
///   the starts that no longer exist come back in [`WindowUpdate::retracted`] (delete them
///   downstream), and the merged session is emitted under its start — as a correction if it
///   is closed, or when it closes if the merge reopened it.
///
/// State: one entry per key holding its live sessions, so a record costs one read and one
/// write of that key's sessions (a key with many sessions within the retention costs more).
#[derive(Clone)]
pub struct SessionWindows<K, A> {
    policy: Policy<K, A>,
    gap_ms: i64,
    merge: Merge<A>,
}

window_options!(SessionWindows);

impl<K, A> SessionWindows<K, A>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Default + Clone + 'static,
{
    /// Sessions with inactivity `gap`, kept in store `store`; late records go to
    /// `late_topic` (both declared on `builder`); `merge(earlier, later)` combines the
    /// aggregates of two sessions a record bridges (a sum: `|a, b| *a += b`).
    ///
    /// # Errors
    /// [`WindowError::Shape`] if `gap` is zero.
    pub fn new(
        builder: &mut PipelineBuilder,
        store: impl Into<String>,
        gap: Duration,
        late_topic: &str,
        merge: impl Fn(&mut A, A) + Send + Sync + 'static,
    ) -> Result<Self, WindowError> {
        let (policy, gap_ms, merge) =
            list::parts(builder, store.into(), (late_topic, "session windows"), (gap, "a session gap"), merge)?;
        Ok(SessionWindows { policy, gap_ms, merge })
    }

    /// Folds `record` (with `key` and event time `event_time_ms`) into its session, merging
    /// the sessions it bridges; then closes the sessions the new watermark has passed.
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

    /// [`add`](Self::add), with the fold told the session it folds into: its start and end
    /// with this record and the sessions it bridges (the fold runs after the merge).
    pub fn add_with_window(
        &self,
        ctx: &mut Context<'_>,
        record: &InputRecord,
        key: &K,
        event_time_ms: i64,
        fold: impl FnOnce(Window, &mut A),
    ) -> Result<WindowUpdate<K, A>, StateError> {
        let (gap, t) = (self.gap_ms, event_time_ms);
        let mut update = list::visit(&self.policy, ctx, record, key, t, |sessions, watermark, update, clock| {
            let (near, rest): (Vec<_>, Vec<_>) = std::mem::take(sessions)
                .into_iter()
                .partition(|s: &Session<A>| s.start.saturating_sub(gap) <= t && t <= s.last.saturating_add(gap));
            *sessions = rest;
            let mut parts = near.into_iter();
            let mut merged = parts.next().unwrap_or(Session {
                start: t,
                last: t,
                value: A::default(),
                revision: None,
                closed: false,
                fired: false,
            });
            for later in parts {
                if later.revision.is_some() {
                    update.retracted.push(RetractedWindow { key: key.clone(), start_ms: later.start });
                }
                merged.last = merged.last.max(later.last);
                merged.fired |= later.fired;
                (self.merge)(&mut merged.value, later.value);
            }
            if t < merged.start {
                if merged.revision.take().is_some() {
                    update.retracted.push(RetractedWindow { key: key.clone(), start_ms: merged.start });
                }
                merged.start = t;
            }
            merged.last = merged.last.max(t);
            let (start_ms, end_ms) = merged.span(gap);
            fold(Window { start_ms, end_ms }, &mut merged.value);
            merged.closed = false;
            let closing = merged.close(gap) <= watermark;
            list::report(&self.policy, update, key, &mut merged, gap, closing);
            if closing {
                update.closed.push(list::emit(key, &mut merged, gap, false));
            }
            list::schedule(&self.policy, clock, &mut merged, gap);
            sessions.insert(sessions.partition_point(|s| s.start < merged.start), merged);
        })?;
        update.closed.extend(self.advance(ctx, t)?);
        Ok(update)
    }

    /// Moves the watermark to at least `event_time_ms - allowed lateness` without adding a
    /// record (a heartbeat, a timer), and returns the sessions that closes.
    pub fn advance(&self, ctx: &mut Context<'_>, event_time_ms: i64) -> Result<Vec<ClosedWindow<K, A>>, StateError> {
        list::advance::<K, A, Session<A>>(&self.policy, ctx, event_time_ms, self.gap_ms)
    }
}

impl<A> Listed<A> for Session<A> {
    fn close(&self, gap: i64) -> i64 {
        self.last.saturating_add(gap)
    }
    fn done(&self, gap: i64) -> i64 {
        self.close(gap)
    }
    fn span(&self, _: i64) -> (i64, i64) {
        (self.start, self.last.saturating_add(1))
    }
    fn state(&mut self) -> (&mut A, &mut Option<u32>, &mut bool, &mut bool) {
        (&mut self.value, &mut self.revision, &mut self.closed, &mut self.fired)
    }
    fn entry<K>(key: K) -> Key<K> {
        Key::Sessions(key)
    }
    fn list(value: Val<A>) -> Option<Vec<Self>> {
        match value {
            Val::Sessions(list) => Some(list),
            Val::FiredSessions(list) => Some(stored::unpaired(list, |s| &mut s.fired)),
            _ => None,
        }
    }
    fn value_of(list: Vec<Self>) -> Val<A> {
        stored::paired(list, |s| &mut s.fired).map_or_else(Val::Sessions, Val::FiredSessions)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{rec, results, run};
    use super::*;
    use crate::state::Tally;

    fn sessions(b: &mut PipelineBuilder, retention_ms: u64) -> SessionWindows<String, u64> {
        SessionWindows::new(b, "s", Duration::from_millis(10), "late", |a, b| *a += b)
            .unwrap()
            .retention(Duration::from_millis(retention_ms))
    }

    fn retracted(u: &WindowUpdate<String, u64>) -> Vec<(&str, i64)> {
        u.retracted.iter().map(|r| (r.key.as_str(), r.start_ms)).collect()
    }

    #[test]
    fn a_zero_gap_is_refused() {
        let mut b = crate::Pipeline::builder();
        let err = SessionWindows::<String, u64>::new(&mut b, "s", Duration::ZERO, "late", |a, b| *a += b).err();
        assert!(matches!(err, Some(WindowError::Shape(_))));
    }

    #[test]
    fn records_within_the_gap_share_a_session_that_closes_after_the_gap() {
        let mut b = crate::Pipeline::builder();
        let w = sessions(&mut b, 0);
        let ran = run(&b, |mut ctx| {
            let add =
                |ctx: &mut Context<'_>, k: &str, t: i64| w.add(ctx, &rec(t), &k.to_string(), t, |a| *a += 1).unwrap();
            assert!(add(&mut ctx, "a", 0).closed.is_empty());
            assert!(add(&mut ctx, "a", 10).closed.is_empty(), "exactly the gap apart: same session");
            assert!(add(&mut ctx, "b", 12).closed.is_empty());
            // 11 after a's last record: a new session; watermark 21 closes [0,10] (at 10 + 10).
            let u = add(&mut ctx, "a", 21);
            assert_eq!(results(&u.closed), vec![("a", 0, 2, 0)]);
            assert_eq!(u.closed[0].end_ms, 11);
            let u = add(&mut ctx, "a", 5);
            assert!(u.late.is_some() && u.closed.is_empty(), "watermark 21: no retention, so late");
            assert!(
                add(&mut ctx, "b", 20).late.is_some(),
                "not after the watermark: late, although b's session is open"
            );
            assert!(add(&mut ctx, "b", 22).closed.is_empty(), "joins b's open session [12,12]");
            let closed = w.advance(&mut ctx, 40).unwrap();
            assert_eq!(results(&closed), vec![("a", 21, 1, 0), ("b", 12, 2, 0)]);
        });
        let tallies = ran.tallies;
        assert_eq!(tallies.get(&(Tally::Late, "s".to_string())), Some(&2));
        assert_eq!(ran.entries, 1, "closed sessions without retention are deleted");
    }

    #[test]
    fn a_late_record_bridging_two_closed_sessions_corrects_one_and_retracts_the_other() {
        let mut b = crate::Pipeline::builder();
        let w = sessions(&mut b, 100);
        let ran = run(&b, |mut ctx| {
            let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"a".to_string(), t, |a| *a += 1).unwrap();
            add(&mut ctx, 0);
            // 18 apart: two sessions; watermark 18 closes the first (at 0 + 10).
            assert_eq!(results(&add(&mut ctx, 18).closed), vec![("a", 0, 1, 0)]);
            assert_eq!(results(&add(&mut ctx, 40).closed), vec![("a", 18, 1, 0)]);
            // 9 is within the gap of both: one session [0,18], corrected under start 0.
            let u = add(&mut ctx, 9);
            assert!(u.late.is_none());
            assert_eq!(results(&u.closed), vec![("a", 0, 3, 1)]);
            assert_eq!(u.closed[0].end_ms, 19);
            assert_eq!(retracted(&u), vec![("a", 18)]);
            // -5 extends it backwards: start 0 is retracted, start -5 is a first result.
            let u = add(&mut ctx, -5);
            assert_eq!(results(&u.closed), vec![("a", -5, 4, 0)]);
            assert_eq!(retracted(&u), vec![("a", 0)]);
            // A record that reopens nothing: 45 joins the open session [40,40].
            assert!(add(&mut ctx, 45).closed.is_empty());
            // Watermark 200: [-5,18] closed at 28 is past 28 + 100; [40,45] closes and expires.
            let closed = w.advance(&mut ctx, 200).unwrap();
            assert_eq!(results(&closed), vec![("a", 40, 2, 0)]);
            let u = add(&mut ctx, 100);
            assert!(u.late.is_some(), "100 + 100 <= 200: late");
        });
        let tallies = ran.tallies;
        assert_eq!(tallies.get(&(Tally::Correction, "s".to_string())), Some(&4));
        assert_eq!(ran.entries, 1, "only the watermark is left");
    }

    #[test]
    fn a_late_record_can_reopen_a_closed_session_which_is_emitted_again_when_it_closes() {
        let mut b = crate::Pipeline::builder();
        let w = sessions(&mut b, 100);
        run(&b, |mut ctx| {
            let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"a".to_string(), t, |a| *a += 1).unwrap();
            add(&mut ctx, 0);
            assert_eq!(results(&add(&mut ctx, 15).closed), vec![("a", 0, 1, 0)]);
            // Watermark 15: 8 bridges [0,0] (closed) and [15,15] (open): the merged session is
            // open; 15's start is not retracted (never emitted), 0's result waits for the close.
            let u = add(&mut ctx, 8);
            assert!(u.closed.is_empty() && u.retracted.is_empty());
            assert_eq!(results(&w.advance(&mut ctx, 25).unwrap()), vec![("a", 0, 3, 1)]);
        });
    }
}
