//! The floor under each partition: in a transactional mode no record below the offset the
//! group has the partition committed at is processed.
//!
//! librdkafka moves a partition's position on its own when `auto.offset.reset` applies — a
//! fetch out of range, a log truncation found after a leader change — to the partition's
//! start, below its committed offset. Processing from there would commit the records read
//! again a second time and move the committed offset back. So each partition has a floor: the
//! group's stable committed offset, read at its first record after an assignment or a rewind
//! (or the offset an exactly-once sink had it resume at), then the offset after the last
//! record taken. A record below its floor is dropped, the batch collected so far is committed,
//! and the partition rewound; a partition that falls below its floor again after
//! [`REWINDS_BEFORE_STOP`] rewinds in a row stops the pipeline
//! ([`Error::OffsetReset`](crate::Error::OffsetReset)): its committed offset is out of its
//! log's range.
//!
//! The same reset hides a gap the other way: when a partition's unprocessed records were
//! deleted (retention ran out while the pipeline was stopped or behind), its fetch from the
//! committed offset is out of range and the reset moves it *forward*, to its log's start.
//! So the first record after a floor was set from a committed (or sink-stored) offset, if it
//! comes past the floor, is checked against the log's start ([`deleted`]): past the floor,
//! records were deleted unprocessed, and the pipeline stops
//! ([`Error::RecordsDeleted`](crate::Error::RecordsDeleted)) unless told to skip them.
//! Transaction markers, aborted and compacted records also leave offsets without a record,
//! but below the log's start nothing is deleted. A check whose read fails (the committed
//! offset, the log's start) rewinds the partition and reads again, until its reads have
//! failed for the task timeout: then the pipeline stops naming the read. This module holds
//! the floors and the decisions; the task's side (the check at each record, the reads, the
//! rewind: `Task::above_floor`) is in `positions.rs`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::partition::TopicPartition;

/// Rewinds in a row after which a partition still below its floor stops the pipeline.
pub(super) const REWINDS_BEFORE_STOP: u32 = 3;

/// Whether a record at `offset` may be processed, given its partition's floor.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Intake {
    /// At or above the floor.
    Take,
    /// The floor is not known yet: read the committed offset first.
    ReadFloor,
    /// Below the floor: the position was moved back under the committed offset.
    Below { floor: i64 },
    /// The first record since the floor was set from a committed offset, past it: taken
    /// once the log's start shows that nothing between was deleted ([`deleted`]).
    Past { floor: i64 },
}

/// The decision for a record at `offset` of a partition whose floor is `floor`; `fresh`:
/// the floor was set from a committed offset and no record has been taken since.
pub(super) fn intake(offset: i64, floor: Option<i64>, fresh: bool) -> Intake {
    match floor {
        None => Intake::ReadFloor,
        Some(floor) if offset < floor => Intake::Below { floor },
        Some(floor) if fresh && offset > floor => Intake::Past { floor },
        Some(_) => Intake::Take,
    }
}

/// The offsets deleted unprocessed, `floor..log_start`, if the partition's log starts past
/// its floor (its committed offset): a partition read from there skips them.
pub(super) fn deleted(floor: i64, log_start: i64) -> Option<(i64, i64)> {
    (log_start > floor).then_some((floor, log_start))
}

/// The owned partitions' floors, and the rewinds in a row each fell below its floor.
#[derive(Default)]
pub(super) struct Floors {
    at: HashMap<TopicPartition, i64>,
    /// The partitions whose floor was set from a committed or sink-stored offset, with no
    /// record taken since ([`Intake::Past`]).
    fresh: HashSet<TopicPartition>,
    rewinds: HashMap<TopicPartition, u32>,
    /// The partitions whose check cannot read what it needs (the committed offset, the
    /// log's start), with when its reads first failed since the partition's last record
    /// taken.
    unreadable: HashMap<TopicPartition, Instant>,
}

impl Floors {
    #[cfg(test)]
    fn get(&self, tp: &TopicPartition) -> Option<i64> {
        self.at.get(tp).copied()
    }

    /// The decision for a record of `tp` at `offset` ([`intake`]), with the floor moved past
    /// it when it is taken: one lookup per record.
    pub(super) fn take(&mut self, tp: &TopicPartition, offset: i64) -> Intake {
        let Some(floor) = self.at.get_mut(tp) else { return Intake::ReadFloor };
        let fresh = !self.fresh.is_empty() && self.fresh.contains(tp);
        let verdict = intake(offset, Some(*floor), fresh);
        if verdict == Intake::Take {
            *floor = offset + 1;
            if fresh {
                self.fresh.remove(tp);
            }
            if !self.rewinds.is_empty() {
                self.rewinds.remove(tp);
            }
            if !self.unreadable.is_empty() {
                self.unreadable.remove(tp);
            }
        }
        verdict
    }

    /// Takes the record at `offset` of `tp` whatever its floor ([`Intake::Past`], checked).
    pub(super) fn accept(&mut self, tp: &TopicPartition, offset: i64) {
        self.at.insert(tp.clone(), offset + 1);
        self.fresh.remove(tp);
        self.rewinds.remove(tp);
        self.unreadable.remove(tp);
    }

    /// A read `tp`'s check needs failed at `now`: how long its reads have failed, since the
    /// first failure after its last record taken. Not since the last read that succeeded:
    /// the check reads the committed offset, then the log's start, and the first may keep
    /// succeeding while the second fails. The task gives up at its task timeout.
    pub(super) fn unreadable(&mut self, tp: &TopicPartition, now: Instant) -> Duration {
        now.saturating_duration_since(*self.unreadable.entry(tp.clone()).or_insert(now))
    }

    /// `partitions` are moved to `resume` (an exactly-once sink's offsets) or, those not in
    /// it, to their committed offsets (read again at their first record).
    pub(super) fn moved(&mut self, partitions: &[TopicPartition], resume: &[(TopicPartition, i64)]) {
        for tp in partitions {
            match resume.iter().find(|(r, _)| r == tp) {
                Some((_, offset)) => {
                    self.at.insert(tp.clone(), *offset);
                    self.fresh.insert(tp.clone());
                }
                None => {
                    self.at.remove(tp);
                    self.fresh.remove(tp);
                }
            };
        }
    }

    /// The read committed offsets of `partitions`; a partition the group has none for starts
    /// at its beginning, as `auto.offset.reset=earliest` has it (nothing was committed, so
    /// nothing was skipped).
    pub(super) fn read(&mut self, partitions: &[TopicPartition], committed: &HashMap<TopicPartition, i64>) {
        for tp in partitions {
            match committed.get(tp) {
                Some(offset) => {
                    self.at.insert(tp.clone(), *offset);
                    self.fresh.insert(tp.clone());
                }
                None => {
                    self.at.insert(tp.clone(), 0);
                    self.fresh.remove(tp);
                }
            }
        }
    }

    /// `tp` fell below its floor once more: how many times in a row now.
    pub(super) fn fell_below(&mut self, tp: &TopicPartition) -> u32 {
        let n = self.rewinds.entry(tp.clone()).or_default();
        *n += 1;
        *n
    }

    /// Forgets `partitions` (revoked), or every partition (`None`).
    pub(super) fn forget(&mut self, partitions: Option<&[TopicPartition]>) {
        match partitions {
            Some(partitions) => {
                for tp in partitions {
                    self.at.remove(tp);
                    self.fresh.remove(tp);
                    self.rewinds.remove(tp);
                    self.unreadable.remove(tp);
                }
            }
            None => {
                self.at.clear();
                self.fresh.clear();
                self.rewinds.clear();
                self.unreadable.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn tp(p: i32) -> TopicPartition {
        ("in".into(), p)
    }

    /// Over every offset and floor (none, 0..=20), fresh or not: taken at or above a known
    /// floor, except past a fresh one, which is checked first; below it, never.
    #[test]
    fn a_record_is_taken_exactly_when_it_is_at_or_above_a_known_floor() {
        let floors: Vec<Option<i64>> = std::iter::once(None).chain((0..=20).map(Some)).collect();
        for offset in 0..=20 {
            for &floor in &floors {
                for fresh in [false, true] {
                    let expected = match floor {
                        None => Intake::ReadFloor,
                        Some(f) if offset == f || offset > f && !fresh => Intake::Take,
                        Some(f) if offset > f => Intake::Past { floor: f },
                        Some(f) => Intake::Below { floor: f },
                    };
                    assert_eq!(intake(offset, floor, fresh), expected, "offset {offset}, floor {floor:?}, {fresh}");
                }
            }
        }
    }

    /// Over every floor and log start in 0..=20: deleted unprocessed exactly when the log
    /// starts past the floor, from the floor to the log's start.
    #[test]
    fn records_are_deleted_unprocessed_exactly_when_the_log_starts_past_the_floor() {
        for floor in 0..=20 {
            for log_start in 0..=20 {
                let expected = (log_start > floor).then_some((floor, log_start));
                assert_eq!(deleted(floor, log_start), expected, "floor {floor}, log start {log_start}");
            }
        }
    }

    /// A floor read from a committed offset or set by a sink's resume is fresh until its
    /// first record: a first record past it is checked, one at it taken; accepted, the
    /// partition goes on as usual. A partition the group has no offset for is not checked
    /// (nothing was committed, so nothing was skipped).
    #[test]
    fn the_first_record_past_a_committed_floor_is_checked_once() {
        let mut f = Floors::default();
        f.read(&[tp(0), tp(1)], &HashMap::from([(tp(0), 10)]));
        assert_eq!(f.take(&tp(1), 500), Intake::Take, "no committed offset: not checked");
        assert_eq!(f.take(&tp(0), 12), Intake::Past { floor: 10 });
        assert_eq!(f.get(&tp(0)), Some(10), "not taken yet");
        f.accept(&tp(0), 12);
        assert_eq!((f.get(&tp(0)), f.take(&tp(0), 20)), (Some(13), Intake::Take), "then as usual");
        f.moved(&[tp(2)], &[(tp(2), 7)]);
        assert_eq!(f.take(&tp(2), 7), Intake::Take, "at the floor: nothing between");
        assert_eq!(f.take(&tp(2), 9), Intake::Take, "no longer fresh");
        f.moved(&[tp(2)], &[(tp(2), 30)]);
        assert_eq!(f.take(&tp(2), 31), Intake::Past { floor: 30 }, "a sink's resume is fresh too");
        f.forget(None);
        f.read(&[tp(2)], &HashMap::from([(tp(2), 5)]));
        assert_eq!(f.take(&tp(2), 3), Intake::Below { floor: 5 }, "below: not a gap, a reset back");
        assert_eq!(f.take(&tp(2), 6), Intake::Past { floor: 5 }, "still fresh");
    }

    #[test]
    fn the_floor_follows_the_records_taken_the_reads_and_the_moves() {
        let mut f = Floors::default();
        assert_eq!(f.get(&tp(0)), None, "unknown until read");
        f.read(&[tp(0), tp(1)], &HashMap::from([(tp(0), 500)]));
        assert_eq!((f.get(&tp(0)), f.get(&tp(1))), (Some(500), Some(0)), "no committed offset: its beginning");
        assert_eq!(f.take(&tp(0), 500), Intake::Take);
        assert_eq!(intake(500, f.get(&tp(0)), false), Intake::Below { floor: 501 }, "a record read twice is below");
        f.moved(&[tp(0), tp(1)], &[(tp(1), 42)]);
        assert_eq!(
            (f.get(&tp(0)), f.get(&tp(1))),
            (None, Some(42)),
            "to the committed offset: read again; to the sink's: known"
        );
        f.moved(&[], &[]);
        f.read(&[], &HashMap::new());
        assert_eq!(f.get(&tp(1)), Some(42), "empty moves and reads change nothing");
    }

    #[test]
    fn take_decides_as_intake_and_moves_the_floor_past_what_it_takes() {
        for start in [None, Some(0), Some(5), Some(10)] {
            for offset in 0..=12 {
                let mut f = Floors::default();
                if let Some(s) = start {
                    f.read(&[tp(0)], &HashMap::from([(tp(0), s)]));
                }
                let verdict = f.take(&tp(0), offset);
                assert_eq!(verdict, intake(offset, start, start.is_some()), "start {start:?}, offset {offset}");
                let after = if verdict == Intake::Take { Some(offset + 1) } else { start };
                assert_eq!(f.get(&tp(0)), after, "start {start:?}, offset {offset}");
            }
        }
    }

    #[test]
    fn the_rewinds_in_a_row_count_until_a_record_is_taken() {
        let mut f = Floors::default();
        assert_eq!((f.fell_below(&tp(0)), f.fell_below(&tp(0)), f.fell_below(&tp(1))), (1, 2, 1));
        f.read(&[tp(0)], &HashMap::new());
        assert_eq!(f.take(&tp(0), 7), Intake::Take);
        assert_eq!(f.fell_below(&tp(0)), 1, "a record taken ends the row");
        f.forget(Some(&[tp(1)]));
        assert_eq!(f.fell_below(&tp(1)), 1, "forgotten with the partition");
        f.forget(None);
        assert_eq!((f.get(&tp(0)), f.fell_below(&tp(0))), (None, 1));
    }

    /// The failing reads are timed from the first failure after the partition's last record
    /// taken, per partition; a committed offset read meanwhile does not end the row; a
    /// record taken or accepted past the floor, or the partition forgotten, do.
    #[test]
    fn failing_reads_are_timed_from_the_first_since_a_record_was_taken() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut f = Floors::default();
        assert_eq!(f.unreadable(&tp(0), at(0)), Duration::ZERO, "the first failure");
        assert_eq!(f.unreadable(&tp(0), at(700)), Duration::from_millis(700));
        assert_eq!(f.unreadable(&tp(1), at(900)), Duration::ZERO, "per partition");
        assert_eq!(f.unreadable(&tp(0), at(1_500)), Duration::from_millis(1_500));
        f.read(&[tp(0)], &HashMap::from([(tp(0), 10)]));
        assert_eq!(f.unreadable(&tp(0), at(2_000)), Duration::from_millis(2_000), "a read alone goes on with the row");
        f.accept(&tp(0), 12);
        assert_eq!(f.unreadable(&tp(0), at(3_000)), Duration::ZERO, "a record accepted past the floor ends it");
        f.unreadable(&tp(0), at(3_100));
        assert_eq!(f.take(&tp(0), 13), Intake::Take);
        assert_eq!(f.unreadable(&tp(0), at(3_500)), Duration::ZERO, "so does a record taken");
        assert_eq!(f.unreadable(&tp(1), at(3_000)), Duration::from_millis(2_100), "the other partition's row goes on");
        f.forget(Some(&[tp(1)]));
        assert_eq!(f.unreadable(&tp(1), at(4_000)), Duration::ZERO, "forgotten with the partition");
        f.forget(None);
        assert_eq!(f.unreadable(&tp(0), at(5_000)), Duration::ZERO);
    }
}
