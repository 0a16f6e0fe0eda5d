//! Cluster chores for examples, tests, benchmarks and the CLI: creating topics, writing
//! sample input, and waiting until a consumer group has committed everything.
//!
//! All functions block (they wait on the cluster): from async code, call them inside
//! `tokio::task::spawn_blocking`.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, TopicPartitionList};

use crate::error::{Error, Result};

fn client(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap).set("log_level", "3");
    c
}

fn unreachable(bootstrap: &str, timeout: Duration, e: impl std::fmt::Display) -> Error {
    Error::Unreachable { servers: bootstrap.to_string(), timeout, detail: e.to_string() }
}

/// Creates `topic` with `partitions` partitions and replication factor `replication`, and
/// waits until its metadata shows every partition. An existing topic with the same
/// partition count is accepted; with another count it is an error.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32, replication: i32) -> Result<()> {
    create_topic_with(bootstrap, topic, partitions, replication, &[])
}

/// [`create_topic`] with topic configs (e.g. `("min.insync.replicas", "2")`).
pub fn create_topic_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    configs: &[(&str, &str)],
) -> Result<()> {
    let timeout = Duration::from_secs(30);
    let admin: AdminClient<DefaultClientContext> =
        client(bootstrap).create().map_err(|e| Error::Config(e.to_string()))?;
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(timeout)).request_timeout(Some(timeout));
    let results = futures::executor::block_on(admin.create_topics([&new], &opts))
        .map_err(|e| unreachable(bootstrap, timeout, e))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => return Err(Error::Config(format!("cannot create topic {t}: {code}"))),
        }
    }
    let probe: BaseConsumer = client(bootstrap).create().map_err(|e| Error::Config(e.to_string()))?;
    let deadline = Instant::now() + timeout;
    loop {
        let md = probe
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map_err(|e| unreachable(bootstrap, timeout, e))?;
        let n = md.topics().first().map_or(0, |t| if t.error().is_none() { t.partitions().len() } else { 0 });
        if n == partitions as usize {
            return Ok(());
        }
        if n > 0 && n != partitions as usize {
            return Err(Error::Config(format!("topic {topic} exists with {n} partitions, not {partitions}")));
        }
        if Instant::now() > deadline {
            return Err(Error::TaskTimeout {
                what: format!("creating topic {topic}"),
                timeout,
                last: "not in metadata".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `count` records to `topic` with an idempotent producer, record `i` to partition
/// `i % partitions` with key `i` (decimal) and a value of `value_size` bytes starting with
/// `i`. Returns once every record is acknowledged.
pub fn produce_sequence(bootstrap: &str, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()> {
    let mut value = vec![b'.'; value_size];
    produce(
        bootstrap,
        topic,
        (0..count).map(|i| {
            let key = i.to_string().into_bytes();
            let n = key.len().min(value_size);
            value[..n].copy_from_slice(&key[..n]);
            (Some((i % partitions as u64) as i32), key, value.clone())
        }),
    )
}

/// Writes `(partition, key, value)` records to `topic` with an idempotent producer (a
/// `None` partition lets the partitioner choose by key) and waits until every one is
/// acknowledged.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>,
) -> Result<()> {
    let producer: ThreadedProducer<DefaultProducerContext> = client(bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .create()
        .map_err(|e| Error::Config(e.to_string()))?;
    for (partition, key, value) in records {
        let mut rec = BaseRecord::to(topic).key(&key[..]).payload(&value[..]);
        rec.partition = partition;
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(Error::Config(format!("producing to {topic}: {e}"))),
            }
        }
    }
    producer.flush(Duration::from_secs(60)).map_err(|e| unreachable(bootstrap, Duration::from_secs(60), e))
}

/// The group's lag: for every partition of `topics`, high watermark minus committed offset
/// (a partition with no commit counts from 0). 0 means the group has committed everything.
pub fn group_lag(bootstrap: &str, group: &str, topics: &[String]) -> Result<i64> {
    let timeout = Duration::from_secs(10);
    let consumer: BaseConsumer = client(bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| Error::Config(e.to_string()))?;
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        let md = consumer.fetch_metadata(Some(t), timeout).map_err(|e| unreachable(bootstrap, timeout, e))?;
        for p in md.topics().first().map(|t| t.partitions()).unwrap_or_default() {
            tpl.add_partition(t, p.id());
        }
    }
    let committed = consumer.committed_offsets(tpl, timeout).map_err(|e| unreachable(bootstrap, timeout, e))?;
    let mut lag = 0;
    for e in committed.elements() {
        let (_, high) = consumer
            .fetch_watermarks(e.topic(), e.partition(), timeout)
            .map_err(|e| unreachable(bootstrap, timeout, e))?;
        lag += high - e.offset().to_raw().unwrap_or(0).max(0);
    }
    Ok(lag)
}

/// Waits until [`group_lag`] is 0, or fails after `timeout` with the lag (or error) left.
/// Errors such as `NOT_COORDINATOR` while the group coordinator loads are retried.
pub fn wait_for_catch_up(bootstrap: &str, group: &str, topics: &[String], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match group_lag(bootstrap, group, topics) {
            Ok(0) => return Ok(()),
            Ok(lag) => format!("lag {lag}"),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(Error::TaskTimeout { what: format!("group {group} catching up"), timeout, last });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
