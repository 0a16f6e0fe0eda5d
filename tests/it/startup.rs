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
