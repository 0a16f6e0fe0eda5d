//! When a persistent backend's [`Checkpoint`] is trusted, and where the restore starts.
//!
//! The changelog is the truth; a local store is a cache of it, trusted only when its
//! checkpoint can be continued from. The restore reads the changelog partition from the
//! checkpoint to its end when all of these hold, and otherwise clears the local store and
//! reads from the log start:
//!
//! | the checkpoint | means | so |
//! |---|---|---|
//! | none (nothing kept, a new or deleted store directory) | | from the start |
//! | the local store failed to open (corrupt, unreadable) | | cleared, from the start |
//! | beyond the changelog's end | the topic was deleted and recreated, or truncated | cleared, from the start |
//! | below the log start offset | records the store never saw were deleted (retention, `DeleteRecords`) | cleared, from the start |
//! | older than the changelog's `delete.retention.ms` (less a margin for clock skew), with records after it | compaction may have removed a tombstone written after it: the store would keep a key the changelog deleted | cleared, from the start |
//! | otherwise | | the tail only, from the checkpoint |
//!
//! A checkpoint at the end (nothing after it) is trusted at any age: no tombstone after it
//! can have existed. Kafka's cleaner keeps a tombstone at least `delete.retention.ms` after
//! the segment holding it was cleaned, which is after the tombstone was written, which is
//! after the checkpoint it follows was taken: so a checkpoint younger than the retention
//! has seen — or will read in the tail — every tombstone after it.
//!
//! Not detected: a changelog deleted and recreated that has grown past the old checkpoint
//! again. Delete the state directory when recreating a changelog (docs/state.md).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use super::backend::Checkpoint;

/// Kafka's default `delete.retention.ms` (one day): used when the topic reports none.
pub(crate) const DEFAULT_DELETE_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// Why a checkpoint is not trusted (logged with the full restore it costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Distrust {
    /// Beyond the changelog's end offset.
    BeyondEnd,
    /// Below the changelog's log start offset.
    BelowStart,
    /// Older than the tombstone retention (less the margin), with records after it.
    Stale,
}

impl std::fmt::Display for Distrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Distrust::BeyondEnd => "beyond the changelog's end (the topic was recreated or truncated)",
            Distrust::BelowStart => "below the changelog's log start offset (records it never saw were deleted)",
            Distrust::Stale => {
                "older than the changelog's delete.retention.ms (compaction may have removed tombstones after it)"
            }
        })
    }
}

/// Where a changelog partition `[low, high)` is restored from, given the local store's
/// checkpoint: `Ok(offset)` to continue from it (`high`: nothing to read), `Err` when it is
/// not trusted (clear the store and read from `low`). `retention` is the changelog's
/// `delete.retention.ms`, asked for only when there is a tail to read.
pub(crate) fn resume_from(
    checkpoint: &Checkpoint,
    low: i64,
    high: i64,
    now: SystemTime,
    retention: impl FnOnce() -> Duration,
) -> Result<i64, Distrust> {
    let next = checkpoint.next_offset;
    if next > high {
        return Err(Distrust::BeyondEnd);
    }
    if next < low {
        return Err(Distrust::BelowStart);
    }
    if next < high {
        let age = now.duration_since(checkpoint.written_at).unwrap_or_default();
        let retention = retention();
        // A tenth of the retention covers skew between this clock and the brokers'.
        if age >= retention - retention / 10 {
            return Err(Distrust::Stale);
        }
    }
    Ok(next)
}

/// `delete.retention.ms` of each changelog topic this process has asked about: read once
/// (at start-up by `changelog::check_topics`), not on every restore. A changed retention
/// takes effect at the next start.
fn retentions() -> &'static Mutex<HashMap<String, Duration>> {
    static RETENTIONS: OnceLock<Mutex<HashMap<String, Duration>>> = OnceLock::new();
    RETENTIONS.get_or_init(Default::default)
}

/// Records `topic`'s tombstone retention.
pub(crate) fn remember_retention(topic: &str, retention: Duration) {
    retentions().lock().unwrap_or_else(|p| p.into_inner()).insert(topic.to_string(), retention);
}

/// `delete.retention.ms` as the topic reports it (asked once per process, see
/// [`retentions`]); the default when it reports none or cannot be asked (logged: a
/// shorter configured retention is then not seen).
pub(crate) fn delete_retention(admin: impl FnOnce() -> crate::admin::Client, topic: &str) -> Duration {
    if let Some(known) = retentions().lock().unwrap_or_else(|p| p.into_inner()).get(topic) {
        return *known;
    }
    let retention = match admin().topic_config(topic, "delete.retention.ms") {
        Ok(Some(ms)) => ms.parse::<u64>().map(Duration::from_millis).unwrap_or(DEFAULT_DELETE_RETENTION),
        Ok(None) => DEFAULT_DELETE_RETENTION,
        Err(e) => {
            tracing::warn!(topic, error = %e, "cannot read delete.retention.ms; assuming Kafka's default of one day");
            return DEFAULT_DELETE_RETENTION;
        }
    };
    remember_retention(topic, retention);
    retention
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(next_offset: i64, age: Duration, now: SystemTime) -> Checkpoint {
        Checkpoint { next_offset, written_at: now - age }
    }

    #[test]
    fn a_checkpoint_inside_the_changelog_continues() {
        let now = SystemTime::now();
        let day = || DEFAULT_DELETE_RETENTION;
        assert_eq!(resume_from(&at(40, Duration::from_secs(60), now), 0, 100, now, day), Ok(40));
        assert_eq!(resume_from(&at(0, Duration::ZERO, now), 0, 100, now, day), Ok(0));
    }

    #[test]
    fn a_checkpoint_outside_the_changelog_is_rebuilt() {
        let now = SystemTime::now();
        let day = || DEFAULT_DELETE_RETENTION;
        assert_eq!(resume_from(&at(101, Duration::ZERO, now), 0, 100, now, day), Err(Distrust::BeyondEnd));
        assert_eq!(resume_from(&at(5, Duration::ZERO, now), 10, 100, now, day), Err(Distrust::BelowStart));
    }

    #[test]
    fn an_old_checkpoint_is_trusted_only_with_nothing_after_it() {
        let now = SystemTime::now();
        let asked = std::cell::Cell::new(false);
        let hour = || {
            asked.set(true);
            Duration::from_secs(3600)
        };
        let old = Duration::from_secs(3300); // past the retention less its tenth
        assert_eq!(resume_from(&at(100, old, now), 0, 100, now, hour), Ok(100));
        assert!(!asked.get(), "no tail, no question");
        assert_eq!(resume_from(&at(90, old, now), 0, 100, now, hour), Err(Distrust::Stale));
        assert_eq!(resume_from(&at(90, Duration::from_secs(3000), now), 0, 100, now, hour), Ok(90));
        // A checkpoint from the future (clock stepped back) is not stale.
        let future = Checkpoint { next_offset: 90, written_at: now + Duration::from_secs(60) };
        assert_eq!(resume_from(&future, 0, 100, now, hour), Ok(90));
    }
}

/// The restore's use of a persistent backend's checkpoint, on librdkafka's mock cluster: a
/// test backend that keeps its entries and checkpoint across "restarts" in shared memory.
#[cfg(test)]
mod restore_tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant, SystemTime};

    use rdkafka::mocking::MockCluster;

    use crate::state::backend::{BackendError, Change, Checkpoint, KeyValueBackend, Location, MemoryBackend};
    use crate::state::changelog::mock_cluster_tests::{setup, write};
    use crate::state::{format, StoreSpec};

    #[derive(Default)]
    struct Saved {
        entries: Vec<Change>,
        checkpoint: Option<Checkpoint>,
        damaged: bool,
    }

    /// Memory that outlives the backend: what a disk keeps between runs.
    struct Kept {
        saved: Arc<Mutex<Saved>>,
        live: MemoryBackend,
    }

    impl KeyValueBackend for Kept {
        fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
            self.live.get(key)
        }
        fn write_batch(&mut self, changes: Vec<Change>) {
            self.saved.lock().unwrap().entries.extend(changes.iter().cloned());
            self.live.write_batch(changes);
        }
        fn scan(&self) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + '_> {
            self.live.scan()
        }
        fn len(&self) -> usize {
            self.live.len()
        }
        fn size_bytes(&self) -> usize {
            self.live.size_bytes()
        }
        fn open(&mut self, _: &Location<'_>) -> Result<Option<Checkpoint>, BackendError> {
            let saved = self.saved.lock().unwrap();
            if saved.damaged {
                return Err(BackendError { what: "opening".into(), hint: "", source: "damaged".into() });
            }
            self.live.write_batch(saved.entries.clone());
            Ok(saved.checkpoint)
        }
        fn write_checkpointed(&mut self, changes: Vec<Change>, next: Option<i64>) -> Result<(), BackendError> {
            self.write_batch(changes);
            if let Some(next_offset) = next {
                self.saved.lock().unwrap().checkpoint = Some(Checkpoint { next_offset, written_at: SystemTime::now() });
            }
            Ok(())
        }
        fn clear(&mut self) -> Result<(), BackendError> {
            *self.saved.lock().unwrap() = Saved::default();
            self.live = MemoryBackend::default();
            Ok(())
        }
    }

    fn record(k: u32, v: u32) -> (Vec<u8>, Vec<u8>) {
        (format::encode_key(&k).unwrap(), format::encode_value(1, &v).unwrap())
    }

    /// Restores partition 0 with the backend over `saved`: (records read, entries).
    fn restore(
        mock: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
        saved: &Arc<Mutex<Saved>>,
    ) -> (u64, BTreeMap<u32, u32>) {
        let kept = saved.clone();
        let spec = StoreSpec::<u32, u32>::new("s").backend(Arc::new(move |_, _| {
            Box::new(Kept { saved: kept.clone(), live: MemoryBackend::default() }) as Box<dyn KeyValueBackend>
        }));
        let (store, cfg) = setup(mock, spec);
        // The mock cluster does not describe configs.
        super::remember_retention(&crate::state::changelog_topic("app", "s"), super::DEFAULT_DELETE_RETENTION);
        let restored = crate::state::changelog::restore(&cfg, &[0], Instant::now() + Duration::from_secs(30), None)
            .expect("restore");
        (restored.records, restored.states[0].store_ref(&store).entries().unwrap().into_iter().collect())
    }

    fn expected(n: u32, value: impl Fn(u32) -> u32) -> BTreeMap<u32, u32> {
        (0..n).map(|k| (k, value(k))).collect()
    }

    #[test]
    fn a_trusted_checkpoint_reads_the_tail_and_moves_to_the_end() {
        let mock = MockCluster::new(1).expect("mock cluster");
        setup(&mock, StoreSpec::<u32, u32>::new("s"));
        write(&mock, &(0..10).map(|k| record(k, k * 10)).collect::<Vec<_>>());
        let saved = Arc::new(Mutex::new(Saved::default()));
        assert_eq!(restore(&mock, &saved), (10, expected(10, |k| k * 10)), "no checkpoint: from the start");
        assert_eq!(saved.lock().unwrap().checkpoint.map(|c| c.next_offset), Some(10));
        assert_eq!(restore(&mock, &saved), (0, expected(10, |k| k * 10)), "at the end: nothing to read");
        write(&mock, &(5..8).map(|k| record(k, k)).collect::<Vec<_>>());
        let tail = expected(10, |k| if (5..8).contains(&k) { k } else { k * 10 });
        assert_eq!(restore(&mock, &saved), (3, tail), "only the tail");
        assert_eq!(saved.lock().unwrap().checkpoint.map(|c| c.next_offset), Some(13));
    }

    #[test]
    fn an_untrusted_local_store_is_cleared_and_rebuilt() {
        let mock = MockCluster::new(1).expect("mock cluster");
        setup(&mock, StoreSpec::<u32, u32>::new("s"));
        write(&mock, &(0..10).map(|k| record(k, k)).collect::<Vec<_>>());
        let stray = (format::encode_key(&99u32).unwrap(), Some(format::encode_value(1, &1u32).unwrap()));
        let now = SystemTime::now();
        let cases = [
            ("beyond the end", Some(Checkpoint { next_offset: 50, written_at: now }), false),
            ("damaged", Some(Checkpoint { next_offset: 4, written_at: now }), true),
            ("entries without a checkpoint", None, false),
            (
                "older than the tombstone retention",
                Some(Checkpoint { next_offset: 4, written_at: now - 2 * super::DEFAULT_DELETE_RETENTION }),
                false,
            ),
        ];
        for (case, checkpoint, damaged) in cases {
            let saved = Arc::new(Mutex::new(Saved { entries: vec![stray.clone()], checkpoint, damaged }));
            assert_eq!(restore(&mock, &saved), (10, expected(10, |k| k)), "{case}: the stray entry is gone");
        }
        let old_at_end = Checkpoint { next_offset: 10, written_at: now - 2 * super::DEFAULT_DELETE_RETENTION };
        let saved = Arc::new(Mutex::new(Saved { entries: vec![stray], checkpoint: Some(old_at_end), damaged: false }));
        assert_eq!(restore(&mock, &saved).0, 0, "an old checkpoint with nothing after it is trusted");
    }
}
