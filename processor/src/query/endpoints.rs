//! The endpoints topic, `<application-id>-endpoints`: how the instances of a pipeline tell
//! each other their endpoints and their partitions ([`crate::query`] says why a topic).
//!
//! Every instance that advertises an endpoint runs one thread (its librdkafka calls block:
//! never on an async worker) that publishes the instance's assignment — its partitions of
//! the first input topic — whenever it changes, keyed by the endpoint, and reads the topic
//! from its start to keep the [`Adverts`] current. The topic has one partition, so every
//! instance reads the adverts in the same order, and compaction keeps the latest per
//! endpoint. When the pipeline stops, the thread publishes a tombstone: a stopped instance
//! owns nothing.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::adverts::{decode, encode, Adverts};
use crate::admin::QuietEof;
use crate::config::PipelineConfig;
use crate::error::{Error, Result};
use crate::state::changelog::group_reader_config;

/// How long the thread waits for an advert between checks of the assignment and of the
/// pipeline's end: how late an assignment change is advertised, at most (plus the publish).
const POLL: Duration = Duration::from_millis(100);

/// How long a publish waits for its acknowledgement before it is tried again.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// The endpoints topic of pipeline `application_id`.
pub(crate) fn topic(application_id: &str) -> String {
    format!("{application_id}-endpoints")
}

/// Creates the endpoints topic if missing: compacted (the latest advert per endpoint is all
/// that matters), one partition (one order of adverts for every reader), the changelogs'
/// replication. An existing one with more partitions is refused.
pub(crate) fn ensure_topic(cfg: &PipelineConfig) -> Result<()> {
    let admin = crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
    let topic = topic(&cfg.application_id);
    match admin.create_topic_with(&topic, 1, cfg.changelog_replication, &[("cleanup.policy", "compact")]) {
        Err(Error::Config(m)) if m.contains("exists with") => Err(Error::Config(format!(
            "{m}: the endpoints topic of queryable state must have one partition, so that every instance reads \
             the adverts in one order. Delete it: every instance advertises itself again when it starts"
        ))),
        other => other,
    }
}

/// This instance's partitions of the first input topic, in order (asked between polls).
pub(crate) type Assigned = Box<dyn Fn() -> Vec<i32> + Send>;

/// Is asked between polls whether the pipeline is shutting down.
pub(crate) type Stopping = Box<dyn Fn() -> bool + Send>;

/// Starts the endpoints thread of an instance that advertises `endpoint`, and waits,
/// without blocking the async worker, until its clients exist. It runs until `stopping` or
/// [`Adverts::stop`].
pub(crate) async fn start(
    cfg: Arc<PipelineConfig>,
    endpoint: String,
    adverts: Arc<Adverts>,
    assigned: Assigned,
    stopping: Stopping,
) -> Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("kafka-eos-endpoints-{}", cfg.application_id))
        .spawn(move || match Clients::new(&cfg) {
            Ok(clients) => {
                let _ = tx.send(Ok(()));
                clients.run(&endpoint, &adverts, &*assigned, &*stopping);
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        })
        .map_err(|e| Error::Internal(format!("cannot spawn the endpoints thread: {e}")))?;
    rx.await.map_err(|_| Error::Internal("the endpoints thread panicked".into()))?
}

/// The thread's producer (its adverts) and consumer (everyone's).
struct Clients {
    topic: String,
    producer: BaseProducer,
    consumer: BaseConsumer<QuietEof>,
}

impl Clients {
    fn new(cfg: &PipelineConfig) -> Result<Clients> {
        let topic = topic(&cfg.application_id);
        let client_error =
            |e: KafkaError| Error::Config(format!("endpoints topic client: {}", crate::config::client_error(&e)));
        // Not transactional: an advert is a fact about this instance, not part of a batch.
        let mut pc = cfg.producer_config(None);
        pc.set("statistics.interval.ms", "0").set("log_level", "3");
        let producer: BaseProducer = pc.create().map_err(client_error)?;
        // Assigned, not subscribed: it reads the whole topic and never joins the group.
        let consumer: BaseConsumer<QuietEof> =
            group_reader_config(cfg).create_with_context(QuietEof).map_err(client_error)?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .map_err(|e| Error::Internal(format!("endpoints topic assignment: {e}")))?;
        consumer.assign(&tpl).map_err(client_error)?;
        Ok(Clients { topic, producer, consumer })
    }

    /// Advertises the assignment whenever it changes and reads every advert, until the
    /// pipeline stops; then withdraws this instance's.
    fn run(self, endpoint: &str, adverts: &Adverts, assigned: &dyn Fn() -> Vec<i32>, stopping: &dyn Fn() -> bool) {
        let mut published: Option<Vec<i32>> = None;
        while !(stopping() || adverts.stopped()) {
            let now = assigned();
            if published.as_ref() != Some(&now) && self.publish(endpoint, Some(now.as_slice())) {
                tracing::debug!(endpoint, partitions = ?now, "endpoint advertised");
                published = Some(now);
            }
            match self.consumer.poll(POLL) {
                Some(Ok(m)) => apply(adverts, &m),
                Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                // Transport trouble recovers by itself; a deleted topic stays stale adverts.
                Some(Err(e)) => tracing::debug!(error = %e, "endpoints topic consumer error; retrying"),
            }
        }
        if published.is_some() && self.publish(endpoint, None) {
            tracing::debug!(endpoint, "endpoint withdrawn");
        }
    }

    /// Publishes `endpoint`'s advert (`None`: a tombstone) and waits for its acknowledgement;
    /// `false` if it was not acknowledged (it is then published again).
    fn publish(&self, endpoint: &str, partitions: Option<&[i32]>) -> bool {
        let value = partitions.map(encode);
        let mut record = BaseRecord::<[u8], [u8]>::to(&self.topic).partition(0).key(endpoint.as_bytes());
        if let Some(value) = &value {
            record = record.payload(value.as_bytes());
        }
        if let Err((e, _)) = self.producer.send(record) {
            tracing::warn!(endpoint, error = %e, "cannot advertise this instance's endpoint; trying again");
            return false;
        }
        match self.producer.flush(PUBLISH_TIMEOUT) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(endpoint, error = %e, "this instance's endpoint advert is unacknowledged; trying again");
                false
            }
        }
    }
}

/// Applies advert `m` (key: the endpoint; value: its partitions, or a tombstone).
fn apply(adverts: &Adverts, m: &BorrowedMessage<'_>) {
    let Some(key) = m.key() else { return };
    let endpoint = String::from_utf8_lossy(key);
    match m.payload().map(decode) {
        None => adverts.apply(m.offset(), &endpoint, None),
        Some(Some(partitions)) => adverts.apply(m.offset(), &endpoint, Some(partitions)),
        Some(None) => tracing::warn!(offset = m.offset(), %endpoint, "unreadable endpoint advert skipped"),
    }
}
