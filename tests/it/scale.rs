//! Scaling out under incremental rebalancing (issue 11): partitions that stay with their
//! instance keep committing while others move.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::{Guarantee, Rebalancing};
use kafka_eos_cli::scale::{join_third, JoinOptions};

use crate::common::bootstrap;

/// The input partitions an instance committed transactions for.
type Seen = Arc<Mutex<BTreeSet<i32>>>;

/// A transaction hook that adds every committed transaction's partitions to `seen`.
fn record_committed(seen: &Seen) -> impl Fn(&TransactionEvent) + Send + Sync + 'static {
    let seen = seen.clone();
    move |e: &TransactionEvent| {
        if e.outcome == Outcome::Committed {
            seen.lock().unwrap().extend(e.partitions.iter().map(|(_, p)| *p));
        }
    }
}

/// Two instances share 16 partitions while input flows; a third joins
/// ([`join_third`]). Under each incremental protocol, every partition that stays with its
/// instance keeps committing throughout: its longest gap between commits stays under twice
/// the commit interval plus 1 s (the target), while some partitions do move; in
/// per-partition mode no transaction aborts. The copy ends exactly once. (Eager pauses
/// every partition for the whole rebalance: `benches/rebalance.rs` measures it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long (about two minutes, four protocol and guarantee pairs): `.ci/long tests` runs it"]
async fn a_joining_instance_leaves_unmoved_partitions_committing() {
    for (rebalancing, guarantee) in [
        (Rebalancing::Cooperative, Guarantee::ExactlyOncePerPartition),
        (Rebalancing::Consumer, Guarantee::ExactlyOncePerPartition),
        (Rebalancing::Cooperative, Guarantee::ExactlyOncePerConsumer),
        (Rebalancing::Cooperative, Guarantee::AtLeastOnce),
    ] {
        let what = format!("{} / {}", rebalancing.as_str(), guarantee.as_str());
        let opts = JoinOptions::new(&bootstrap(), guarantee, rebalancing);
        let r = join_third(&opts).await.unwrap_or_else(|e| panic!("{what}: {e}"));
        eprintln!("{what}: {r:?}");
        assert!(r.unmoved > 0 && r.moved > 0, "{what}: {} unmoved, {} moved", r.unmoved, r.moved);
        let limit = opts.commit_interval * 2 + Duration::from_secs(1);
        assert!(
            r.longest_unmoved_gap < limit,
            "{what}: an unmoved partition stopped committing for {:?} (limit {limit:?})",
            r.longest_unmoved_gap
        );
        if guarantee == Guarantee::ExactlyOncePerPartition {
            // Per-partition offsets carry the group id alone (fenced by the transactional.id):
            // no generation change refuses them, so nothing aborts. Per-consumer offsets carry
            // the generation, and a transaction racing its change is refused and replayed.
            let aborted: u64 = r.summaries.iter().map(|s| s.transactions_aborted).sum();
            assert_eq!(aborted, 0, "{what}: {:?}", r.summaries);
        }
        if guarantee == Guarantee::AtLeastOnce {
            assert!(r.verified.is_at_least_once(), "{what}: {:?}", r.verified);
            continue;
        }
        assert!(r.verified.is_exactly_once(), "{what}: {:?} {:?}", r.verified, r.duplicated);
        assert_eq!(r.verified.output_records, r.produced, "{what}");
        assert_eq!(r.summaries.iter().map(|s| s.records_in).sum::<u64>(), r.produced, "{what}");
    }
}

/// Static membership (issue 11, item 6): an instance stopped and restarted within the
/// session timeout under the same instance id gets its own partitions back with no
/// rebalance — the other instance's assignment is never touched (without static
/// membership it would take over the stopped instance's partitions, then give them back:
/// two more assignments). The copy ends exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_restarted_in_time_gets_its_partitions_back_without_a_rebalance() {
    use crate::common::{spawn, topics, unique};

    let t = topics("static", 4, 0, 100).await;
    let app = unique("static");
    let member = |id: &str, seen: &Seen| {
        spawn(
            t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
                .instance_id(id)
                .static_membership(true)
                .consumer_property("session.timeout.ms", "30000")
                .on_transaction(record_committed(seen)),
        )
    };
    let (seen_a, seen_b, seen_a2): (Seen, Seen, Seen) = Default::default();
    let a = member("pod-a", &seen_a);
    let b = member("pod-b", &seen_b);
    // Until both commit (whichever joined first may have held all 4 for a while), then a
    // little longer so that the split has settled.
    let both = || !seen_a.lock().unwrap().is_empty() && !seen_b.lock().unwrap().is_empty();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !both() {
        assert!(std::time::Instant::now() < deadline, "A and B never both committed");
        t.produce(400).await;
    }
    t.produce(400).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    seen_a.lock().unwrap().clear();
    t.produce(400).await;
    t.wait_caught_up(&app, Duration::from_secs(60)).await;
    let b_assignments = b.handle.summary().rebalances;
    let sa = a.stop().await;
    // Longer than B needs to notice a departure (a heartbeat, 3 s), shorter than the
    // session timeout: a member that left would have its partitions moved to B by now.
    t.produce(2_000).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let a2 = member("pod-a", &seen_a2);
    a2.wait_records_in(1, Duration::from_secs(20)).await;
    t.produce(2_000).await;
    t.wait_caught_up(&app, Duration::from_secs(60)).await;
    let (sa2, sb) = (a2.stop().await, b.stop().await);
    assert_eq!(*seen_a2.lock().unwrap(), *seen_a.lock().unwrap(), "A came back to its own partitions");
    assert_eq!(sb.rebalances, b_assignments, "B's assignment never changed: {sb:?}");
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(sa.records_in + sa2.records_in + sb.records_in, report.input_records, "{sa:?} {sa2:?} {sb:?}");
}

/// `max_concurrent_transactions(1)`: four per-partition tasks take turns — no two
/// transaction cycles overlap in time — and the copy is exactly once. With the default bound
/// (32 slots, not engaged by 4 tasks) the same copy does overlap its cycles (the control:
/// the check can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_bound_lets_one_partition_commit_at_a_time() {
    use std::time::Instant;

    use crate::common::{spawn, topics, unique};

    for bound in [Some(1), None] {
        let t = topics("txn-slots", 4, 4_000, 100).await;
        let app = unique("txn-slots");
        let cycles: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
        let seen = cycles.clone();
        let mut builder = t
            .pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .commit_interval(Duration::from_millis(20))
            .max_records_per_transaction(50)
            .on_transaction(move |e: &TransactionEvent| {
                // Reported while the cycle still holds its slot: [end - total, end] is the cycle.
                let end = Instant::now();
                if e.outcome == Outcome::Committed {
                    seen.lock().unwrap().push((end - e.total, end));
                }
            });
        if let Some(n) = bound {
            builder = builder.max_concurrent_transactions(n);
        }
        let running = spawn(builder);
        t.wait_caught_up(&app, Duration::from_secs(120)).await;
        running.stop().await;
        let report = t.verify().await;
        assert!(report.is_exactly_once(), "{bound:?}: {report:?}");
        let mut cycles = cycles.lock().unwrap().clone();
        cycles.sort();
        let overlaps = cycles.windows(2).filter(|w| w[1].0 < w[0].1).count();
        eprintln!("bound {bound:?}: {} committed cycles, {overlaps} overlapping their predecessor", cycles.len());
        assert!(cycles.len() >= 40, "{bound:?}: {} cycles", cycles.len());
        match bound {
            Some(_) => assert_eq!(overlaps, 0, "one slot: cycles must take turns"),
            None => assert!(overlaps > 0, "the control: below the default bound, tasks commit concurrently"),
        }
    }
}

/// Past the transaction slot bound a revocation hands back the batches that have begun no
/// transaction, instead of committing them one slot at a time while the rebalance waits
/// (issue 11: one instance's revocation of 512 partitions took 56 s at 1,024). Instance A
/// runs 4 partitions with one slot (engaged) and a backlog, kept up until B commits, so its
/// tasks are mostly waiting for the slot with a collected batch; B joins and takes two. A
/// hands batches back, B reads them again from the committed offsets, and the copy ends
/// exactly once with every record counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_slot_bound_a_revocation_hands_uncommitted_batches_back() {
    use std::time::Instant;

    use crate::common::{spawn, topics, unique};

    let t = topics("hand-back", 4, 8_000, 100).await;
    let app = unique("hand-back");
    // 2 ms per record: A cannot drain its backlog before B's join revokes its partitions,
    // however loaded the machine (a run beside another test's brokers had, and handed
    // nothing back).
    let out = kafka_eos::Topic::new(&t.output);
    let member = |id: &str| {
        let out = out.clone();
        spawn(
            t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
                .instance_id(id)
                .max_concurrent_transactions(1)
                .commit_interval(Duration::from_millis(300))
                .max_records_per_transaction(100)
                .processor(move |ctx, r| {
                    std::thread::sleep(Duration::from_millis(2));
                    crate::common::emit_reversed(ctx, &out, r)
                }),
        )
    };
    let a = member("a");
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.handle.summary().transactions_committed < 4 {
        assert!(Instant::now() < deadline, "A committed too little: {:?}", a.handle.summary());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = member("b");
    // Input keeps coming until B commits, so that A's tasks still have batches waiting for
    // the slot whenever the revocation comes (B's start can outlast the first backlog on a
    // loaded machine: in one CI run A had drained it, and handed nothing back).
    let deadline = Instant::now() + Duration::from_secs(90);
    while b.handle.summary().records_in == 0 {
        assert!(Instant::now() < deadline, "B never committed: {:?}", b.handle.summary());
        t.produce(100).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    t.wait_caught_up(&app, Duration::from_secs(120)).await;
    let (sa, sb) = (a.stop().await, b.stop().await);
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(sa.records_in + sb.records_in, report.input_records, "{sa:?} {sb:?}");
    assert!(sa.records_handed_back > 0, "A's revoked tasks handed their batches back: {sa:?}");
    eprintln!(
        "handed back by A: {} records; A committed {}, B {}",
        sa.records_handed_back, sa.records_in, sb.records_in
    );
}

/// `max_partition_tasks(2)` (issue 11: degrade gracefully): one instance assigned all four
/// partitions runs two tasks and leaves the other two unserved — listed in `/health` with
/// the reason, nothing committed for them — while the two it serves keep committing. A
/// second instance (bound 2 too) takes two partitions; the first then serves the rest, and
/// the copy ends exactly once with nothing left unserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_bound_leaves_the_partitions_past_it_unserved_until_room_frees() {
    use std::time::Instant;

    use crate::common::{spawn, topics, unique};

    let t = topics("task-bound", 4, 2_000, 100).await;
    let app = unique("task-bound");
    let member = |id: &str, seen: &Seen| {
        spawn(
            t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
                .instance_id(id)
                .max_partition_tasks(2)
                .on_transaction(record_committed(seen)),
        )
    };
    let (seen_a, seen_b): (Seen, Seen) = Default::default();
    let a = member("a", &seen_a);
    let deadline = Instant::now() + Duration::from_secs(60);
    let unserved =
        |h: &kafka_eos::health::HealthReport| -> BTreeSet<i32> { h.unserved.iter().map(|u| u.partition).collect() };
    while seen_a.lock().unwrap().len() < 2 || unserved(&a.handle.health()).len() < 2 {
        assert!(Instant::now() < deadline, "A never served two partitions: {:?}", a.handle.health());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Input keeps coming for every partition; only the served two commit it.
    t.produce(2_000).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let health = a.handle.health();
    let (served, held) = (seen_a.lock().unwrap().clone(), unserved(&health));
    assert_eq!(served.len(), 2, "A committed for exactly its two tasks: {served:?}");
    assert_eq!(held.len(), 2, "{health:?}");
    assert!(served.is_disjoint(&held), "served {served:?}, unserved {held:?}");
    assert!(
        health.unserved.iter().all(|u| u.reason.contains("waiting for room") && u.unserved_ms >= 3_000),
        "{health:?}"
    );
    assert!(health.healthy, "unserved partitions leave the report healthy: {health:?}");
    let b = member("b", &seen_b);
    t.wait_caught_up(&app, Duration::from_secs(90)).await;
    let (ha, hb) = (a.handle.health(), b.handle.health());
    assert!(ha.unserved.is_empty() && hb.unserved.is_empty(), "{ha:?} {hb:?}");
    let (sa, sb) = (a.stop().await, b.stop().await);
    let all: BTreeSet<i32> = seen_a.lock().unwrap().union(&seen_b.lock().unwrap()).copied().collect();
    assert_eq!(all, (0..4).collect(), "every partition committed in the end");
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(sa.records_in + sb.records_in, report.input_records, "{sa:?} {sb:?}");
}
