//! Topic administration: creating topics and reading their configuration. The pipeline uses
//! it for its changelog topics; applications may use it for their own topics. (Writing
//! sample data and watching a group's lag live in `kafka-eos-testkit`'s `admin`.)
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
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use crate::acl::denied::not_authorized;
use crate::acl::{Acl, Operation, ResourceType};
use crate::config::{client_error, Properties};
use crate::error::is_refusal;
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

    /// [`client_config`](Self::client_config), for the test kit's and the chaos suite's
    /// readers and producers (feature `test-hooks`, outside semver: rdkafka's type).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn config(&self) -> ClientConfig {
        self.client_config()
    }

    /// `bootstrap.servers`, quiet logging, then the properties: the base of every client
    /// created for this cluster.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap).set("log_level", "3");
        self.properties.set_on(&mut c);
        c
    }

    fn unreachable(&self, timeout: Duration, e: impl std::fmt::Display) -> Error {
        Error::Unreachable { servers: self.bootstrap.clone(), timeout, detail: e.to_string() }
    }

    /// The refusal of `acl` with `code`, while creating `topic`.
    fn refused(&self, acl: Acl, code: RDKafkaErrorCode, topic: &str) -> Error {
        let source = crate::error::KafkaError::new(rdkafka::error::KafkaError::AdminOp(code));
        not_authorized(&self.properties, &self.bootstrap, acl, format!("creating topic {topic}"), Some(source))
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
            self.client_config().create().map_err(|e| Error::Config(client_error(&e)))?;
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
                // Kafka allows a creation by `Create` on the topic or on the cluster, and
                // refuses it as the topic's.
                Err((t, code)) if is_refusal(code) => {
                    return Err(self.refused(Acl::literal(ResourceType::Topic, &t, Operation::Create), code, &t))
                }
                Err((t, code)) => return Err(Error::Config(format!("cannot create topic {t}: {code}"))),
            }
        }
        let probe: BaseConsumer = self.client_config().create().map_err(|e| Error::Config(client_error(&e)))?;
        let deadline = Instant::now() + timeout;
        loop {
            let md =
                probe.fetch_metadata(Some(topic), Duration::from_secs(5)).map_err(|e| self.unreachable(timeout, e))?;
            let error = md.topics().first().and_then(|t| t.error()).map(RDKafkaErrorCode::from);
            if let Some(code) = error.filter(|c| is_refusal(*c)) {
                return Err(self.refused(Acl::literal(ResourceType::Topic, topic, Operation::Describe), code, topic));
            }
            let n = md.topics().first().map_or(0, |t| if error.is_none() { t.partitions().len() } else { 0 });
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
            self.client_config().create().map_err(|e| Error::Config(client_error(&e)))?;
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

// rdkafka's traits are no part of the default API: the test kit's readers use it through
// the feature `test-hooks`.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use quiet::QuietEof;
#[cfg(not(feature = "test-hooks"))]
pub(crate) use quiet::QuietEof;

mod quiet {
    use rdkafka::consumer::ConsumerContext;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;
    use rdkafka::ClientContext;

    /// A consumer context that does not report the end of a partition as an error: readers
    /// that ask for those events (`enable.partition.eof`: a restore, a verifier) would
    /// otherwise see librdkafka's default context log each one at ERROR level.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct QuietEof;

    impl ClientContext for QuietEof {
        fn error(&self, error: KafkaError, reason: &str) {
            match error {
                KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF) => {
                    tracing::trace!(reason, "end of partition")
                }
                e => tracing::warn!(error = %e, reason, "consumer error"),
            }
        }
    }

    impl ConsumerContext for QuietEof {}
}
