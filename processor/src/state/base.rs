//! A restored state's base: the group's committed offsets of its input partitions, with
//! their marks, that the state reflects. In the exactly-once modes a change to a partition's
//! state commits in the transaction that commits its input's offsets, so a state rebuilt
//! from the changelogs is the effect of exactly the records below those offsets — provided
//! no transaction committed between the read of the offsets and the end of the changelog
//! read. A restore therefore reads the offsets (as stable) before and after reading the
//! changelogs ([`moved`]): any difference is another owner's commit (a member the group
//! expired unseen, which fenced this one's producer to commit), and the state is not used.
//! The task keeps the base in its ledger: what it then reads of the group is compared with it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::TopicPartitionList;

use crate::partition::TopicPartition;

/// Per input partition, its committed offset and that offset's mark (the metadata of the
/// transaction that committed it); `None`: the group has none.
pub(crate) type Base = BTreeMap<TopicPartition, Option<(i64, String)>>;

/// The base `committed` describes: each partition's offset with its metadata, or `None`
/// where the group has no offset.
pub(crate) fn base(committed: &TopicPartitionList) -> Base {
    committed
        .elements()
        .iter()
        .map(|e| {
            let at = e.offset().to_raw().filter(|o| *o >= 0).map(|o| (o, e.metadata().to_string()));
            ((e.topic().into(), e.partition()), at)
        })
        .collect()
}

/// The partitions whose committed offset or mark differs between two reads of the group
/// (a partition in only one of them counts as differing), sorted.
pub(crate) fn moved(before: &Base, after: &Base) -> Vec<TopicPartition> {
    let mut moved: Vec<TopicPartition> =
        before.iter().filter(|(tp, at)| after.get(*tp) != Some(*at)).map(|(tp, _)| tp.clone()).collect();
    moved.extend(after.keys().filter(|tp| !before.contains_key(*tp)).cloned());
    moved.sort();
    moved
}

/// The partitions of `partitions` whose state holds committed changes (`held`, in the same
/// order) while the group has no committed offset for any input partition of that number
/// (`with_offsets`: the numbers with one). In the exactly-once modes a change commits with
/// its input's offsets, so such state outlived its group's offsets (deleted or expired):
/// processing from the log's start would apply every record to it a second time.
pub(crate) fn state_without_offsets(partitions: &[i32], held: &[bool], with_offsets: &[i32]) -> Vec<i32> {
    partitions.iter().zip(held).filter(|(p, held)| **held && !with_offsets.contains(p)).map(|(p, _)| *p).collect()
}

/// The group's committed offsets of `partitions`, fetched as *stable*: the broker answers
/// `UNSTABLE_OFFSET_COMMIT` while a transaction that carries offsets of these partitions is
/// still open or completing, and the fetch is asked again until it is not (or `deadline`
/// passes; the last error is returned). So the answer never reflects a transaction whose
/// fate is still open. A refusal for want of an ACL is returned at once. `consumer` must be
/// built from [`group_reader_config`](super::changelog::group_reader_config).
pub(crate) fn stable_committed_offsets<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &TopicPartitionList,
    deadline: Instant,
) -> rdkafka::error::KafkaResult<TopicPartitionList> {
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        // An error of one partition (e.g. UNSTABLE_OFFSET_COMMIT) fails the fetch.
        let fetched = consumer.committed_offsets(partitions.clone(), remaining.min(Duration::from_secs(10))).and_then(
            |offsets| match offsets.elements().iter().find_map(|e| e.error().err()) {
                Some(e) => Err(e),
                None => Ok(offsets),
            },
        );
        match fetched {
            Ok(offsets) => return Ok(offsets),
            // A refusal is not retried: only a grant ends it.
            Err(e) if Instant::now() >= deadline || crate::error::refusal_code(&e).is_some() => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "committed offsets not stable yet");
                std::thread::sleep(Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over every pair of bases of up to two partitions, each absent, with no offset, or at
    /// one of two offsets with one of two marks (empty bases included): a partition has
    /// moved exactly when the two reads say different things of it.
    #[test]
    fn a_partition_moved_exactly_when_the_two_reads_differ() {
        /// A partition's place in a read: absent, or what the group holds for it.
        type Fact = Option<Option<(i64, String)>>;
        let facts: Vec<Fact> = vec![
            None,
            Some(None),
            Some(Some((5, "a".into()))),
            Some(Some((5, "b".into()))),
            Some(Some((7, "a".into()))),
        ];
        let tp = |p: i32| -> TopicPartition { ("in".into(), p) };
        let bases: Vec<(Base, Vec<Fact>)> = (0..facts.len() * facts.len())
            .map(|i| {
                let chosen = vec![facts[i % facts.len()].clone(), facts[i / facts.len()].clone()];
                let base =
                    chosen.iter().enumerate().filter_map(|(p, f)| f.clone().map(|f| (tp(p as i32), f))).collect();
                (base, chosen)
            })
            .collect();
        for (before, b) in &bases {
            for (after, a) in &bases {
                let expected: Vec<TopicPartition> = (0..2).filter(|p| b[*p] != a[*p]).map(|p| tp(p as i32)).collect();
                assert_eq!(moved(before, after), expected, "{before:?} then {after:?}");
            }
        }
    }
}
#[cfg(test)]
mod without_offsets_tests {
    use super::state_without_offsets;

    /// Over every partition list of up to three of 0..3 (empty included), every held/empty
    /// pattern and every set of numbers with offsets: a partition is named exactly when its
    /// state holds changes and its number has no offset, in the order asked for.
    #[test]
    fn state_is_without_offsets_exactly_when_it_holds_changes_and_its_number_has_no_offset() {
        let subsets = |n: u32| (0..1u32 << n).map(move |bits| (0..n as i32).filter(|i| bits & (1 << i) != 0).collect());
        for partitions in subsets(3).collect::<Vec<Vec<i32>>>() {
            for held_bits in 0..1u32 << partitions.len() {
                let held: Vec<bool> = (0..partitions.len()).map(|i| held_bits & (1 << i) != 0).collect();
                for with_offsets in subsets(4).collect::<Vec<Vec<i32>>>() {
                    let named = state_without_offsets(&partitions, &held, &with_offsets);
                    let expected: Vec<i32> = partitions
                        .iter()
                        .enumerate()
                        .filter(|(i, p)| held[*i] && !with_offsets.contains(p))
                        .map(|(_, p)| *p)
                        .collect();
                    assert_eq!(named, expected, "{partitions:?} held {held:?} offsets {with_offsets:?}");
                    assert!(named.iter().all(|p| partitions.contains(p)));
                }
            }
        }
    }
}
