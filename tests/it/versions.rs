//! Broker versions and transaction protocols: a pipeline is exactly-once on Kafka 4.4.0 with
//! `transaction.version=2` (KIP-890) and on Kafka 4.1.1 with the classic `transaction.version=0`.
//!
//! librdkafka 2.12 speaks only the classic transaction protocol; a level-2 cluster must still
//! serve it. Each test starts its own 1-node cluster with [`ClusterConfig::kafka_version`] and
//! [`ClusterConfig::transaction_version`] (the jars of a version are fetched once, with Maven),
//! reads the finalized feature level back from the broker, then copies records exactly once.

use std::time::{Duration, Instant};

use kafka_eos::Guarantee;
use kafka_eos_testkit::broker::{ClusterConfig, LocalCluster, BOOTSTRAP_ENV};

use crate::common::{own_broker_turn, spawn, topics_on, unique};

const RECORDS: u64 = 5_000;

async fn copy_on(kafka_version: &str, transaction_version: u8) {
    let _turn = own_broker_turn().await;
    assert!(
        std::env::var(BOOTSTRAP_ENV).map_or(true, |b| b.trim().is_empty()),
        "the version tests start their own Kafka {kafka_version} broker; unset {BOOTSTRAP_ENV} or skip \
         them with `cargo test -- --skip versions`"
    );
    let cfg = ClusterConfig {
        kafka_version: Some(kafka_version.into()),
        transaction_version: Some(transaction_version),
        // The jars may be fetched first (about 10 s) on a machine busy with other tests.
        ready_timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let cluster = tokio::task::spawn_blocking(move || LocalCluster::start(cfg))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start Kafka {kafka_version}: {e}"));
    assert_eq!(cluster.kafka_version(), kafka_version);
    let features = cluster.finalized_features().expect("ApiVersions");
    println!("Kafka {kafka_version}: finalized features {features:?}");
    assert_eq!(cluster.transaction_version().unwrap(), i16::from(transaction_version), "{features:?}");

    let t = topics_on(&cluster.bootstrap_servers(), "versions", 3, RECORDS, 100).await;

    let app = unique("versions");
    let started = Instant::now();
    let run = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).commit_interval(Duration::from_millis(50)));
    t.wait_caught_up(&app, Duration::from_secs(120)).await;
    let summary = run.stop().await;
    let report = t.verify().await;
    println!(
        "Kafka {kafka_version}, transaction.version {transaction_version}: {RECORDS} records in {:.2} s, \
         {} transactions, {report}",
        started.elapsed().as_secs_f64(),
        summary.transactions_committed
    );
    assert!(summary.transactions_committed > 1, "{summary:?}");
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!((report.input_records, report.output_records), (RECORDS, RECORDS));
    tokio::task::spawn_blocking(move || cluster.stop()).await.unwrap().expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_4_4_with_transaction_version_2_is_exactly_once() {
    copy_on("4.4.0", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_4_1_with_transaction_version_0_is_exactly_once() {
    copy_on("4.1.1", 0).await;
}
