//! The records the consumer thread holds for tasks whose queue is full, and when to pause a
//! partition instead. The consumer thread never blocks on a task (it must keep polling to run
//! rebalances). Pausing makes librdkafka drop and re-fetch its prefetch, and tasks drain in
//! bursts, so the bound is generous: [`PENDING_FACTOR`] queues' worth per partition while the
//! instance's pending records stay under [`PENDING_BUDGET`] bytes, one queue's worth once
//! over it (`docs/operations.md`, *Sizing*).

use std::collections::{HashMap, VecDeque};

use crate::partition::TopicPartition;
use crate::record::InputRecord;

/// How many task queues' worth of records a partition may hold here while the instance is
/// under [`PENDING_BUDGET`].
pub(super) const PENDING_FACTOR: usize = 10;

/// The bytes of pending records (keys, values, headers and a fixed overhead per record)
/// under which partitions may hold more than one queue's worth: 64 MiB.
pub(super) const PENDING_BUDGET: usize = 64 << 20;

/// Bytes a record holds besides its payload (the `InputRecord` and its queue slot).
const RECORD_OVERHEAD: usize = std::mem::size_of::<InputRecord>();

/// Records waiting for room in their task's queue, per partition, and their total size.
#[derive(Default)]
pub(super) struct Pending {
    queues: HashMap<TopicPartition, VecDeque<InputRecord>>,
    bytes: usize,
}

/// What a send to a task did with a pending record.
pub(super) enum Sent {
    /// The task took it.
    Taken,
    /// The task's queue is full, or the partition has no task right now: the record stays
    /// first in line.
    Full(InputRecord),
    /// The task is gone: the partition's records are dropped (never committed, so the
    /// partition's next owner reads them again).
    Gone,
}

impl Pending {
    pub(super) fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Whether records of `tp` wait here (a later record must then queue behind them).
    pub(super) fn contains(&self, tp: &TopicPartition) -> bool {
        self.queues.contains_key(tp)
    }

    /// Queues `record` behind `tp`'s others; `true` if the partition should now be paused:
    /// it holds a task queue's worth (`capacity`) and either [`PENDING_FACTOR`] times that
    /// or the instance is over [`PENDING_BUDGET`].
    pub(super) fn push(&mut self, tp: &TopicPartition, record: InputRecord, capacity: usize) -> bool {
        self.bytes += size(&record);
        let queue = self.queues.entry(tp.clone()).or_default();
        queue.push_back(record);
        let len = queue.len();
        len >= capacity && (len >= PENDING_FACTOR * capacity || self.bytes >= PENDING_BUDGET)
    }

    /// Drops `tp`'s records (revoked, or moved back to the committed offset).
    pub(super) fn remove(&mut self, tp: &TopicPartition) {
        if let Some(queue) = self.queues.remove(tp) {
            self.bytes -= queue.iter().map(size).sum::<usize>();
        }
    }

    /// Hands each partition's records to `send` in order, as long as it takes them; returns
    /// the partitions it emptied (no longer pending).
    pub(super) fn drain(&mut self, mut send: impl FnMut(&TopicPartition, InputRecord) -> Sent) -> Vec<TopicPartition> {
        let mut emptied = Vec::new();
        for (tp, queue) in self.queues.iter_mut() {
            while let Some(r) = queue.pop_front() {
                let bytes = size(&r);
                match send(tp, r) {
                    Sent::Taken => self.bytes -= bytes,
                    Sent::Full(r) => {
                        queue.push_front(r);
                        break;
                    }
                    Sent::Gone => {
                        self.bytes -= bytes;
                        break;
                    }
                }
            }
            if queue.is_empty() {
                emptied.push(tp.clone());
            }
        }
        for tp in &emptied {
            self.queues.remove(tp);
        }
        emptied
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

fn size(r: &InputRecord) -> usize {
    let headers: usize = r.headers.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
    RECORD_OVERHEAD + r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len) + headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Topic;

    fn rec(offset: i64, value_len: usize) -> InputRecord {
        InputRecord { value: Some(vec![0; value_len]), ..InputRecord::test("t", 0, offset) }
    }

    #[test]
    fn a_partition_holds_ten_queues_while_under_budget_and_one_over_it() {
        let tp: TopicPartition = (Topic::new("t"), 0);
        let mut p = Pending::default();
        let pauses: Vec<bool> = (0..30).map(|i| p.push(&tp, rec(i, 10), 3)).collect();
        assert_eq!(pauses.iter().position(|x| *x), Some(29), "paused at 10 x 3 records");
        // Over the budget: a partition pauses at one queue's worth.
        let big: TopicPartition = (Topic::new("big"), 1);
        let mut p = Pending::default();
        assert!(!p.push(&big, rec(0, PENDING_BUDGET), 2), "under one queue's worth");
        assert!(p.push(&big, rec(1, 1), 2), "one queue's worth, over the budget");
    }

    #[test]
    fn bytes_follow_every_record_in_and_out() {
        let (a, b): (TopicPartition, TopicPartition) = ((Topic::new("t"), 0), (Topic::new("t"), 1));
        let mut p = Pending::default();
        for i in 0..4 {
            p.push(&a, rec(i, 100), 1000);
            p.push(&b, rec(i, 50), 1000);
        }
        let one = |n: usize| RECORD_OVERHEAD + n;
        assert_eq!(p.bytes(), 4 * one(100) + 4 * one(50));
        // The task of `a` takes two records, then is full; `b` has no task now.
        let mut taken = 0;
        let emptied = p.drain(|tp, r| {
            if tp != &a {
                return Sent::Full(r);
            }
            taken += 1;
            if taken <= 2 {
                Sent::Taken
            } else {
                Sent::Full(r)
            }
        });
        assert!(emptied.is_empty());
        assert_eq!(p.bytes(), 2 * one(100) + 4 * one(50));
        // Its task gone: the record handed over is dropped, the rest stays until removed.
        let emptied = p.drain(|tp, r| if tp == &a { Sent::Gone } else { Sent::Full(r) });
        assert!(emptied.is_empty() && p.contains(&a));
        assert_eq!(p.bytes(), one(100) + 4 * one(50));
        p.remove(&a);
        let emptied = p.drain(|_, _| Sent::Taken);
        assert_eq!(emptied, vec![b.clone()]);
        assert!(p.is_empty() && p.bytes() == 0);
    }
}
