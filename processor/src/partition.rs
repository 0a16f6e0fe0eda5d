//! Partitions: the `(topic, partition)` key and a batch's offset range per partition, named
//! by the runtime, the transaction cycle, sinks, metrics and health alike.

use crate::record::{InputRecord, Topic};

/// `(topic, partition)`. The topic is a [`Topic`], so that keying a
/// map by a record's partition clones a reference count, not the name (the consumer thread
/// and the tasks do so per record).
pub(crate) type TopicPartition = (Topic, i32);

/// Where partitions resume when the pipeline's sink stores their offsets ([`crate::sink`]).
pub(crate) type Resume = Vec<(TopicPartition, i64)>;

/// The input range of a batch in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRange {
    /// Input topic.
    pub topic: Topic,
    /// Input partition.
    pub partition: i32,
    /// First input offset of the batch in this partition.
    pub first_offset: i64,
    /// Last input offset + 1: where the partition resumes once the batch is written (what an
    /// exactly-once sink stores).
    pub next_offset: i64,
}

/// Each input partition's range in `batch`: first offset and last + 1, in order of first
/// appearance.
pub(crate) fn partition_ranges(batch: &[InputRecord]) -> Vec<PartitionRange> {
    let mut ranges: Vec<PartitionRange> = Vec::new();
    for r in batch {
        match ranges.iter_mut().find(|x| x.partition == r.partition && x.topic == r.topic) {
            Some(x) => {
                x.first_offset = x.first_offset.min(r.offset);
                x.next_offset = x.next_offset.max(r.offset + 1);
            }
            None => ranges.push(PartitionRange {
                topic: r.topic.clone(),
                partition: r.partition,
                first_offset: r.offset,
                next_offset: r.offset + 1,
            }),
        }
    }
    ranges
}
