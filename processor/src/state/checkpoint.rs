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

/// `delete.retention.ms` as the topic reports it; the default when it reports none or
/// cannot be asked (logged: a shorter configured retention is then not seen).
pub(crate) fn delete_retention(admin: &crate::admin::Client, topic: &str) -> Duration {
    match admin.topic_config(topic, "delete.retention.ms") {
        Ok(Some(ms)) => match ms.parse::<u64>() {
            Ok(ms) => Duration::from_millis(ms),
            Err(_) => DEFAULT_DELETE_RETENTION,
        },
        Ok(None) => DEFAULT_DELETE_RETENTION,
        Err(e) => {
            tracing::warn!(topic, error = %e, "cannot read delete.retention.ms; assuming Kafka's default of one day");
            DEFAULT_DELETE_RETENTION
        }
    }
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
