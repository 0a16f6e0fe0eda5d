//! Fence-and-reconcile on a real broker (issue 10, item 1): a commit ends committed, or
//! never commits, while the task is told its outcome is unknown — as when a commit times out
//! with the broker hosting the transaction coordinator gone. The test-only fault injection
//! `inject_unknown_outcome` makes that deterministic.
//!
//! The task must then fence its producer with a fresh one of the same transactional.id, read
//! the outcome from the stable committed offsets, and go on *without a rebalance*: count the
//! batch if it committed, replay it if it did not. The verifier checks exactly-once; the
//! summary and the transaction hook check that it was a reconcile, not a producer given up
//! (which also keeps exactly-once, at the price of a rebalance: that was the behaviour
//! before, and these tests fail on it).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_eos::config::UnknownOutcome;
use kafka_eos::observe::{Outcome, Reconciliation};
use kafka_eos::Guarantee;

use crate::common::{spawn, topics, unique};

const PARTITIONS: i32 = 2;
const RECORDS: u64 = 3_000;
/// Records per transaction; the input is all there from the start, so batches are full.
const BATCH: usize = 200;
/// The commit made unknown: the pipeline's third (counted across its producers).
const NTH_COMMIT: u64 = 3;

/// Runs the pipeline over the whole input with the fault injected into one commit, checks
/// exactly-once, and checks that the hook saw one reconcile finding `expected` and nothing
/// given up.
async fn run_with(fault: UnknownOutcome, guarantee: Guarantee, expected: Reconciliation) {
    let mode = guarantee.as_str();
    let t = topics("unknown", PARTITIONS, RECORDS, 100).await;
    let app = unique("unknown");
    let seen: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let hook = seen.clone();
    let run = spawn(
        t.pipeline(&app, guarantee)
            .max_records_per_transaction(BATCH)
            .inject_unknown_outcome(NTH_COMMIT, fault)
            .on_transaction(move |e| {
                if !matches!(e.outcome, Outcome::Committed) {
                    hook.lock().unwrap().push(e.outcome.clone());
                }
            }),
    );
    t.wait_caught_up(&app, Duration::from_secs(90)).await;
    let summary = run.stop().await;
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{mode}: {report:?} ({summary:?})");
    assert_eq!(report.output_records, RECORDS, "{mode}");

    let seen = seen.lock().unwrap().clone();
    let found: Vec<Reconciliation> = seen
        .iter()
        .filter_map(|o| match o {
            Outcome::Reconciled { found, .. } => Some(*found),
            _ => None,
        })
        .collect();
    assert_eq!(found, vec![expected], "{mode}: one reconcile, finding the real outcome; every other outcome: {seen:?}");
    assert!(!seen.iter().any(|o| matches!(o, Outcome::GaveUp { .. })), "{mode}: no producer given up: {seen:?}");
    assert_eq!(summary.producers_fenced, 0, "{mode}: {summary:?}");
    assert_eq!(summary.rebalances, 1, "{mode}: no rebalance after the first assignment: {summary:?}");
    assert_eq!(summary.records_in, RECORDS, "{mode}: the reconciled batch is counted exactly once: {summary:?}");
    if expected == Reconciliation::Aborted {
        let uncommitted = t.count_output_uncommitted().await;
        assert!(uncommitted > RECORDS, "{mode}: the aborted attempt's outputs are in the log ({uncommitted} records)");
    }
}

/// The commit is made and succeeds, but the task is told it timed out: the reconcile must
/// find it committed and must not replay it (a replay would duplicate the batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_committed_while_its_outcome_was_unknown_is_counted_not_replayed() {
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        run_with(UnknownOutcome::CommittedButTimedOut, guarantee, Reconciliation::Committed).await;
    }
}

/// The commit is made, then librdkafka's call does not return (librdkafka#5456, which the
/// chaos suite's coordinator-kill scenario hit in `send_offsets_to_transaction`): the
/// call's watchdog abandons it after the call timeout plus the grace (10 + 5 s here), and
/// the task reconciles with a fresh producer instead of holding its partition for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_call_that_never_returns_is_abandoned_and_reconciled() {
    run_with(UnknownOutcome::CommittedThenHung, Guarantee::ExactlyOncePerPartition, Reconciliation::Committed).await;
}

/// The offsets are in the transaction but the commit is never made, and the task is told it
/// timed out: the fresh producer's `init_transactions` aborts the open transaction, and the
/// reconcile must find it aborted and replay the batch (dropping it would lose it). The
/// aborted attempt's outputs stay in the log, invisible to read_committed readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_never_committed_while_its_outcome_was_unknown_is_replayed() {
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        run_with(UnknownOutcome::TimedOutBeforeCommit, guarantee, Reconciliation::Aborted).await;
    }
}

/// Issue 11, item 3 (failures stay local): the reconcile fails too, so the producer is given
/// up — for a failure of its own, not because someone took over. It is replaced in place:
/// a fresh producer of the same transactional.id (whose `init_transactions` completes or
/// aborts the lost commit), the partitions rewound to their committed offsets, no rebalance.
/// Whichever way the lost commit went, the copy ends exactly once: a committed batch is not
/// redone (and, unknown to the task, not counted), an uncommitted one is redone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_given_up_for_its_own_failure_is_replaced_without_a_rebalance() {
    for (fault, guarantee) in [
        (UnknownOutcome::CommittedButTimedOut, Guarantee::ExactlyOncePerPartition),
        (UnknownOutcome::TimedOutBeforeCommit, Guarantee::ExactlyOncePerPartition),
        (UnknownOutcome::CommittedButTimedOut, Guarantee::ExactlyOncePerConsumer),
    ] {
        let what = format!("{fault:?} / {}", guarantee.as_str());
        let t = topics("inplace", PARTITIONS, RECORDS, 100).await;
        let app = unique("inplace");
        let gave_up = Arc::new(Mutex::new(0));
        let hook = gave_up.clone();
        let run = spawn(
            t.pipeline(&app, guarantee)
                .max_records_per_transaction(BATCH)
                .inject_unreconciled_outcome(NTH_COMMIT, fault)
                .on_transaction(move |e| {
                    if matches!(e.outcome, Outcome::GaveUp { .. }) {
                        *hook.lock().unwrap() += 1;
                    }
                }),
        );
        t.wait_caught_up(&app, Duration::from_secs(90)).await;
        let summary = run.stop().await;
        let report = t.verify().await;
        assert!(report.is_exactly_once(), "{what}: {report:?} ({summary:?})");
        assert_eq!(report.output_records, RECORDS, "{what}");
        assert_eq!(*gave_up.lock().unwrap(), 1, "{what}: one producer given up");
        assert_eq!(summary.producers_fenced, 1, "{what}: {summary:?}");
        assert_eq!(summary.rebalances, 1, "{what}: replaced in place, no rebalance: {summary:?}");
        let uncounted = if fault == UnknownOutcome::CommittedButTimedOut { BATCH as u64 } else { 0 };
        assert_eq!(summary.records_in, RECORDS - uncounted, "{what}: {summary:?}");
    }
}
