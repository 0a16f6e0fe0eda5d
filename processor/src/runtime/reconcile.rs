//! Fence-and-reconcile: what a task does when its transaction's outcome is unknown (a commit
//! step without a definite answer, a fatal producer, a refused abort). Reusing the producer is
//! unsafe (a delayed request of the old transaction can land in a later one of the same epoch,
//! KAFKA-17754), and guessing duplicates or loses the batch. So [`reconcile`]:
//! 1. drops the producer, never to use it again;
//! 2. initialises a fresh one with the same transactional.id, which completes or aborts the
//!    old transaction and fences everything still in flight;
//! 3. reads the batch's partitions' committed offsets *as stable* ([`stable_committed_offsets`]);
//! 4. [`decide`]s from them and the transaction's mark: committed (merge the overlays),
//!    aborted (replay with the fresh producer), or moved by another owner (give up).
//!
//! Invariants: no same-epoch retry of the commit step; reconciling only while the task owns
//! the partitions and before its deadline, so a newer owner is never fenced except in the
//! window where the group expired this member unseen (liveness, never exactly-once); anything
//! that cannot finish by the deadline gives the producer up to the group. The full argument:
//! `docs/semantics.md`, *The transaction cycle, and what happens when its outcome is unknown*.

use std::collections::BTreeMap;

use rdkafka::consumer::BaseConsumer;
use rdkafka::TopicPartitionList;

use crate::config::PipelineConfig;
use crate::error::ErrorClass;
use crate::observe::Reconciliation;
use crate::record::InputRecord;
use crate::runtime::interrupt::Deadline;
use crate::state::base::stable_committed_offsets;
use crate::state::changelog::group_reader_config;
use crate::txn::{Step, StepError, TxnProducer};

/// What a failed cycle's Kafka error leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A definite failure inside an open transaction: abort it and replay the batch on the
    /// same producer.
    Replay,
    /// The transaction's outcome is unknown, or the producer unusable: [`reconcile`].
    Reconcile,
    /// This producer or member has been replaced (fenced by a newer owner, or offsets
    /// refused for a group member that left): drop it and give the partitions back.
    GiveUp,
    /// The brokers refused the principal an ACL: abort what is open and stop the pipeline.
    Stop,
}

/// Decides what a failed step leads to (`transactional`: the producer has a
/// transactional.id; at-least-once has no transaction to reconcile).
///
/// Every error of the commit step itself (`commit_transaction`) leaves the outcome unknown
/// except fencing: the `EndTxn` may have been sent and acted on. So does a
/// `send_offsets_to_transaction` without a definite answer (retriable: it timed out), a
/// producer turned fatal, and an abort that failed for any reason but fencing.
///
/// A refusal for want of an ACL stops, at every step: the brokers refuse before acting, so
/// even a refused commit step committed nothing, and no replay or fresh producer gets past
/// the refusal.
pub(crate) fn verdict(e: &StepError, transactional: bool) -> Verdict {
    if e.class == ErrorClass::NotAuthorized {
        return Verdict::Stop;
    }
    if replaced(e) {
        return Verdict::GiveUp;
    }
    if !transactional {
        return if e.class == ErrorClass::Fatal { Verdict::GiveUp } else { Verdict::Replay };
    }
    match (e.step, e.class) {
        (Step::Commit | Step::Abort, _) | (_, ErrorClass::Fatal) | (Step::SendOffsets, ErrorClass::Retriable) => {
            Verdict::Reconcile
        }
        _ => Verdict::Replay,
    }
}

/// Whether `e` says that someone else took over: the producer was fenced by a newer owner
/// of its transactional.id, or the group no longer knows this member (`is_fencing` in
/// `error.rs`). Then the partitions belong elsewhere, and only the group may hand them
/// back: replaying as this member until the task timeout would livelock the partition, and
/// the revocation that waits for this task would keep the consumer from rejoining.
pub(crate) fn replaced(e: &StepError) -> bool {
    e.class == ErrorClass::Fenced
}

/// Steps 2–4 of the [module docs](self), after the caller dropped the old producer and
/// checked that it still owns the partitions: a fresh, initialised producer for
/// `transactional_id` and what the transaction over `spans` ([`spans`]), whose offsets
/// carried `mark`, became ([`decide`], with `before`). `Err` says why the outcome could not
/// be learned (the caller falls back to giving the partitions up).
pub(crate) fn reconcile(
    cfg: &PipelineConfig,
    transactional_id: &str,
    label: &str,
    spans: &Spans,
    mark: Option<&str>,
    before: &Before,
    deadline: Deadline<'_>,
) -> Result<(TxnProducer, Reconciliation), Undecided> {
    if spans.is_empty() {
        return Err(Undecided::Unreadable(
            "the transaction committed no offsets: its outcome cannot be read back".into(),
        ));
    }
    let unreadable = Undecided::Unreadable;
    let mut producer = TxnProducer::create(cfg, Some(transactional_id.to_string()), label)
        .map_err(|e| unreadable(format!("cannot create a fresh producer: {e}")))?;
    producer.init(deadline).map_err(|e| unreadable(format!("fencing the old producer: {e}")))?;
    let reader: BaseConsumer = group_reader_config(cfg)
        .create()
        .map_err(|e| unreadable(format!("offset reader: {}", crate::config::client_error(&e))))?;
    let mut partitions = TopicPartitionList::new();
    for (topic, partition) in spans.keys() {
        partitions.add_partition(topic, *partition);
    }
    let committed = stable_committed_offsets(&reader, &partitions, deadline.instant())
        .map_err(|e| unreadable(format!("fetching the stable committed offsets: {e}")))?;
    Ok((producer, decide(&committed, spans, mark, before)?))
}

/// Why a reconcile found no outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undecided {
    /// The committed offsets show another transaction's work: another owner has the
    /// partitions, and they go back to the group (never replaced in place: the two owners
    /// would fence each other in turn).
    AnotherOwner(String),
    /// The outcome could not be read (no offsets to read it from, no time, no broker): the
    /// producer is given up for its own failure.
    Unreadable(String),
}

impl std::fmt::Display for Undecided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undecided::AnotherOwner(why) | Undecided::Unreadable(why) => f.write_str(why),
        }
    }
}

impl Undecided {
    /// Whether it says that someone else owns the partitions now.
    pub(crate) fn another_owner(&self) -> bool {
        matches!(self, Undecided::AnotherOwner(_))
    }

    /// Whether its text contains `text` (tests).
    #[cfg(test)]
    pub(crate) fn contains(&self, text: &str) -> bool {
        self.to_string().contains(text)
    }
}

/// Per partition, the offsets a transaction read, `first..next`, with `next` the offset it
/// commits.
pub(crate) type Spans = BTreeMap<(String, i32), (i64, i64)>;

/// Per partition, the committed offset and its mark that stood in the group when the
/// transaction began, as the task knew them (`None`: the group had none); a partition left
/// out was not known.
pub(crate) type Before = BTreeMap<(String, i32), Option<(i64, String)>>;

/// The spans of a transaction over `batch` that commits `offsets`: from the batch's first
/// record of each partition to the offset committed; a partition with no record in the batch
/// (a transaction of timers alone) spans nothing, `next..next`.
pub(crate) fn spans(batch: &[InputRecord], offsets: &TopicPartitionList) -> Spans {
    let mut spans: Spans = offsets
        .elements()
        .iter()
        .filter_map(|e| e.offset().to_raw().map(|next| ((e.topic().to_string(), e.partition()), (next, next))))
        .collect();
    for r in batch {
        if let Some(span) = spans.get_mut(&(r.topic.to_string(), r.partition)) {
            span.0 = span.0.min(r.offset);
        }
    }
    spans
}

/// What the group's committed offsets say about a transaction over `spans` whose offsets
/// carried `mark` (`None`: it sent none), given what stood committed `before` it began:
/// committed if every partition is committed at its span's end with that mark; aborted if
/// every one still has exactly what stood before (the same offset with the same mark: marks
/// name one transaction each, so nothing committed there since), or has no committed offset
/// at all (whoever commits writes one). Anything else — the span's end with another mark,
/// another owner's commit at the very offset this task knew (a new owner commits where it
/// took the partition over, with timers alone too), a moved offset, a partition whose
/// earlier offset is not known, or a mix — was not this transaction's doing alone
/// (transactions are atomic): another owner has moved it, and the outcome is not ours to
/// decide. No spans, no answer: nothing can show the outcome.
pub(crate) fn decide(
    committed: &TopicPartitionList,
    spans: &Spans,
    mark: Option<&str>,
    before: &Before,
) -> Result<Reconciliation, Undecided> {
    let (mut done, mut not_done) = (0, 0);
    for (key, (first, next)) in spans {
        let (topic, partition) = key;
        let elem = committed.find_partition(topic, *partition);
        let at = elem.as_ref().and_then(|e| e.offset().to_raw()).filter(|o| *o >= 0);
        let metadata = elem.as_ref().map(|e| e.metadata());
        let ours = mark.is_some() && metadata == mark;
        let known = before.get(key);
        let unchanged = match known {
            Some(Some((b, m))) => at == Some(*b) && metadata == Some(m.as_str()),
            Some(None) | None => false,
        };
        let another = |why: String| Undecided::AnotherOwner(format!("{topic} [{partition}] {why}"));
        match at {
            Some(o) if o == *next && ours => done += 1,
            None => not_done += 1,
            Some(_) if unchanged => not_done += 1,
            Some(o) if o == *next => return Err(another(format!(
                "is committed at this batch's end {o}, but by another transaction (its mark is not this one's): another owner read the same records"
            ))),
            Some(o) => {
                let stood = match known {
                    Some(Some((b, m))) => format!("{b} marked {m:?} stood there when this transaction began"),
                    Some(None) => "nothing stood committed when this transaction began".into(),
                    None => "what stood committed when this transaction began is not known".into(),
                };
                return Err(another(format!(
                    "is committed at {o} marked {:?} while this batch spans {first}..{next}, and {stood}: another owner committed it",
                    metadata.unwrap_or_default()
                )));
            }
        }
    }
    match (done, not_done) {
        (0, 0) => Err(Undecided::Unreadable("no partition to read the outcome from".into())),
        (_, 0) => Ok(Reconciliation::Committed),
        (0, _) => Ok(Reconciliation::Aborted),
        _ => Err(Undecided::AnotherOwner(format!(
            "{done} of the batch's partitions are committed past it, {not_done} not: not this transaction's doing"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::next_offsets;
    use crate::txn::tests::rec;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
    use rdkafka::Offset;

    const MARK: &str = "kafka-eos/00000000000000aa/3";
    /// The mark of the transaction whose offset stood before this one began.
    const EARLIER: &str = "kafka-eos/00000000000000cc/9";
    /// Another owner's mark.
    const OTHER: &str = "kafka-eos/00000000000000bb/1";

    /// Committed offsets of `at`, each carrying its mark (`None`: no metadata).
    fn committed(at: &[(&str, i32, Option<i64>, Option<&str>)]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (t, p, o, m) in at {
            let _ = tpl.add_partition_offset(t, *p, o.map_or(Offset::Invalid, Offset::Offset));
            if let (Some(m), Some(mut e)) = (m, tpl.find_partition(t, *p)) {
                e.set_metadata(*m);
            }
        }
        tpl
    }

    /// What stood before: per partition of topic `a`, an offset marked [`EARLIER`], or none.
    fn stood(at: &[(i32, Option<i64>)]) -> Before {
        at.iter().map(|(p, o)| (("a".to_string(), *p), o.map(|o| (o, EARLIER.to_string())))).collect()
    }

    #[test]
    fn the_committed_offsets_tell_committed_from_aborted_and_refuse_anything_else() {
        let batch = [rec("a", 0, 10), rec("a", 0, 11), rec("a", 1, 5)];
        let batch = spans(&batch, &next_offsets(&batch));
        let before = stood(&[(0, Some(10)), (1, Some(5))]);
        let decide = |at: &[(i32, Option<i64>, &str)]| {
            let at: Vec<_> = at.iter().map(|(p, o, m)| ("a", *p, *o, Some(*m))).collect();
            decide(&committed(&at), &batch, Some(MARK), &before)
        };
        assert_eq!(decide(&[(0, Some(12), MARK), (1, Some(6), MARK)]), Ok(Reconciliation::Committed));
        assert_eq!(decide(&[(0, Some(10), EARLIER), (1, Some(5), EARLIER)]), Ok(Reconciliation::Aborted));
        assert_eq!(decide(&[(0, None, ""), (1, None, "")]), Ok(Reconciliation::Aborted), "nothing committed");
        // Below what stood, or at it with another mark: someone else committed there.
        assert!(decide(&[(0, Some(8), EARLIER), (1, Some(5), EARLIER)]).unwrap_err().another_owner());
        assert!(decide(&[(0, Some(10), OTHER), (1, Some(5), EARLIER)]).unwrap_err().contains("another owner"));
        assert!(decide(&[(0, Some(15), MARK), (1, Some(6), MARK)]).unwrap_err().contains("another owner"));
        assert!(decide(&[(0, Some(11), MARK), (1, Some(5), EARLIER)]).unwrap_err().contains("another owner"));
        assert!(decide(&[(0, Some(12), MARK), (1, Some(5), EARLIER)]).unwrap_err().contains("not this transaction"));
        // The batch's end, committed by another transaction (a next owner that read the same
        // records), or by a cycle that sent no offsets: not ours.
        let at_end = committed(&[("a", 0, Some(12), Some(MARK)), ("a", 1, Some(6), Some(MARK))]);
        let other = super::decide(&at_end, &batch, Some(OTHER), &before);
        assert!(other.unwrap_err().contains("another transaction"));
        assert!(super::decide(&at_end, &batch, None, &before).unwrap_err().contains("another transaction"));
        // Aborted needs no mark of this transaction's: nothing of it is there.
        let unchanged = committed(&[("a", 0, Some(10), Some(EARLIER)), ("a", 1, Some(5), Some(EARLIER))]);
        assert_eq!(super::decide(&unchanged, &batch, None, &before), Ok(Reconciliation::Aborted));
        // What stood before not known: an offset there could be anyone's.
        assert!(super::decide(&unchanged, &batch, Some(MARK), &Before::new()).unwrap_err().another_owner());
    }

    /// A transaction of timers alone commits where its partitions stand: its own mark there
    /// says committed, the mark that stood there before says aborted, another mark is
    /// another owner's commit. With no offsets at all there is nothing to read, never
    /// "committed".
    #[test]
    fn a_transaction_of_timers_alone_is_decided_by_its_mark() {
        let mut standing = TopicPartitionList::new();
        let _ = standing.add_partition_offset("a", 0, Offset::Offset(12));
        let timers_alone = spans(&[], &standing);
        assert_eq!(timers_alone.get(&("a".to_string(), 0)), Some(&(12, 12)));
        let before = stood(&[(0, Some(12))]);
        let at = |o: Option<i64>, m: &str| committed(&[("a", 0, o, Some(m))]);
        assert_eq!(decide(&at(Some(12), MARK), &timers_alone, Some(MARK), &before), Ok(Reconciliation::Committed));
        assert_eq!(decide(&at(Some(12), EARLIER), &timers_alone, Some(MARK), &before), Ok(Reconciliation::Aborted));
        assert!(decide(&at(Some(12), OTHER), &timers_alone, Some(MARK), &before).unwrap_err().another_owner());
        assert_eq!(decide(&at(None, ""), &timers_alone, Some(MARK), &before), Ok(Reconciliation::Aborted));
        assert!(decide(&at(Some(13), MARK), &timers_alone, Some(MARK), &before).unwrap_err().contains("another owner"));
        let nothing = spans(&[], &TopicPartitionList::new());
        assert!(nothing.is_empty());
        let at = at(Some(12), MARK);
        assert!(matches!(decide(&at, &nothing, Some(MARK), &before), Err(Undecided::Unreadable(_))));
        assert!(matches!(
            decide(&TopicPartitionList::new(), &nothing, None, &Before::new()),
            Err(Undecided::Unreadable(_))
        ));
    }

    /// A new owner's commit at the very offset this transaction starts from (a transaction
    /// of timers alone that restored the pending timer and fired it, or one that committed
    /// where it took the partition over): the offset is the one this task knew, its mark is
    /// not, so the commit is another owner's and the outcome is not this task's to decide.
    #[test]
    fn another_owners_commit_at_the_batchs_start_is_not_read_as_aborted() {
        let at = |m: &str| committed(&[("a", 0, Some(12), Some(m))]);
        let known = stood(&[(0, Some(12))]);
        let mut standing = TopicPartitionList::new();
        let _ = standing.add_partition_offset("a", 0, Offset::Offset(12));
        let timers_alone = spans(&[], &standing);
        let records = [rec("a", 0, 12), rec("a", 0, 13)];
        let records = spans(&records, &next_offsets(&records));
        for s in [&timers_alone, &records] {
            assert_eq!(decide(&at(EARLIER), s, Some(MARK), &known), Ok(Reconciliation::Aborted));
            assert!(decide(&at(OTHER), s, Some(MARK), &known).unwrap_err().another_owner(), "{s:?}");
        }
    }

    /// Over every committed offset (none, 0..=7) and mark (ours, the one that stood before,
    /// another, none) of two partitions, each of which had its span's start committed before,
    /// and every span of each within 0..=6 (empty ones included): "committed" only if every
    /// partition carries this transaction's mark at its span's end, "aborted" only if none
    /// does and every one has what stood before, or nothing.
    #[test]
    fn decide_never_takes_a_transaction_for_committed_without_its_mark_everywhere() {
        let marks = [Some(MARK), Some(EARLIER), Some(OTHER), None];
        let offsets: Vec<Option<i64>> = std::iter::once(None).chain((0..=7).map(Some)).collect();
        let spans_of = |a: (i64, i64), b: (i64, i64)| -> Spans {
            [(("a".to_string(), 0), a), (("a".to_string(), 1), b)].into_iter().collect()
        };
        let ranges: Vec<(i64, i64)> = (0..=6).flat_map(|f| (f..=6).map(move |n| (f, n))).collect();
        for &ra in &ranges {
            for &rb in &ranges {
                let s = spans_of(ra, rb);
                let before = stood(&[(0, Some(ra.0)), (1, Some(rb.0))]);
                for &oa in &offsets {
                    for &ob in &offsets {
                        for &ma in &marks {
                            for &mb in &marks {
                                let tpl = committed(&[("a", 0, oa, ma), ("a", 1, ob, mb)]);
                                let ours = |o: Option<i64>, m: Option<&str>, (_, next): (i64, i64)| {
                                    o == Some(next) && m == Some(MARK)
                                };
                                let aborted = |o: Option<i64>, m: Option<&str>, (first, next): (i64, i64)| {
                                    !ours(o, m, (first, next))
                                        && (o.is_none() || o == Some(first) && m == Some(EARLIER))
                                };
                                let got = decide(&tpl, &s, Some(MARK), &before);
                                let what = format!("{ra:?}/{rb:?} at {oa:?}/{ob:?} marked {ma:?}/{mb:?}: {got:?}");
                                match got {
                                    Ok(Reconciliation::Committed) => {
                                        assert!(ours(oa, ma, ra) && ours(ob, mb, rb), "{what}")
                                    }
                                    Ok(Reconciliation::Aborted) => {
                                        assert!(aborted(oa, ma, ra) && aborted(ob, mb, rb), "{what}")
                                    }
                                    Err(e) => assert!(
                                        e.another_owner()
                                            && !(ours(oa, ma, ra) && ours(ob, mb, rb)
                                                || aborted(oa, ma, ra) && aborted(ob, mb, rb)),
                                        "{what}"
                                    ),
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// A partition an exactly-once sink resumed below the group's committed offset: the
    /// group's offset past the span, unchanged since (same offset, same mark), says the
    /// transaction did not commit; moved, or marked by another transaction, it is another
    /// owner's work; at the span's end with this transaction's mark, committed.
    #[test]
    fn the_groups_offset_unchanged_since_a_resume_below_it_says_aborted() {
        let batch = [rec("a", 0, 100), rec("a", 0, 149)];
        let batch = spans(&batch, &next_offsets(&batch));
        let before = stood(&[(0, Some(300))]);
        let at = |o: i64, m: &str| committed(&[("a", 0, Some(o), Some(m))]);
        assert_eq!(decide(&at(300, EARLIER), &batch, Some(MARK), &before), Ok(Reconciliation::Aborted));
        assert_eq!(decide(&at(150, MARK), &batch, Some(MARK), &before), Ok(Reconciliation::Committed));
        assert!(decide(&at(300, EARLIER), &batch, Some(MARK), &Before::new()).unwrap_err().another_owner());
        assert!(decide(&at(301, EARLIER), &batch, Some(MARK), &before).unwrap_err().another_owner());
        assert!(decide(&at(300, OTHER), &batch, Some(MARK), &before).unwrap_err().another_owner());
        assert!(decide(&at(300, ""), &batch, Some(MARK), &before).unwrap_err().another_owner());
    }

    /// Over every span of one partition within 0..=6 (empty ones included), every committed
    /// offset (none, 0..=7) and mark (ours, the earlier one, another, none) and every thing
    /// known to stand before (not known, nothing, or 0..=7 with the earlier mark):
    /// "committed" only at the span's end with this transaction's mark; "aborted" only
    /// without it, with nothing committed or exactly what stood before; anything else
    /// another owner's.
    #[test]
    fn decide_is_aborted_only_where_nothing_moved_since_the_transaction_began() {
        let marks = [Some(MARK), Some(EARLIER), Some(OTHER), None];
        let offsets: Vec<Option<i64>> = std::iter::once(None).chain((0..=7).map(Some)).collect();
        let knowns: Vec<Option<Option<i64>>> =
            [None, Some(None)].into_iter().chain((0..=7).map(|b| Some(Some(b)))).collect();
        for first in 0..=6 {
            for next in first..=6 {
                let s: Spans = [(("a".to_string(), 0), (first, next))].into_iter().collect();
                for &known in &knowns {
                    let before = match known {
                        Some(b) => stood(&[(0, b)]),
                        None => Before::new(),
                    };
                    for &o in &offsets {
                        for &m in &marks {
                            let tpl = committed(&[("a", 0, o, m)]);
                            let ours = o == Some(next) && m == Some(MARK);
                            let unchanged = known.flatten().is_some_and(|b| o == Some(b) && m == Some(EARLIER));
                            let aborted = !ours && (o.is_none() || unchanged);
                            let got = decide(&tpl, &s, Some(MARK), &before);
                            let what = format!("{first}..{next} at {o:?} marked {m:?}, before {known:?}: {got:?}");
                            match got {
                                Ok(Reconciliation::Committed) => assert!(ours, "{what}"),
                                Ok(Reconciliation::Aborted) => assert!(aborted, "{what}"),
                                Err(e) => assert!(e.another_owner() && !ours && !aborted, "{what}"),
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_unknown_outcome_is_reconciled_and_only_fencing_gives_up() {
        let e = |step, err| StepError::new(step, err);
        let timeout = || KafkaError::Flush(C::OperationTimedOut);
        let v = |err: StepError| verdict(&err, true);
        assert_eq!(v(e(Step::Commit, timeout())), Verdict::Reconcile, "a commit without an answer");
        assert_eq!(v(e(Step::Commit, KafkaError::Canceled)), Verdict::Reconcile, "any commit failure");
        assert_eq!(v(e(Step::Abort, KafkaError::Canceled)), Verdict::Reconcile, "a refused abort");
        assert_eq!(v(e(Step::SendOffsets, timeout())), Verdict::Reconcile, "offsets without an answer");
        assert_eq!(v(e(Step::Produce, KafkaError::MessageProduction(C::Fatal))), Verdict::Reconcile, "fatal");
        assert_eq!(v(e(Step::Commit, KafkaError::MessageProduction(C::ProducerFenced))), Verdict::GiveUp);
        assert_eq!(v(e(Step::AwaitAcks, KafkaError::MessageProduction(C::MessageSizeTooLarge))), Verdict::Replay);
        assert_eq!(v(e(Step::AwaitAcks, timeout())), Verdict::Replay, "no commit step was reached");
        assert_eq!(v(e(Step::SendOffsets, KafkaError::Canceled)), Verdict::Replay, "a definite refusal");
        // At-least-once has no transaction to reconcile: a fatal producer is given up.
        assert_eq!(verdict(&e(Step::Produce, KafkaError::MessageProduction(C::Fatal)), false), Verdict::GiveUp);
    }
}
