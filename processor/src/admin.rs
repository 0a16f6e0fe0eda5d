//! Cluster chores for examples, tests, benchmarks and the CLI: creating topics, writing
//! sample input, and waiting until a consumer group has committed everything.
//!
//! [`Client`] carries the bootstrap servers and any client properties (security settings:
//! `security.protocol`, `sasl.*`, `ssl.*`) into every client it creates; the free functions
//! are the same operations for a cluster that needs no properties.
//!
//! All functions block (they wait on the cluster): from async code, call them inside
//! `tokio::task::spawn_blocking`.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, TopicPartitionList};

use crate::config::{client_error, Properties};
use crate::error::{Error, Result};

/// A cluster to run the chores on: bootstrap servers plus client properties, applied to
/// every client the operations create (after `bootstrap.servers`, before the settings an
/// operation needs, such as the lag check's `group.id`).
///
/// ```no_run
/// # fn demo() -> kafka_eos::Result<()> {
/// let admin = kafka_eos::admin::Client::new("127.0.0.1:9093")
///     .property("security.protocol", "SASL_PLAINTEXT")
///     .property("sasl.mechanism", "SCRAM-SHA-256")
///     .property("sasl.username", "alice")
///     .property("sasl.password", "alice-secret");
/// admin.create_topic("orders", 3, 1)?;
/// admin.produce_sequence("orders", 3, 1000, 100)?;
/// # Ok(()) }
/// ```
///
/// `Debug` redacts secrets (see [`Properties`]).
#[derive(Debug, Clone, Default)]
pub struct Client {
    /// `bootstrap.servers`.
    pub bootstrap: String,
    /// Extra librdkafka properties for every client, verbatim.
    pub properties: Properties,
}

impl Client {
    /// A client for `bootstrap` with no extra properties.
    pub fn new(bootstrap: impl Into<String>) -> Self {
        Client { bootstrap: bootstrap.into(), properties: Properties::default() }
    }

    /// Adds a librdkafka property (e.g. `security.protocol`, `sasl.password`).
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.set(key, value);
        self
    }

    /// Replaces the extra properties (e.g. with a pipeline's or a verifier's).
    pub fn properties(mut self, properties: Properties) -> Self {
        self.properties = properties;
        self
    }

    /// `bootstrap.servers`, quiet logging, then the properties: the base of every client
    /// created for this cluster (the chaos suite's readers and producers too).
    pub(crate) fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap).set("log_level", "3");
        self.properties.apply(&mut c);
        c
    }

    fn unreachable(&self, timeout: Duration, e: impl std::fmt::Display) -> Error {
        Error::Unreachable { servers: self.bootstrap.clone(), timeout, detail: e.to_string() }
    }

    /// See [`create_topic`].
    pub fn create_topic(&self, topic: &str, partitions: i32, replication: i32) -> Result<()> {
        self.create_topic_with(topic, partitions, replication, &[])
    }

    /// See [`create_topic_with`].
    pub fn create_topic_with(
        &self,
        topic: &str,
        partitions: i32,
        replication: i32,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let timeout = Duration::from_secs(30);
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| Error::Config(client_error(&e)))?;
        let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
        for (k, v) in configs {
            new = new.set(k, v);
        }
        let opts = AdminOptions::new().operation_timeout(Some(timeout)).request_timeout(Some(timeout));
        let results = futures::executor::block_on(admin.create_topics([&new], &opts))
            .map_err(|e| self.unreachable(timeout, e))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => return Err(Error::Config(format!("cannot create topic {t}: {code}"))),
            }
        }
        let probe: BaseConsumer = self.config().create().map_err(|e| Error::Config(client_error(&e)))?;
        let deadline = Instant::now() + timeout;
        loop {
            let md =
                probe.fetch_metadata(Some(topic), Duration::from_secs(5)).map_err(|e| self.unreachable(timeout, e))?;
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

    /// The value of configuration entry `key` of `topic`, as the broker reports it.
    pub fn topic_config(&self, topic: &str, key: &str) -> Result<Option<String>> {
        let timeout = Duration::from_secs(30);
        let admin: AdminClient<DefaultClientContext> =
            self.config().create().map_err(|e| Error::Config(client_error(&e)))?;
        let opts = AdminOptions::new().request_timeout(Some(timeout));
        let results = futures::executor::block_on(admin.describe_configs([&ResourceSpecifier::Topic(topic)], &opts))
            .map_err(|e| self.unreachable(timeout, e))?;
        match results.into_iter().next() {
            Some(Ok(resource)) => Ok(resource.get(key).and_then(|e| e.value.clone())),
            Some(Err(code)) => {
                Err(Error::Config(format!("cannot describe the configuration of topic {topic}: {code}")))
            }
            None => Ok(None),
        }
    }

    /// See [`produce_sequence`].
    pub fn produce_sequence(&self, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()> {
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

    /// See [`produce`].
    pub fn produce(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
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
        producer.flush(Duration::from_secs(60)).map_err(|e| self.unreachable(Duration::from_secs(60), e))
    }

    /// See [`group_lag`].
    pub fn group_lag(&self, group: &str, topics: &[String]) -> Result<i64> {
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
            let md = consumer.fetch_metadata(Some(t), timeout).map_err(|e| self.unreachable(timeout, e))?;
            for p in md.topics().first().map(|t| t.partitions()).unwrap_or_default() {
                tpl.add_partition(t, p.id());
            }
        }
        let committed = consumer.committed_offsets(tpl, timeout).map_err(|e| self.unreachable(timeout, e))?;
        let mut lag = 0;
        for e in committed.elements() {
            let (_, high) = consumer
                .fetch_watermarks(e.topic(), e.partition(), timeout)
                .map_err(|e| self.unreachable(timeout, e))?;
            lag += high - e.offset().to_raw().unwrap_or(0).max(0);
        }
        Ok(lag)
    }

    /// See [`wait_for_catch_up`].
    pub fn wait_for_catch_up(&self, group: &str, topics: &[String], timeout: Duration) -> Result<()> {
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

/// Creates `topic` with `partitions` partitions and replication factor `replication`, and
/// waits until its metadata shows every partition. An existing topic with the same
/// partition count is accepted; with another count it is an error.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32, replication: i32) -> Result<()> {
    Client::new(bootstrap).create_topic(topic, partitions, replication)
}

/// [`create_topic`] with topic configs (e.g. `("min.insync.replicas", "2")`).
pub fn create_topic_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    configs: &[(&str, &str)],
) -> Result<()> {
    Client::new(bootstrap).create_topic_with(topic, partitions, replication, configs)
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
