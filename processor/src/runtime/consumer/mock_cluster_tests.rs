//! The consumer thread's handling of commit errors a real broker gives only in a rebalance's
//! window, injected with librdkafka's mock cluster (used here for its errors only: no
//! transactions are involved).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::{Guarantee, Pipeline};

const RECORDS: i64 = 20;

fn produce(mock: &MockCluster<'static, DefaultProducerContext>) {
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", mock.bootstrap_servers()).create().unwrap();
    for i in 0..RECORDS {
        let value = i.to_string();
        producer.send(BaseRecord::<(), _>::to("in").partition(0).payload(&value)).expect("queued");
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
}

/// The group's committed offset of `in-0`, `None` while it has none.
fn committed(mock: &MockCluster<'static, DefaultProducerContext>) -> Option<i64> {
    let reader: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", mock.bootstrap_servers()).set("group.id", "alo").create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition("in", 0);
    match reader.committed_offsets(tpl, Duration::from_secs(5)).ok()?.find_partition("in", 0)?.offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

/// An at-least-once batch's offset commit is refused (the group rebalancing) and no record
/// follows: the offsets are sent again until the group has them, so a restart does not
/// reprocess what was done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_at_least_once_commit_is_sent_again_until_the_group_has_it() {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("in", 1, 1).expect("topic");
    produce(&mock);
    let refused = [RDKafkaRespErr::RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS; 3];
    mock.request_errors(RDKafkaApiKey::OffsetCommit, &refused);
    let pipeline = Pipeline::builder()
        .bootstrap_servers(mock.bootstrap_servers())
        .application_id("alo")
        .input_topic("in")
        .guarantee(Guarantee::AtLeastOnce)
        .commit_interval(Duration::from_millis(200))
        .processor(|_, _| Ok(()))
        .build()
        .expect("config");
    let handle = pipeline.shutdown_handle();
    let run = tokio::spawn(pipeline.run());
    let deadline = Instant::now() + Duration::from_secs(30);
    while handle.summary().records_in < RECORDS as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(handle.summary().records_in, RECORDS as u64, "every record processed");
    let mut last = None;
    while Instant::now() < deadline {
        last = tokio::task::block_in_place(|| committed(&mock));
        if last == Some(RECORDS) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    handle.shutdown();
    run.await.expect("joined").expect("the pipeline ends cleanly");
    assert_eq!(last, Some(RECORDS), "the group's offset reaches the end of the input while the pipeline runs");
}
