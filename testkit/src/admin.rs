//! Cluster chores for tests, examples, benchmarks and the CLI: topic creation (re-exported
//! from [`kafka_eos::admin`]), writing sample input, and waiting until a consumer group
//! has committed everything.
//!
//! [`ClientExt`] adds the data operations to [`Client`], which carries the bootstrap servers
//! and any client properties (security settings) into every client it creates; the free
//! functions are the same operations for a cluster that needs no properties.
//!
//! All functions block (they wait on the cluster): from async code, call them inside
//! `tokio::task::spawn_blocking`.

use std::time::{Duration, Instant};

use kafka_eos::config::client_error;
use kafka_eos::error::{Error, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;

pub use kafka_eos::admin::*;

/// Writing sample input and watching a group's lag, on a [`Client`]'s cluster.
pub trait ClientExt {
    /// See [`produce_sequence`].
    fn produce_sequence(&self, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()>;
    /// See [`produce`].
    fn produce(&self, topic: &str, records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>) -> Result<()>;
    /// See [`group_lag`].
    fn group_lag(&self, group: &str, topics: &[String]) -> Result<i64>;
    /// See [`wait_for_catch_up`].
    fn wait_for_catch_up(&self, group: &str, topics: &[String], timeout: Duration) -> Result<()>;
}

fn unreachable(client: &Client, timeout: Duration, e: impl std::fmt::Display) -> Error {
    Error::Unreachable { servers: client.bootstrap.clone(), timeout, detail: e.to_string() }
}

impl ClientExt for Client {
    fn produce_sequence(&self, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()> {
        let mut value = vec![b'.'; value_size];
        self.produce(
            topic,
            (0..count).map(|i| {
                let key = i.to_string().into_bytes();
                let n = key.len().min(value_size);
                value[..n].copy_from_slice(&key[..n]);
                (Some((i % partitions as u64) as i32), key, value.clone())
            }),
        )
    }

    fn produce(&self, topic: &str, records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>) -> Result<()> {
        let producer: ThreadedProducer<DefaultProducerContext> = self
            .config()
            .set("enable.idempotence", "true")
            .set("linger.ms", "20")
            .set("batch.size", "1000000")
            .create()
            .map_err(|e| Error::Config(client_error(&e)))?;
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
        producer.flush(Duration::from_secs(60)).map_err(|e| unreachable(self, Duration::from_secs(60), e))
    }

    fn group_lag(&self, group: &str, topics: &[String]) -> Result<i64> {
        let timeout = Duration::from_secs(10);
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .map_err(|e| Error::Config(client_error(&e)))?;
        let mut tpl = TopicPartitionList::new();
        for t in topics {
            let md = consumer.fetch_metadata(Some(t), timeout).map_err(|e| unreachable(self, timeout, e))?;
            for p in md.topics().first().map(|t| t.partitions()).unwrap_or_default() {
                tpl.add_partition(t, p.id());
            }
        }
        let committed = consumer.committed_offsets(tpl, timeout).map_err(|e| unreachable(self, timeout, e))?;
        let mut lag = 0;
        for e in committed.elements() {
            let (_, high) = consumer
                .fetch_watermarks(e.topic(), e.partition(), timeout)
                .map_err(|e| unreachable(self, timeout, e))?;
            lag += high - e.offset().to_raw().unwrap_or(0).max(0);
        }
        Ok(lag)
    }

    fn wait_for_catch_up(&self, group: &str, topics: &[String], timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.group_lag(group, topics) {
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
}

/// Writes `count` records to `topic` with an idempotent producer, record `i` to partition
/// `i % partitions` with key `i` (decimal) and a value of `value_size` bytes starting with
/// `i`. Returns once every record is acknowledged.
pub fn produce_sequence(bootstrap: &str, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()> {
    Client::new(bootstrap).produce_sequence(topic, partitions, count, value_size)
}

/// Writes `(partition, key, value)` records to `topic` with an idempotent producer (a
/// `None` partition lets the partitioner choose by key) and waits until every one is
/// acknowledged.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>,
) -> Result<()> {
    Client::new(bootstrap).produce(topic, records)
}

/// The group's lag: for every partition of `topics`, high watermark minus committed offset
/// (a partition with no commit counts from 0). 0 means the group has committed everything.
pub fn group_lag(bootstrap: &str, group: &str, topics: &[String]) -> Result<i64> {
    Client::new(bootstrap).group_lag(group, topics)
}

/// Waits until [`group_lag`] is 0, or fails after `timeout` with the lag (or error) left.
/// Errors such as `NOT_COORDINATOR` while the group coordinator loads are retried.
pub fn wait_for_catch_up(bootstrap: &str, group: &str, topics: &[String], timeout: Duration) -> Result<()> {
    Client::new(bootstrap).wait_for_catch_up(group, topics, timeout)
}
