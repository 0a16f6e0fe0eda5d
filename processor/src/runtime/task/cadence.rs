//! When a batch stops collecting: the commit cadence, pure functions of the previous
//! close, the first record's arrival and the commit interval.

use std::time::{Duration, Instant};

/// When a batch whose first record came at `first` closes: a commit interval after the
/// previous batch closed (`last_closed`, when its commit began), and never before `first`.
/// So under steady input batches close once per interval whatever the commit takes, and
/// the first records after an idle spell, or a task's first, close as soon as the records
/// already received are in.
pub(super) fn close_at(last_closed: Option<Instant>, first: Instant, interval: Duration) -> Instant {
    match last_closed {
        Some(closed) => (closed + interval).max(first),
        None => first,
    }
}

/// The latest a batch that is due at `closes_at` ([`close_at`]) and whose first record came
/// at `first` goes on collecting while records keep arriving (a backlog: its task's inbox
/// is never empty). A batch on the cadence closes when due; one due at once (after an idle
/// spell) gathers what arrives for up to one interval. Either way a transaction holds at
/// most an interval's worth of records, as [`TransactionEvent::collect`] promises.
///
/// [`TransactionEvent::collect`]: crate::observe::TransactionEvent::collect
pub(super) fn latest_close(closes_at: Instant, first: Instant, interval: Duration) -> Instant {
    if closes_at > first {
        closes_at
    } else {
        first + interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same grid as below: a batch never collects for more than one interval past its
    /// first record, and never stops before it is due.
    #[test]
    fn a_batch_under_a_backlog_closes_when_due_or_one_interval_after_an_idle_spell() {
        let t0 = Instant::now() + Duration::from_secs(3600);
        let ms = Duration::from_millis;
        for interval in [0, 1, 10, 100, 1_000, 60_000].map(ms) {
            assert_eq!(latest_close(close_at(None, t0, interval), t0, interval), t0 + interval, "a task's first");
            for back in [0, 1, 50, 99, 100, 101, 1_000, 120_000].map(ms) {
                let due = close_at(Some(t0 - back), t0, interval);
                let latest = latest_close(due, t0, interval);
                assert!(latest >= due, "not before it is due");
                assert!(latest <= t0 + interval, "at most one interval of collection");
                if back >= interval {
                    assert_eq!(latest, t0 + interval, "after an idle spell: one interval");
                } else {
                    assert_eq!(latest, due, "on the cadence: when due");
                }
            }
        }
    }

    /// Every combination of a previous close (none, or before, at or after the first record
    /// by a grid of offsets) and an interval (zero included).
    #[test]
    fn a_batch_closes_one_interval_after_the_last_close_and_never_before_its_first_record() {
        let t0 = Instant::now() + Duration::from_secs(3600);
        let ms = Duration::from_millis;
        for interval in [0, 1, 10, 100, 1_000, 60_000].map(ms) {
            assert_eq!(close_at(None, t0, interval), t0, "a task's first batch does not wait");
            for back in [0, 1, 50, 99, 100, 101, 1_000, 120_000].map(ms) {
                let closed = t0 - back;
                let at = close_at(Some(closed), t0, interval);
                assert!(at >= t0, "never before the first record");
                assert!(at <= closed + interval.max(back), "never later than one interval after the last close");
                if back >= interval {
                    assert_eq!(at, t0, "an interval already past: at once (idle spell)");
                } else {
                    assert_eq!(at, closed + interval, "within the interval: on the cadence");
                }
            }
        }
    }
}
