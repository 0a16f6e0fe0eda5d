//! Startup errors: clear, bounded in time, naming what to fix.

use std::time::{Duration, Instant};

use kafka_eos::{Error, Pipeline};

use crate::common::{bootstrap, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_brokers_fail_within_the_startup_timeout_naming_them() {
    let started = Instant::now();
    let err = Pipeline::builder()
        .bootstrap_servers("127.0.0.1:1")
        .application_id("nobody-home")
        .input_topic("in")
        .handle_signals(false)
        .startup_timeout(Duration::from_secs(3))
        .processor(|_| Ok(vec![]))
        .build()
        .unwrap()
        .run()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_input_topic_is_named() {
    let missing = unique("no-such-topic");
    let err = Pipeline::builder()
        .bootstrap_servers(bootstrap())
        .application_id(unique("unknown"))
        .input_topic(&missing)
        .handle_signals(false)
        .processor(|_| Ok(vec![]))
        .build()
        .unwrap()
        .run()
        .await
        .unwrap_err();
    match err {
        Error::UnknownTopics { topics, .. } => assert_eq!(topics, vec![missing]),
        other => panic!("expected UnknownTopics, got {other}"),
    }
}
