//! When a batch stops collecting: the commit cadence, a pure function of the previous
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

#[cfg(test)]
mod tests {
    use super::*;

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
