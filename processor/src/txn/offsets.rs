//! The input offsets a transaction commits, and the mark that says which transaction committed
//! them. The mark (unique to the producer and its cycle, about 40 bytes in each offset's
//! metadata) lets a reconcile ([`crate::runtime::reconcile`]) tell its batch's commit from the
//! next owner's commit of the same offsets. Per-consumer mode sends the member's generation
//! (KIP-447), the only fence between members; per-partition mode sends the group id alone
//! ([`group_id_only`]): the partition's transactional.id fences earlier owners, and a
//! generation would refuse unmoved partitions' transactions at every rebalance.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::{Offset, TopicPartitionList};

use crate::record::{InputRecord, Topic};

/// The next offset to consume for every partition present in `batch`.
pub(crate) fn next_offsets(batch: &[InputRecord]) -> TopicPartitionList {
    let next = next_offset_per_partition(batch);
    let mut tpl = TopicPartitionList::with_capacity(next.len());
    for ((topic, partition), offset) in next {
        // Offsets are valid for any partition we just read from: add cannot fail.
        let _ = tpl.add_partition_offset(topic, partition, Offset::Offset(offset));
    }
    tpl
}

/// [`next_offsets`] as a map, ordered by topic and partition, whose keys borrow the
/// records' [`Topic`]s (cloning one is a reference count).
pub(crate) fn next_offset_per_partition(batch: &[InputRecord]) -> BTreeMap<(&Topic, i32), i64> {
    let mut next: BTreeMap<(&Topic, i32), i64> = Default::default();
    for r in batch {
        let e = next.entry((&r.topic, r.partition)).or_insert(0);
        *e = (*e).max(r.offset + 1);
    }
    next
}

/// Group metadata naming the application's group alone: no member, generation -1. The
/// coordinator checks neither member nor generation of a transactional offset commit that
/// names none (classic groups always; KIP-848 groups since Kafka 4.0, KAFKA-18060).
/// rust-rdkafka has no constructor for it: it is read from a consumer of the group,
/// created and dropped here without subscribing, so it never joins.
pub(crate) fn group_id_only(reader: rdkafka::ClientConfig) -> Result<ConsumerGroupMetadata, String> {
    let consumer: BaseConsumer = reader.create().map_err(|e| crate::config::client_error(&e))?;
    consumer.group_metadata().ok_or_else(|| "librdkafka returned no group metadata".to_string())
}

/// The mark of cycle `cycle` of the producer whose nonce is `nonce`.
pub(crate) fn mark(nonce: u64, cycle: usize) -> String {
    format!("kafka-eos/{nonce:016x}/{cycle}")
}

/// `offsets` with `mark` as every offset's metadata.
pub(crate) fn marked(offsets: &TopicPartitionList, mark: &str) -> TopicPartitionList {
    let offsets = offsets.clone();
    for mut e in offsets.elements() {
        e.set_metadata(mark);
    }
    offsets
}

/// A value for one producer that no other producer, of this process or another, is
/// expected to draw: std's hasher keys are random per process, and a counter tells this
/// process's producers apart.
pub(crate) fn nonce() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_offset_carries_the_mark_and_marks_differ_by_producer_and_cycle() {
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition_offset("a", 0, Offset::Offset(5));
        let _ = tpl.add_partition_offset("b", 3, Offset::Offset(9));
        let m = mark(nonce(), 7);
        let stamped = marked(&tpl, &m);
        assert!(stamped.elements().iter().all(|e| e.metadata() == m), "{stamped:?}");
        assert!(tpl.elements().iter().all(|e| e.metadata().is_empty()), "the original is untouched");
        assert_eq!(stamped.find_partition("b", 3).and_then(|e| e.offset().to_raw()), Some(9));
        let (n1, n2) = (nonce(), nonce());
        assert_ne!(n1, n2);
        assert_ne!(mark(n1, 1), mark(n1, 2));
    }
}
