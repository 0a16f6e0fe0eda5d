//! Rebalances and restarts during a run.

use std::time::{Duration, Instant};

use kafka_eos::Guarantee;

use crate::common::{spawn, topics, unique, Stuck};

/// A second instance joins and later leaves while input keeps arriving: 0 duplicates,
/// 0 missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_joining_and_leaving_mid_run_keeps_exactly_once() {
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let t = topics("rebal", 4, 0, 100).await;
        let app = unique("rebal");
        let mut produced = 0;
        let a = spawn(t.pipeline(&app, guarantee));
        t.produce(10_000).await;
        produced += 10_000;
        a.wait_records_in(5_000, Duration::from_secs(60)).await;
        let b = spawn(t.pipeline(&app, guarantee));
        // Keep input flowing until B has joined and committed some of it.
        let deadline = Instant::now() + Duration::from_secs(60);
        while b.handle.summary().records_in == 0 {
            assert!(Instant::now() < deadline, "B never committed anything");
            t.produce(1_000).await;
            produced += 1_000;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        t.produce(10_000).await;
        produced += 10_000;
        let sb = b.stop().await;
        t.produce(10_000).await;
        produced += 10_000;
        t.wait_caught_up(&app, Duration::from_secs(90)).await;
        let sa = a.stop().await;
        let report = t.verify().await;
        assert!(report.is_exactly_once(), "{}: {report:?}", guarantee.as_str());
        assert_eq!(report.output_records, produced);
        assert_eq!(sa.records_in + sb.records_in, produced, "{sa:?} {sb:?}");
        // Cooperative (the default): A's assignments are its first one and the partitions it
        // gets back when B leaves; B's join only revokes some of A's.
        assert!(sa.rebalances >= 2, "A saw B join and leave: {sa:?}");
    }
}

/// Stop the pipeline mid-run and start it again: it resumes from the committed offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_from_committed_offsets() {
    let t = topics("restart", 4, 0, 100).await;
    let app = unique("restart");
    let first = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition));
    t.produce(20_000).await;
    first.wait_records_in(1_000, Duration::from_secs(60)).await;
    let s1 = first.stop().await;
    t.produce(20_000).await;
    let second = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition));
    t.wait_caught_up(&app, Duration::from_secs(90)).await;
    let s2 = second.stop().await;
    assert_eq!(s1.records_in + s2.records_in, 40_000, "nothing reprocessed, nothing skipped: {s1:?} {s2:?}");
    assert!(s1.records_in < 40_000);
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
}

/// A graceful shutdown with a processor stuck mid-transaction still returns within the
/// shutdown timeout; the abandoned transaction never becomes visible and a restart
/// completes the input exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_is_bounded_and_a_restart_loses_nothing() {
    const RECORDS: u64 = 4_000;
    let t = topics("shutdown", 2, RECORDS, 100).await;
    let app = unique("shutdown");
    let stuck = Stuck::default();
    let run = spawn(
        t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .shutdown_timeout(Duration::from_secs(2))
            .max_records_per_transaction(500)
            .processor(stuck.processor(&t.output, 0, 1_000)),
    );
    stuck.wait_reached(Duration::from_secs(60)).await;
    let asked = Instant::now();
    run.handle.shutdown();
    let first = run.finish().await.expect("a bounded shutdown is not an error");
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(15), "shutdown took {took:?} with a 2 s shutdown timeout");

    let second = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition));
    t.wait_caught_up(&app, Duration::from_secs(90)).await;
    let second = second.stop().await;
    stuck.release();
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(first.records_in + second.records_in, RECORDS, "{first:?} {second:?}");
    println!("shutdown with a stuck processor returned in {took:?}");
}
