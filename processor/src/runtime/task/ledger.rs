//! The per-partition ledger ([`Ledger`]): what a task knows of each partition it owns, in one
//! place. Each fact has one owner here and changes only on the task's events:
//!
//! | fact | set by | read by |
//! |---|---|---|
//! | the group's committed offset and its mark | the restore of the partition's state (the offset that state reflects), a read of the group (the floor's read, a resume from a sink, where timers alone stand), this task's own commit | a transaction of timers alone (what it commits), a reconcile (what stood before the transaction: [`Before`]) |
//! | the floor | the floor's read, a resume, each record taken ([`floor`](super::floor)) | the intake check at each record |
//! | the rewinds waited for | a replacement in place, a dropped batch ([`rewind`](super::rewind)) | the intake check at each record |
//! | the offsets the batch in flight commits | the batch's first attempt | its reconcile |
//!
//! Forgetting a partition (revoked) or every partition (a producer given up, whose last
//! transaction may have committed unseen) forgets what the group had: it is read again
//! before it is relied on.
//!
//! A known committed offset is never overwritten by a read ([`Ledger::learn`]): it is what
//! the task's state of the partition reflects (restored at it, or committed by the task
//! itself), so a read that finds anything else means another owner committed the partition
//! since — a member the group expired unseen, whose reconcile fenced this task's producer —
//! and the state here is stale. Learning it would make that commit look like this task's
//! own starting point: a reconcile would then take this task's transaction for aborted and
//! replay it on the stale state, committing a second lineage of the partition.

use std::collections::{HashMap, HashSet};

use rdkafka::{Offset, TopicPartitionList};

use super::floor::Floors;
use super::rewind::Rewinds;
use crate::partition::TopicPartition;
use crate::runtime::reconcile::{Before, Spans};

/// A partition's committed offset in the group and that offset's mark (the metadata of the
/// transaction that committed it); `None`: the group has none.
pub(super) type Committed = Option<(i64, String)>;

/// What a task knows of its partitions (see the module docs).
#[derive(Default)]
pub(crate) struct Ledger {
    /// Per partition, the group's committed offset as last known; absent: not known.
    committed: HashMap<TopicPartition, Committed>,
    /// The lowest offset each partition's next record may have.
    pub(super) floors: Floors,
    /// The partitions whose records are dropped until the consumer rewinds them.
    pub(super) rewinds: Rewinds,
    /// The offsets the batch in flight commits, kept for its reconcile.
    in_flight: TopicPartitionList,
}

/// How a read of the group's committed offset of a partition stands against what the ledger
/// knows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// Nothing was known: the read is learned.
    New,
    /// The same offset with the same mark (or none, as known): nothing committed there since.
    Same,
    /// Anything else: a transaction that is not this task's committed the partition since
    /// (this task's own commits are learned as they end). Not learned.
    Moved,
}

/// What a read `read` of a partition's committed offset is, given what was `known`
/// (`None`: nothing).
pub(super) fn compare(known: Option<&Committed>, read: &Committed) -> Read {
    match known {
        None => Read::New,
        Some(k) if k == read => Read::Same,
        Some(_) => Read::Moved,
    }
}

impl Ledger {
    /// A read of the group found `tp` committed at `read`: learned if nothing was known,
    /// never overwriting what was ([`compare`]; see the module docs).
    pub(super) fn learn(&mut self, tp: &TopicPartition, read: Committed) -> Read {
        let verdict = compare(self.committed.get(tp), &read);
        if verdict == Read::New {
            self.committed.insert(tp.clone(), read);
        }
        verdict
    }

    /// What the group is known to hold for `tp` (`None`: not known).
    pub(super) fn known(&self, tp: &TopicPartition) -> Option<&Committed> {
        self.committed.get(tp)
    }

    /// The batch in flight committed, its offsets carrying `mark` (`None`: a transaction
    /// that sent none, whose partitions are then not known).
    pub(super) fn committed_in_flight(&mut self, mark: Option<&str>) {
        for e in self.in_flight.elements() {
            let (Some(next), tp) = (e.offset().to_raw(), (e.topic().into(), e.partition())) else { continue };
            match mark {
                Some(mark) => self.committed.insert(tp, Some((next, mark.to_string()))),
                None => self.committed.remove(&tp),
            };
        }
    }

    /// Of `owned`, the partitions whose committed offset is not known.
    pub(super) fn unknown<'a>(&self, owned: impl IntoIterator<Item = &'a TopicPartition>) -> Vec<TopicPartition> {
        owned.into_iter().filter(|tp| !self.committed.contains_key(*tp)).cloned().collect()
    }

    /// Of `owned`, the partitions the group has no committed offset for.
    pub(super) fn nothing_committed<'a>(
        &self,
        owned: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> Vec<TopicPartition> {
        owned.into_iter().filter(|tp| matches!(self.committed.get(*tp), Some(None))).cloned().collect()
    }

    /// The partition numbers whose state a transaction that commits `committing` must not
    /// change: of `owned`, those no partition of which has an offset the group is known to
    /// hold or `committing` holds. Committed, a change there (a timer of an idle partition,
    /// fired without a record) would be state the group has no offset for, which a restart
    /// refuses ([`Error::StateWithoutOffsets`](crate::Error::StateWithoutOffsets)).
    pub(super) fn held<'a>(
        &self,
        owned: impl IntoIterator<Item = &'a TopicPartition>,
        committing: impl Fn(&TopicPartition) -> bool,
    ) -> HashSet<i32> {
        let (mut all, mut allowed) = (HashSet::new(), HashSet::new());
        for tp in owned {
            all.insert(tp.1);
            if matches!(self.committed.get(tp), Some(Some(_))) || committing(tp) {
                allowed.insert(tp.1);
            }
        }
        all.retain(|p| !allowed.contains(p));
        all
    }

    /// Where `owned` stand, sorted: the committed offset of each one known, and for one the
    /// group has none for, its log's start in `starts` (where `auto.offset.reset=earliest`
    /// starts it: committing it skips nothing; left out if not in `starts`). A transaction of
    /// timers alone commits these: every owned partition carries its mark, so its outcome
    /// can be read back, and per consumer the group generation fences it.
    pub(super) fn standing<'a>(
        &self,
        owned: impl IntoIterator<Item = &'a TopicPartition>,
        starts: &HashMap<TopicPartition, i64>,
    ) -> TopicPartitionList {
        let mut known: Vec<(&TopicPartition, i64)> = owned
            .into_iter()
            .filter_map(|tp| match self.committed.get(tp)? {
                Some((offset, _)) => Some((tp, *offset)),
                None => starts.get(tp).map(|start| (tp, *start)),
            })
            .collect();
        known.sort();
        let mut tpl = TopicPartitionList::with_capacity(known.len());
        for ((topic, partition), offset) in known {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(offset));
        }
        tpl
    }

    /// What stood committed before the transaction over `spans` began, for the partitions
    /// whose committed offset is known ([`reconcile::decide`](crate::runtime::reconcile::decide)).
    pub(super) fn before(&self, spans: &Spans) -> Before {
        spans
            .keys()
            .filter_map(|(topic, partition)| {
                let known = self.committed.get(&(topic.as_str().into(), *partition))?;
                Some(((topic.clone(), *partition), known.clone()))
            })
            .collect()
    }

    /// The batch in flight commits `offsets`.
    pub(super) fn set_in_flight(&mut self, offsets: TopicPartitionList) {
        self.in_flight = offsets;
    }

    /// The offsets the batch in flight commits.
    pub(super) fn in_flight(&self) -> &TopicPartitionList {
        &self.in_flight
    }

    /// Forgets what the group had and the floors of `partitions` (revoked), or of every
    /// partition (`None`: a producer given up; the partitions are rewound or handed back).
    pub(super) fn forget(&mut self, partitions: Option<&[TopicPartition]>) {
        match partitions {
            Some(partitions) => {
                for tp in partitions {
                    self.committed.remove(tp);
                }
            }
            None => self.committed.clear(),
        }
        self.floors.forget(partitions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("in".into(), p)
    }

    fn offsets(tpl: &TopicPartitionList) -> Vec<(i32, Option<i64>)> {
        tpl.elements().iter().map(|e| (e.partition(), e.offset().to_raw())).collect()
    }

    #[test]
    fn what_the_group_had_is_known_from_reads_and_own_commits_until_forgotten() {
        let mut l = Ledger::default();
        let owned = [tp(0), tp(1), tp(2)];
        assert_eq!(l.unknown(&owned), owned.to_vec(), "nothing known at first");
        assert_eq!(offsets(&l.standing(&owned, &HashMap::new())), vec![]);
        assert_eq!(l.learn(&tp(0), Some((10, "m0".into()))), Read::New);
        assert_eq!(l.learn(&tp(1), None), Read::New);
        assert_eq!(l.learn(&tp(0), Some((10, "m0".into()))), Read::Same);
        assert_eq!(l.learn(&tp(0), Some((10, "other".into()))), Read::Moved, "another transaction's mark");
        assert_eq!(l.learn(&tp(1), Some((4, "other".into()))), Read::Moved, "committed since nothing stood");
        assert_eq!(l.known(&tp(0)), Some(&Some((10, "m0".to_string()))), "a moved read is not learned");
        assert_eq!(l.unknown(&owned), vec![tp(2)]);
        assert_eq!(l.nothing_committed(&owned), vec![tp(1)]);
        assert_eq!(offsets(&l.standing(&owned, &HashMap::new())), vec![(0, Some(10))], "no log start: left out");
        let starts = HashMap::from([(tp(1), 70)]);
        assert_eq!(offsets(&l.standing(&owned, &starts)), vec![(0, Some(10)), (1, Some(70))], "none: its log's start");
        let mut sent = TopicPartitionList::new();
        let _ = sent.add_partition_offset("in", 0, Offset::Offset(15));
        let _ = sent.add_partition_offset("in", 2, Offset::Offset(3));
        l.set_in_flight(sent);
        l.committed_in_flight(Some("m1"));
        assert!(l.unknown(&owned).is_empty());
        let spans: Spans = [(("in".to_string(), 0), (15, 15)), (("in".to_string(), 5), (1, 2))].into_iter().collect();
        let before = l.before(&spans);
        assert_eq!(before.get(&("in".to_string(), 0)), Some(&Some((15, "m1".to_string()))));
        assert_eq!(before.get(&("in".to_string(), 5)), None, "not known: left out");
        l.forget(Some(&[tp(0)]));
        assert_eq!(l.unknown(&owned), vec![tp(0)]);
        l.forget(None);
        assert_eq!(l.unknown(&owned), owned.to_vec());
        assert!(l.before(&Spans::new()).is_empty(), "no spans, nothing before");
        l.learn(&tp(0), Some((15, "m1".into())));
        l.learn(&tp(1), None);
        l.committed_in_flight(None);
        assert_eq!(l.unknown(&owned), vec![tp(0), tp(2)], "a commit without a mark: its partitions not known");
    }

    /// The events that change what the ledger knows of the group's offsets, over two
    /// partitions.
    #[derive(Debug, Clone, Copy)]
    enum Event {
        /// A read found partition `p` at `Some(offset)`, or with nothing committed.
        Learned(i32, Option<i64>),
        /// The batch in flight (both partitions, at `offset`) committed, with a mark or without.
        Committed(i64, bool),
        /// Partition `p` was revoked.
        Revoked(i32),
        /// The producer was given up.
        GivenUp,
    }

    /// Over every sequence of up to four events (empty included): what the ledger says stood
    /// before a transaction, and where timers alone would commit, is what a plain model of
    /// "the first thing read or the last commit, unless forgotten since" says; and a read is
    /// new, the same, or moved exactly as that model has it.
    #[test]
    fn the_ledger_knows_exactly_the_last_read_or_commit_of_each_partition() {
        let events: Vec<Event> = [
            Event::Learned(0, Some(5)),
            Event::Learned(0, Some(12)),
            Event::Learned(0, None),
            Event::Learned(1, Some(9)),
            Event::Committed(12, true),
            Event::Committed(12, false),
            Event::Revoked(0),
            Event::GivenUp,
        ]
        .to_vec();
        let mut sequences: Vec<Vec<Event>> = vec![Vec::new()];
        for _ in 0..4 {
            let longer: Vec<Vec<Event>> = sequences
                .iter()
                .filter(|s| s.len() == sequences.last().map_or(0, Vec::len))
                .flat_map(|s| events.iter().map(move |e| [s.clone(), vec![*e]].concat()))
                .collect();
            sequences.extend(longer);
        }
        let owned = [tp(0), tp(1)];
        let spans: Spans = [(("in".to_string(), 0), (12, 12)), (("in".to_string(), 1), (12, 12))].into_iter().collect();
        let starts = HashMap::from([(tp(0), 3), (tp(1), 3)]);
        for sequence in &sequences {
            let mut ledger = Ledger::default();
            let mut model: HashMap<i32, Committed> = HashMap::new();
            let mut in_flight = TopicPartitionList::new();
            for p in [0, 1] {
                let _ = in_flight.add_partition_offset("in", p, Offset::Offset(12));
            }
            ledger.set_in_flight(in_flight);
            for event in sequence {
                match *event {
                    Event::Learned(p, at) => {
                        let committed = at.map(|o| (o, "read".to_string()));
                        let expected = match model.get(&p) {
                            None => Read::New,
                            Some(known) if *known == committed => Read::Same,
                            Some(_) => Read::Moved,
                        };
                        assert_eq!(ledger.learn(&tp(p), committed.clone()), expected, "{sequence:?}");
                        model.entry(p).or_insert(committed);
                    }
                    Event::Committed(next, marked) => {
                        ledger.committed_in_flight(marked.then_some("mine"));
                        for p in [0, 1] {
                            match marked {
                                true => model.insert(p, Some((next, "mine".to_string()))),
                                false => model.remove(&p),
                            };
                        }
                    }
                    Event::Revoked(p) => {
                        ledger.forget(Some(&[tp(p)]));
                        model.remove(&p);
                    }
                    Event::GivenUp => {
                        ledger.forget(None);
                        model.clear();
                    }
                }
            }
            let before = ledger.before(&spans);
            for p in [0, 1] {
                assert_eq!(before.get(&("in".to_string(), p)), model.get(&p), "{sequence:?}: partition {p}");
            }
            let expected: Vec<(i32, Option<i64>)> = [0, 1]
                .into_iter()
                .filter_map(|p| model.get(&p).map(|c| (p, Some(c.as_ref().map_or(3, |(o, _)| *o)))))
                .collect();
            assert_eq!(offsets(&ledger.standing(&owned, &starts)), expected, "{sequence:?}");
            let unknown: Vec<TopicPartition> = [0, 1].into_iter().filter(|p| !model.contains_key(p)).map(tp).collect();
            assert_eq!(ledger.unknown(&owned), unknown, "{sequence:?}");
        }
    }

    /// Over every assignment of three partitions (two numbers, one of them with two topics)
    /// to unknown / nothing committed / committed, and every subset committing: a number is
    /// held exactly when none of its partitions is committed in the group or committing.
    #[test]
    fn a_partition_number_is_held_exactly_when_none_of_its_partitions_has_or_gets_an_offset() {
        let owned = [tp(0), ("rep".into(), 0), tp(1)];
        let facts = |i: usize| -> Option<Committed> {
            match i {
                0 => None,
                1 => Some(None),
                _ => Some(Some((5, "m".into()))),
            }
        };
        for a in 0..27usize {
            let mut l = Ledger::default();
            let known: Vec<Option<Committed>> = (0..3).map(|k| facts(a / 3usize.pow(k) % 3)).collect();
            for (tp, fact) in owned.iter().zip(&known) {
                if let Some(c) = fact {
                    l.learn(tp, c.clone());
                }
            }
            for mask in 0..8usize {
                let committing =
                    |t: &TopicPartition| owned.iter().position(|o| o == t).is_some_and(|i| mask >> i & 1 == 1);
                let ok = |i: usize| matches!(known[i], Some(Some(_))) || mask >> i & 1 == 1;
                let mut expected = HashSet::new();
                if !(ok(0) || ok(1)) {
                    expected.insert(0);
                }
                if !ok(2) {
                    expected.insert(1);
                }
                assert_eq!(l.held(&owned, committing), expected, "{known:?}, committing {mask:03b}");
            }
        }
        assert!(Ledger::default().held(&[], |_| true).is_empty(), "nothing owned, nothing held");
    }
}
