//! 100,000 records over 4 partitions, transformed 1:1, in each guarantee.

use std::time::{Duration, Instant};

use kafka_eos::Guarantee;

use crate::common::{spawn, topics, unique};

const RECORDS: u64 = 100_000;

async fn copy_all(guarantee: Guarantee) -> kafka_eos_testkit::verify::Report {
    let t = topics(&format!("copy-{}", guarantee.as_str()), 4, RECORDS, 100).await;
    let app = unique("copy");
    let started = Instant::now();
    let run = spawn(t.pipeline(&app, guarantee));
    t.wait_caught_up(&app, Duration::from_secs(180)).await;
    let elapsed = started.elapsed();
    let summary = run.stop().await;
    let report = t.verify().await;
    println!(
        "{}: {RECORDS} records in {:.2} s ({:.0} records/s, join and init included), {} transactions, {report}",
        guarantee.as_str(),
        elapsed.as_secs_f64(),
        RECORDS as f64 / elapsed.as_secs_f64(),
        summary.transactions_committed
    );
    assert_eq!(summary.records_in, RECORDS, "{summary:?}");
    assert_eq!(report.input_records, RECORDS);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_per_partition_copies_every_record_once() {
    let report = copy_all(Guarantee::ExactlyOnce).await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(report.output_records, RECORDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_per_consumer_copies_every_record_once() {
    let report = copy_all(Guarantee::ExactlyOncePerConsumer).await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(report.output_records, RECORDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_loses_nothing() {
    let report = copy_all(Guarantee::AtLeastOnce).await;
    assert!(report.is_at_least_once(), "{report:?}");
    assert!(report.output_records >= RECORDS);
}
