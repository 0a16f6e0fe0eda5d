//! Deduplication by a user-given event id, within a time-to-live of event time.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::state::{StateError, Store, Tally};
use crate::{Context, PipelineBuilder};

/// Drops records whose event id was already seen within `ttl`, and forgets ids older than
/// that so the store stays bounded (by the distinct ids of 1.25 `ttl` of event time).
///
/// Time is *event* time, as given by the caller, measured against the largest event time
/// the partition has seen: an id first seen at `t` is remembered while that maximum is at
/// most `t + ttl`. Using event time (not the wall clock) makes a replay or a restore decide
/// exactly as the first run did. Dropped records are counted
/// (`kafka_eos_duplicates_dropped_total`, [`Summary::duplicates_dropped`](crate::Summary)),
/// once per committed transaction.
///
/// Duplicates must reach the same input partition (key the input by something the copies
/// share): state is per partition.
pub struct Dedup<I> {
    store: Store<Key<I>, Val>,
    ttl_ms: i64,
}

impl<I> Clone for Dedup<I> {
    fn clone(&self) -> Self {
        Dedup { store: self.store.clone(), ttl_ms: self.ttl_ms }
    }
}

#[derive(Serialize, Deserialize)]
enum Key<I> {
    /// The partition's sweep bookkeeping.
    Meta,
    Id(I),
}

#[derive(Serialize, Deserialize, Clone, Copy)]
enum Val {
    /// Largest event time seen; earliest expiry among the remembered ids.
    Meta { max_time: i64, next_expiry: i64 },
    /// The event time at which the id was first seen.
    Seen(i64),
}

impl<I> Dedup<I>
where
    I: Serialize + DeserializeOwned + Clone + 'static,
{
    /// Deduplication kept in store `store` (declared on `builder`), remembering ids for
    /// `ttl` of event time.
    pub fn new(builder: &mut PipelineBuilder, store: impl Into<String>, ttl: Duration) -> Self {
        Dedup { store: builder.operator_store(store, "dedup"), ttl_ms: ttl.as_millis() as i64 }
    }

    /// `true` if `id` is new (or its last sighting expired): process the record. `false`
    /// for a duplicate: drop it (it is counted).
    pub fn first_seen(&self, ctx: &mut Context<'_>, id: &I, event_time_ms: i64) -> Result<bool, StateError> {
        let ttl = self.ttl_ms;
        let mut store = ctx.store(&self.store);
        let (mut max_time, mut next_expiry) = match store.get(&Key::Meta)? {
            Some(Val::Meta { max_time, next_expiry }) => (max_time, next_expiry),
            _ => (i64::MIN, i64::MAX),
        };
        max_time = max_time.max(event_time_ms);
        let key = Key::Id(id.clone());
        let duplicate = matches!(store.get(&key)?, Some(Val::Seen(t)) if t.saturating_add(ttl) >= max_time);
        if !duplicate {
            store.put(&key, &Val::Seen(event_time_ms))?;
            next_expiry = next_expiry.min(event_time_ms.saturating_add(ttl));
        }
        // Sweep once the oldest id has been expired for a quarter of the TTL: each sweep
        // then removes a quarter TTL's worth of ids (amortised O(1) per record) and the
        // store holds at most 1.25 TTL of ids.
        if max_time > next_expiry.saturating_add(ttl / 4) {
            next_expiry = i64::MAX;
            for (k, v) in store.entries()? {
                if let (Key::Id(_), Val::Seen(t)) = (&k, v) {
                    if t.saturating_add(ttl) < max_time {
                        store.delete(&k)?;
                    } else {
                        next_expiry = next_expiry.min(t.saturating_add(ttl));
                    }
                }
            }
        }
        store.put(&Key::Meta, &Val::Meta { max_time, next_expiry })?;
        if duplicate {
            ctx.tally(Tally::Duplicate, self.store.name(), 1);
        }
        Ok(!duplicate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::driver::tests::context;

    #[test]
    fn drops_repeats_within_ttl_and_purges_expired_ids() {
        let mut b = crate::Pipeline::builder();
        let d = Dedup::<u32>::new(&mut b, "d", Duration::from_millis(100));
        let mut st = crate::state::tests::state_of(&b, 0);
        let mut out = Vec::new();
        let mut ctx = context(&mut st, &mut out);
        assert!(d.first_seen(&mut ctx, &1, 1000).unwrap());
        assert!(!d.first_seen(&mut ctx, &1, 1050).unwrap());
        assert!(d.first_seen(&mut ctx, &2, 1090).unwrap());
        // Time moves past id 1's expiry (1100) plus a quarter TTL: it is purged, and new again.
        assert!(d.first_seen(&mut ctx, &3, 1150).unwrap());
        let ids = ctx.store(&d.store).entries().unwrap();
        let mut ids: Vec<u32> =
            ids.into_iter().filter_map(|(k, _)| if let Key::Id(i) = k { Some(i) } else { None }).collect();
        ids.sort();
        assert_eq!(ids, vec![2, 3]);
        assert!(d.first_seen(&mut ctx, &1, 1160).unwrap());
        let tallies = st.commit(&Default::default());
        assert_eq!(tallies.tallies.get(&(Tally::Duplicate, "d".to_string())), Some(&1));
    }
}
