//! Startup errors: clear, bounded in time, naming what to fix.

use std::time::{Duration, Instant};

use kafka_eos::Error;

use crate::common::{bootstrap, noop, run_expecting_error, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_brokers_fail_within_the_startup_timeout_naming_them() {
    let started = Instant::now();
    let err =
        run_expecting_error(noop("127.0.0.1:1", "nobody-home", "in").startup_timeout(Duration::from_secs(3))).await;
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_input_topic_is_named() {
    let missing = unique("no-such-topic");
    let err = run_expecting_error(noop(&bootstrap(), &unique("unknown"), &missing)).await;
    match err {
        Error::UnknownTopics { topics, .. } => assert_eq!(topics, vec![missing]),
        other => panic!("expected UnknownTopics, got {other}"),
    }
}

/// A processor writing to a topic that does not exist: the pipeline stops with the topic
/// named, soon after the first produce to it fails (the transaction's message timeout, or
/// librdkafka's unknown-topic verdict under at-least-once) — not after retrying the same
/// batch for the whole task timeout with `MessageTimedOut` and no topic named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_output_topic_stops_the_pipeline_naming_it() {
    use kafka_eos::{Guarantee, OutputRecord};
    let runs = [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce].map(
        |g| async move {
            let t = crate::common::topics(&format!("no-output-{}", g.as_str()), 1, 10, 10).await;
            let missing = unique("no-such-output");
            let out = missing.clone();
            let started = Instant::now();
            let err = run_expecting_error(noop(&t.bootstrap, &unique("no-output"), &t.input).guarantee(g).processor(
                move |ctx, _| {
                    ctx.emit(OutputRecord::to(out.as_str()).value("v"));
                    Ok(())
                },
            ))
            .await;
            match &err {
                Error::UnknownTopics { topics, .. } => assert_eq!(topics, &vec![missing], "{}", g.as_str()),
                other => panic!("{}: expected UnknownTopics, got {other}", g.as_str()),
            }
            assert!(err.to_string().contains("create them"), "{err}");
            (g, started.elapsed())
        },
    );
    for (g, elapsed) in futures::future::join_all(runs).await {
        println!("{}: stopped naming the missing output topic after {:.1} s", g.as_str(), elapsed.as_secs_f64());
        assert!(elapsed < Duration::from_secs(90), "{}: took {elapsed:?}", g.as_str());
    }
}

/// Declared output topics (and with them a window's late-records topic) are checked before
/// the pipeline joins its group, like the input: a missing one is named at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_declared_output_topic_is_named_at_start_up() {
    let t = crate::common::topics("declared-output", 1, 0, 10).await;
    let missing = unique("no-such-declared-output");
    let mut builder = noop(&t.bootstrap, &unique("declared-output"), &t.input);
    let out = builder.output_topic(missing.as_str());
    let started = Instant::now();
    let err = run_expecting_error(builder.processor(move |ctx, rec| {
        ctx.forward(rec, &out);
        Ok(())
    }))
    .await;
    match err {
        Error::UnknownTopics { topics, .. } => assert_eq!(topics, vec![missing]),
        other => panic!("expected UnknownTopics, got {other}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

/// The first pipeline on a new cluster (the harness's settings: 10 partitions per internal
/// topic, no initial rebalance delay) runs as the second does, apart from the broker creating
/// `__consumer_offsets` and `__transaction_state`: no stall, no transaction aborted or
/// fenced. The quickstart's shape: 100,000 records, 4 partitions, exactly-once per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_run_on_a_new_cluster_takes_no_longer_than_the_second() {
    use kafka_eos::Guarantee;
    use kafka_eos_testkit::broker::{ClusterConfig, LocalCluster, BOOTSTRAP_ENV};

    use crate::common::{own_broker_turn, spawn, topics_on};

    const RECORDS: u64 = 100_000;
    /// What creating the two internal topics may add on a loaded machine: well below a
    /// broker stall, which holds the first run for several times this (docs/operations.md).
    const SLACK: Duration = Duration::from_secs(5);
    assert!(
        std::env::var(BOOTSTRAP_ENV).map_or(true, |b| b.trim().is_empty()),
        "this test starts its own broker; unset {BOOTSTRAP_ENV} or skip it with `cargo test -- --skip first_run`"
    );
    let _turn = own_broker_turn().await;
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
