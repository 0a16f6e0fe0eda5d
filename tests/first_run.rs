//! The first run on a new cluster, in a test binary of its own: it compares two runs'
//! durations, which other tests running beside it (the integration binary runs two at a time,
//! several with brokers and instances of their own) would skew. `cargo test` runs test
//! binaries one after another, so this one has the machine to itself.

use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "it/common.rs"]
mod common;

use common::{spawn, topics_on, unique};

/// The first pipeline on a new cluster (the harness's settings: 10 partitions per internal
/// topic, no initial rebalance delay) runs as the second does, apart from the broker creating
/// `__consumer_offsets` and `__transaction_state`: no stall, no transaction aborted or
/// fenced. The quickstart's shape: 100,000 records, 4 partitions, exactly-once per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_run_on_a_new_cluster_takes_no_longer_than_the_second() {
    use kafka_eos::Guarantee;
    use kafka_eos_testkit::broker::{ClusterConfig, LocalCluster, BOOTSTRAP_ENV};

    const RECORDS: u64 = 100_000;
    /// What creating the two internal topics may add on a loaded machine: well below a
    /// broker stall, which holds the first run for several times this (docs/operations.md).
    const SLACK: Duration = Duration::from_secs(5);
    assert!(
        std::env::var(BOOTSTRAP_ENV).map_or(true, |b| b.trim().is_empty()),
        "this test starts its own broker; unset {BOOTSTRAP_ENV} or skip it with `cargo test -- --skip first_run`"
    );
    let cfg = ClusterConfig { ready_timeout: Duration::from_secs(120), ..Default::default() };
    let cluster = tokio::task::spawn_blocking(move || LocalCluster::start(cfg))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start a new broker: {e}"));
    let mut took = Vec::new();
    for run in ["first", "second"] {
        let t = topics_on(&cluster.bootstrap_servers(), &format!("{run}-run"), 4, RECORDS, 100).await;
        let app = unique(&format!("{run}-run"));
        let started = Instant::now();
        let running =
            spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).commit_interval(Duration::from_millis(100)));
        t.wait_caught_up(&app, Duration::from_secs(120)).await;
        let elapsed = started.elapsed();
        let summary = running.stop().await;
        let report = t.verify().await;
        println!(
            "{run} run: {RECORDS} records in {:.2} s, {} transactions committed, {} aborted, {report}",
            elapsed.as_secs_f64(),
            summary.transactions_committed,
            summary.transactions_aborted
        );
        assert!(report.is_exactly_once() && report.input_records == RECORDS, "{run} run: {report:?}");
        assert_eq!((summary.transactions_aborted, summary.producers_fenced), (0, 0), "{run} run: {summary:?}");
        took.push(elapsed);
    }
    assert!(took[0] <= took[1] + SLACK, "the first run took {:?}, the second {:?}", took[0], took[1]);
    tokio::task::spawn_blocking(move || cluster.stop()).await.unwrap().expect("stop");
}
