//! The outbox applier a pipeline starts, on librdkafka's mock cluster. The mock does not
//! create topics: the outbox topic is made beforehand, and the pipeline's own start-up
//! check, which would create it, is skipped (the applier is started alone).

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;

use crate::error::Error;
use crate::sink::test_sinks::{Ledger, Never};
use crate::Pipeline;

/// An outbox sink that is not exactly-once stops the pipeline with a config error at the
/// applier's first connect, before the applier reads a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_whose_sink_is_not_exactly_once_stops_the_pipeline_with_a_config_error() {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Row;
    let mock = MockCluster::new(1).expect("mock cluster");
    for topic in ["in", "app-ledger-outbox"] {
        mock.create_topic(topic, 1, 1).expect("topic");
    }
    let mut b = Pipeline::builder().bootstrap_servers(mock.bootstrap_servers()).application_id("app").input_topic("in");
    b.outbox_sink("ledger", || async { Ok::<_, Never>(Ledger) }, |_: Row| 0);
    let pipeline = b.processor(|_, _| Ok(())).build().expect("config");
    let applier = pipeline.start_outbox().expect("started").expect("an outbox");
    let handle = pipeline.shutdown_handle();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !handle.is_shutdown() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(handle.is_shutdown(), "the applier kept running with an at-least-once sink");
    match applier.finish().await {
        Err(Error::Config(m)) => assert!(m.contains("outbox_sink(\"ledger\") needs an exactly-once sink"), "{m}"),
        ended => panic!("expected a config error, got {ended:?}"),
    }
}
