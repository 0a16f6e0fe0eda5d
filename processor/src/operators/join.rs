//! A windowed stream–stream inner join: records of two sides with the same key, at most a
//! window apart in event time, are paired.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::window::{WindowError, LATE_HEADER};
use crate::record::{InputRecord, OutputRecord, Topic};
use crate::state::{StateError, Store, Tally};
use crate::{Context, PipelineBuilder};

/// A windowed inner join of two record streams by key: every left record at `tl` is paired
/// with every right record of the same key at `tr` where `|tl - tr| ≤ window` — whichever
/// arrives second produces the pair, once.
///
/// The processor tells the sides apart and calls [`left`](Self::left) or
/// [`right`](Self::right); each call buffers the record and returns the pairs it completes
/// in [`JoinUpdate::joined`] (by the buffered partner's event time). Both sides must reach
/// the same input partition number (co-partitioned by the join key), since state is per
/// partition: either one input topic carrying both, told apart by their content, or two input
/// topics with the same partition count, keyed alike, told apart by
/// [`Context::topic`](crate::Context::topic) — a stateful pipeline over several input topics
/// owns partition *n* of all of them in one task, and needs a range assignor
/// ([`Rebalancing::Eager`](crate::Rebalancing::Eager)) to keep them on one instance.
///
/// **Time** is event time, given by the caller. The partition's *stream time* is the largest
/// event time this operator has seen in it (both sides). A record is **late** when it is
/// older than stream time − `window` − [`grace`](Self::grace) (default grace: zero, which
/// still admits records up to a window behind): it is neither buffered nor joined, is
/// counted (`kafka_eos_late_records_total`, [`Summary::late_records`](crate::Summary)), and
/// is reported in [`JoinUpdate::late`] so the processor can route it
/// ([`JoinUpdate::late_record`]: a copy with [`LATE_HEADER`], as the windows do). A zero
/// window is allowed: it joins records with equal event times.
///
/// The result is therefore exact: every pair of non-late records within the window is
/// emitted exactly once, whatever the arrival order. To guarantee that, a buffered record
/// at `t` is kept until stream time passes `t + 2·window + grace` (a record arriving at the
/// lateness edge, `window + grace` behind stream time, may still pair with one a window
/// older than itself), and never joins after that.
///
/// **State** (one store): per key, the buffered records of both sides, sorted by time; and
/// the stream time. Expired records are dropped from a key's buffer whenever the key is
/// visited, and from all keys by a sweep once the oldest buffered record has been expired
/// for a quarter of the retention (`2·window + grace`): the store holds at most the records
/// of the last 1.25 × (2·window + grace) of event time, plus one entry for the stream
/// time — one entry per key among them. A record costs one read and one write of its key's
/// buffer (a key with many records in the retention costs more: its whole buffer is
/// rewritten, and goes to the changelog, at each of its records), plus one clone per pair.
///
/// **Exactly-once**: all state lives in the store, whose uncommitted writes are discarded
/// when a transaction aborts and which is restored from its changelog on a restart, and
/// every decision depends only on that state and the records (never on the wall clock or
/// on when sweeps ran): a replay decides exactly as the first run, so each pair is emitted
/// in exactly one committed transaction.
pub struct StreamJoin<K, L, R> {
    store: Store<Key<K>, Val<L, R>>,
    window_ms: i64,
    grace_ms: i64,
}

impl<K, L, R> Clone for StreamJoin<K, L, R> {
    fn clone(&self) -> Self {
        StreamJoin { store: self.store.clone(), window_ms: self.window_ms, grace_ms: self.grace_ms }
    }
}

/// A pair: a left and a right record of the same key within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined<K, L, R> {
    /// The join key.
    pub key: K,
    /// The left record's value.
    pub left: L,
    /// The right record's value.
    pub right: R,
    /// The left record's event time (ms).
    pub left_time_ms: i64,
    /// The right record's event time (ms).
    pub right_time_ms: i64,
}

/// What one record did to the join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinUpdate<K, L, R> {
    /// The pairs this record completes, by its partners' event time (then arrival).
    pub joined: Vec<Joined<K, L, R>>,
    /// The record was late: not buffered and not joined (see [`late_record`](Self::late_record)).
    pub late: bool,
    /// The join's watermark after this record: stream time − window − grace, the oldest
    /// event time still on time.
    pub watermark_ms: i64,
}

impl<K, L, R> JoinUpdate<K, L, R> {
    /// If the record was late: a copy of `record` bound for `topic` (a late-records topic),
    /// carrying the watermark it missed in [`LATE_HEADER`].
    pub fn late_record(&self, record: &InputRecord, topic: &Topic) -> Option<OutputRecord> {
        self.late.then(|| OutputRecord::copy_of(record, topic).header(LATE_HEADER, self.watermark_ms.to_string()))
    }
}

/// Store keys (variants only ever appended, so older changelogs restore).
#[derive(Serialize, Deserialize)]
enum Key<K> {
    /// The partition's stream time and sweep bookkeeping.
    Meta,
    /// A key's buffered records.
    Buffer(K),
}

/// Store values (variants only ever appended).
#[derive(Serialize, Deserialize)]
enum Val<L, R> {
    /// Largest event time seen; a lower bound of the earliest expiry among buffered records.
    Meta {
        max_time: i64,
        next_expiry: i64,
    },
    Buffer(Buffer<L, R>),
}

/// A key's records of each side, (event time, value), by time then arrival.
#[derive(Serialize, Deserialize)]
struct Buffer<L, R> {
    left: Vec<(i64, L)>,
    right: Vec<(i64, R)>,
}

impl<L, R> Buffer<L, R> {
    /// Drops the records expired at `max_time`; whether any went.
    fn purge(&mut self, keep: i64, max_time: i64) -> bool {
        let before = self.left.len() + self.right.len();
        self.left.retain(|(t, _)| t.saturating_add(keep) >= max_time);
        self.right.retain(|(t, _)| t.saturating_add(keep) >= max_time);
        self.left.len() + self.right.len() != before
    }

    /// The earliest buffered time (lists are sorted).
    fn oldest(&self) -> Option<i64> {
        [self.left.first().map(|e| e.0), self.right.first().map(|e| e.0)].into_iter().flatten().min()
    }
}

/// Inserts `(t, value)` after every entry at or before `t`.
fn insert<V>(list: &mut Vec<(i64, V)>, t: i64, value: V) {
    list.insert(list.partition_point(|(x, _)| *x <= t), (t, value));
}

impl<K, L, R> StreamJoin<K, L, R>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    L: Serialize + DeserializeOwned + Clone + 'static,
    R: Serialize + DeserializeOwned + Clone + 'static,
{
    /// A join pairing records at most `window` apart (inclusive; zero joins equal times),
    /// kept in store `store` (declared on `builder`).
    ///
    /// # Errors
    /// [`WindowError::Shape`] if `window` is over 2^61 ms (its retention arithmetic would
    /// overflow).
    pub fn new(builder: &mut PipelineBuilder, store: impl Into<String>, window: Duration) -> Result<Self, WindowError> {
        match i64::try_from(window.as_millis()) {
            Ok(window_ms) if window_ms <= 1 << 61 => {
                Ok(StreamJoin { store: builder.operator_store(store, "stream join"), window_ms, grace_ms: 0 })
            }
            _ => Err(WindowError::Shape(format!("a join window of {window:?} is over 2^61 ms"))),
        }
    }

    /// How much further than `window` behind stream time a record may be and still join.
    /// Default: zero (records up to a window behind stream time join). A larger grace
    /// admits more out-of-order records and keeps every record buffered that much longer.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// Buffers a left record (`key`, event time `time_ms`, `value`) and returns its pairs
    /// with the buffered right records of `key` within the window — or `late`.
    pub fn left(
        &self,
        ctx: &mut Context<'_>,
        key: &K,
        time_ms: i64,
        value: L,
    ) -> Result<JoinUpdate<K, L, R>, StateError> {
        self.add(ctx, key, time_ms, |buffer, window| {
            let joined = buffer
                .right
                .iter()
                .filter(|(tr, _)| tr.abs_diff(time_ms) <= window)
                .map(|(tr, right)| Joined {
                    key: key.clone(),
                    left: value.clone(),
                    right: right.clone(),
                    left_time_ms: time_ms,
                    right_time_ms: *tr,
                })
                .collect();
            insert(&mut buffer.left, time_ms, value);
            joined
        })
    }

    /// Buffers a right record and returns its pairs with the buffered left records of
    /// `key` within the window — or `late`. The mirror of [`left`](Self::left).
    pub fn right(
        &self,
        ctx: &mut Context<'_>,
        key: &K,
        time_ms: i64,
        value: R,
    ) -> Result<JoinUpdate<K, L, R>, StateError> {
        self.add(ctx, key, time_ms, |buffer, window| {
            let joined = buffer
                .left
                .iter()
                .filter(|(tl, _)| tl.abs_diff(time_ms) <= window)
                .map(|(tl, left)| Joined {
                    key: key.clone(),
                    left: left.clone(),
                    right: value.clone(),
                    left_time_ms: *tl,
                    right_time_ms: time_ms,
                })
                .collect();
            insert(&mut buffer.right, time_ms, value);
            joined
        })
    }

    /// How long past its event time a buffered record is kept: `2·window + grace`.
    fn keep_ms(&self) -> i64 {
        self.window_ms.saturating_mul(2).saturating_add(self.grace_ms)
    }

    /// The record's visit: the late check, then `pair` on its key's purged buffer (with the
    /// window), then the stream time and the sweep.
    fn add(
        &self,
        ctx: &mut Context<'_>,
        key: &K,
        time_ms: i64,
        pair: impl FnOnce(&mut Buffer<L, R>, u64) -> Vec<Joined<K, L, R>>,
    ) -> Result<JoinUpdate<K, L, R>, StateError> {
        let keep = self.keep_ms();
        let behind = self.window_ms.saturating_add(self.grace_ms);
        let mut store = ctx.store(&self.store);
        let (mut max_time, mut next_expiry) = match store.get(&Key::Meta)? {
            Some(Val::Meta { max_time, next_expiry }) => (max_time, next_expiry),
            _ => (i64::MIN, i64::MAX),
        };
        let watermark = max_time.saturating_sub(behind);
        if time_ms < watermark {
            ctx.tally(Tally::Late, self.store.name(), 1);
            return Ok(JoinUpdate { joined: Vec::new(), late: true, watermark_ms: watermark });
        }
        max_time = max_time.max(time_ms);
        let entry = Key::Buffer(key.clone());
        let mut buffer = match store.get(&entry)? {
            Some(Val::Buffer(b)) => b,
            _ => Buffer { left: Vec::new(), right: Vec::new() },
        };
        buffer.purge(keep, max_time);
        let joined = pair(&mut buffer, self.window_ms as u64);
        store.put(&entry, &Val::Buffer(buffer))?;
        next_expiry = next_expiry.min(time_ms.saturating_add(keep));
        // Sweep once the oldest record has been expired for a quarter of the retention:
        // each sweep then removes at least a quarter retention's worth of records
        // (amortised O(1) per record) and the store holds at most 1.25 retentions of them.
        if max_time > next_expiry.saturating_add(keep / 4) {
            next_expiry = i64::MAX;
            for (k, v) in store.entries()? {
                let (Key::Buffer(_), Val::Buffer(mut b)) = (&k, v) else { continue };
                let changed = b.purge(keep, max_time);
                match b.oldest() {
                    None => store.delete(&k)?,
                    Some(oldest) => {
                        next_expiry = next_expiry.min(oldest.saturating_add(keep));
                        if changed {
                            store.put(&k, &Val::Buffer(b))?;
                        }
                    }
                }
            }
        }
        store.put(&Key::Meta, &Val::Meta { max_time, next_expiry })?;
        Ok(JoinUpdate { joined, late: false, watermark_ms: max_time.saturating_sub(behind) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::window::tests::{rec, run};
    use super::*;

    type J = StreamJoin<String, u32, u32>;

    fn join(b: &mut PipelineBuilder, window_ms: u64, grace_ms: u64) -> J {
        J::new(b, "j", Duration::from_millis(window_ms)).unwrap().grace(Duration::from_millis(grace_ms))
    }

    /// (left time, right time, left value, right value) of each pair; all keyed `key`.
    fn pairs(u: &JoinUpdate<String, u32, u32>, key: &str) -> Vec<(i64, i64, u32, u32)> {
        assert!(u.joined.iter().all(|j| j.key == key), "{u:?}");
        u.joined.iter().map(|j| (j.left_time_ms, j.right_time_ms, j.left, j.right)).collect()
    }

    fn late(ran: &super::super::window::tests::Ran) -> Option<u64> {
        ran.tallies.get(&(Tally::Late, "j".to_string())).copied()
    }

    #[test]
    fn records_within_the_window_pair_both_ways_and_nothing_outside_it_does() {
        let mut b = crate::Pipeline::builder();
        let j = join(&mut b, 10, 0);
        let ran = run(&b, |mut ctx| {
            let a = "a".to_string();
            assert!(j.left(&mut ctx, &a, 100, 1).unwrap().joined.is_empty());
            // Exactly a window before the left record: it pairs (the window is inclusive).
            assert_eq!(pairs(&j.right(&mut ctx, &a, 90, 2).unwrap(), "a"), vec![(100, 90, 1, 2)]);
            assert!(j.right(&mut ctx, &a, 111, 3).unwrap().joined.is_empty(), "11 after: outside");
            assert!(j.right(&mut ctx, &"b".to_string(), 105, 4).unwrap().joined.is_empty(), "another key");
            // A left record pairs with the buffered right records: 111 only (90 is 20 before).
            assert_eq!(pairs(&j.left(&mut ctx, &a, 110, 5).unwrap(), "a"), vec![(110, 111, 5, 3)]);
            // Several matches, by the partners' time: left 100 and 110 are within 10 of 105.
            let u = j.right(&mut ctx, &a, 105, 6).unwrap();
            assert_eq!(pairs(&u, "a"), vec![(100, 105, 1, 6), (110, 105, 5, 6)]);
            assert!(!u.late && u.watermark_ms == 101, "{u:?}");
            // A second left record at an equal time pairs with both right records near it.
            assert_eq!(pairs(&j.left(&mut ctx, &a, 110, 7).unwrap(), "a"), vec![(110, 105, 7, 6), (110, 111, 7, 3)]);
        });
        assert_eq!(late(&ran), None);
    }

    #[test]
    fn a_zero_window_pairs_equal_times_only() {
        let mut b = crate::Pipeline::builder();
        let j = join(&mut b, 0, 0);
        let ran = run(&b, |mut ctx| {
            let a = "a".to_string();
            j.left(&mut ctx, &a, 5, 1).unwrap();
            assert_eq!(pairs(&j.right(&mut ctx, &a, 5, 2).unwrap(), "a"), vec![(5, 5, 1, 2)]);
            assert!(j.right(&mut ctx, &a, 6, 3).unwrap().joined.is_empty());
            assert_eq!(pairs(&j.left(&mut ctx, &a, 6, 4).unwrap(), "a"), vec![(6, 6, 4, 3)]);
            // Stream time 6, no window nor grace: a record at 5 is late.
            let u = j.left(&mut ctx, &a, 5, 5).unwrap();
            assert!(u.late && u.joined.is_empty() && u.watermark_ms == 6, "{u:?}");
        });
        assert_eq!(late(&ran), Some(1));
    }

    #[test]
    fn late_records_are_refused_counted_and_never_buffered() {
        let mut b = crate::Pipeline::builder();
        let j = join(&mut b, 10, 5);
        let ran = run(&b, |mut ctx| {
            let a = "a".to_string();
            j.left(&mut ctx, &a, 100, 1).unwrap();
            j.right(&mut ctx, &a, 200, 2).unwrap();
            // Stream time 200: 185 (window + grace behind) is on time; 184 is late.
            assert!(j.left(&mut ctx, &a, 185, 3).unwrap().joined.is_empty(), "15 from 200");
            assert_eq!(pairs(&j.right(&mut ctx, &a, 190, 4).unwrap(), "a"), vec![(185, 190, 3, 4)]);
            let u = j.left(&mut ctx, &a, 184, 5).unwrap();
            assert!(u.late && u.joined.is_empty(), "late although right 190 is within the window: {u:?}");
            let late_topic = Topic::new("late");
            let copy = u.late_record(&rec(7), &late_topic).expect("a late copy");
            assert_eq!(copy.topic.as_str(), "late");
            assert_eq!(copy.headers, vec![(LATE_HEADER.to_string(), Some(b"185".to_vec()))]);
            assert!(j.right(&mut ctx, &a, 190, 6).unwrap().late_record(&rec(8), &late_topic).is_none());
            // The late record was not buffered: a right record near it pairs with 185 only.
            assert_eq!(pairs(&j.right(&mut ctx, &a, 194, 7).unwrap(), "a"), vec![(185, 194, 3, 7)]);
        });
        assert_eq!(late(&ran), Some(1));
    }

    /// A deterministic pseudo-random sequence of (left?, key, time, value), a few hundred ms
    /// of disorder and some records far behind.
    fn disordered(n: u32) -> Vec<(bool, String, i64, u32)> {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m) as i64
        };
        (0..n)
            .map(|i| {
                let behind = if next(50) == 0 { 60 + next(100) } else { next(40) };
                (next(2) == 0, format!("k{}", next(6)), i as i64 * 3 - behind, i)
            })
            .collect()
    }

    #[test]
    fn a_long_disordered_run_equals_a_brute_force_join_and_expiry_bounds_the_store() {
        let (window, grace) = (20, 10);
        let keep = 2 * window + grace;
        let records = disordered(4_000);
        // The batch: on-time records (stream time before each, lateness as documented),
        // then every pair of them within the window.
        let (mut max, mut on_time, mut late_n) = (i64::MIN, Vec::new(), 0);
        for r in &records {
            if r.2 < max.saturating_sub(window + grace) {
                late_n += 1;
            } else {
                max = max.max(r.2);
                on_time.push(r);
            }
        }
        let mut want = Vec::new();
        for l in on_time.iter().filter(|r| r.0) {
            for r in on_time.iter().filter(|r| !r.0 && r.1 == l.1 && r.2.abs_diff(l.2) <= window as u64) {
                want.push((l.1.clone(), l.2, r.2, l.3, r.3));
            }
        }
        assert!(late_n > 20 && want.len() > 1_000, "{late_n} late, {} pairs", want.len());

        let mut b = crate::Pipeline::builder();
        let j = join(&mut b, window as u64, grace as u64);
        let (mut got, mut buffered) = (Vec::new(), 0);
        let ran = run(&b, |mut ctx| {
            let mut max = i64::MIN;
            for (left, key, t, v) in &records {
                let u = if *left { j.left(&mut ctx, key, *t, *v) } else { j.right(&mut ctx, key, *t, *v) }.unwrap();
                max = max.max(*t);
                got.extend(u.joined.into_iter().map(|p| (p.key, p.left_time_ms, p.right_time_ms, p.left, p.right)));
                // The bound: nothing older than 1.25 retentions behind stream time is buffered.
                for (_, v) in ctx.store(&j.store).entries().unwrap() {
                    if let Val::Buffer(b) = v {
                        assert!(b.oldest().unwrap() + keep + keep / 4 >= max, "at {t}");
                    }
                }
            }
            let entries = ctx.store(&j.store).entries().unwrap();
            buffered = entries
                .iter()
                .map(|(_, v)| if let Val::Buffer(b) = v { b.left.len() + b.right.len() } else { 0 })
                .sum();
        });
        got.sort();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(late(&ran), Some(late_n));
        // Records come 3 ms apart: at most those of the last 1.25 retentions are left.
        assert!((1..=(keep + keep / 4) as usize / 3 + 1).contains(&buffered), "{buffered} buffered");
        assert_eq!(ran.entries, 1 + 6, "the clock and the 6 keys");
    }

    #[test]
    fn keys_not_seen_again_are_swept() {
        let mut b = crate::Pipeline::builder();
        let j = join(&mut b, 10, 0);
        let ran = run(&b, |mut ctx| {
            for i in 0..1_000 {
                j.left(&mut ctx, &format!("k{i}"), i * 10, 0).unwrap();
            }
        });
        // Retention 20 (+ 5 of sweep slack): only the keys of the last 25 ms, and the clock.
        assert!(ran.entries <= 4, "{} entries", ran.entries);
    }

    #[test]
    fn a_window_too_long_is_refused() {
        let mut b = crate::Pipeline::builder();
        let err = J::new(&mut b, "j", Duration::from_secs(u64::MAX)).err();
        assert!(matches!(err, Some(WindowError::Shape(_))));
        assert!(J::new(&mut b, "j0", Duration::ZERO).is_ok(), "a zero window joins equal times");
    }
}
