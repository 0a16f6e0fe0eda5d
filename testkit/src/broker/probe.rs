//! Readiness probe: a real metadata request through rdkafka.

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;

use super::BrokerError;

/// Context that keeps librdkafka quiet: refused connections are expected while brokers start,
/// so its logs and errors go to `tracing` at TRACE level instead of the `log` crate at ERROR.
struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        tracing::trace!(target: "kafka_eos::broker::probe", ?level, fac, message);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::trace!(target: "kafka_eos::broker::probe", %error, reason);
    }
}

impl ConsumerContext for Quiet {}

/// A metadata-only client (no group, never polls for messages).
pub(crate) struct Probe {
    client: BaseConsumer<Quiet>,
}

impl Probe {
    pub fn new(bootstrap: &str) -> Result<Probe, BrokerError> {
        let client = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("client.id", "kafka-eos-broker-probe")
            .set("log_level", "3")
            .set("broker.address.family", "v4")
            // Brokers refuse connections while they start; retry fast instead of backing off
            // to librdkafka's 10 s maximum.
            .set("reconnect.backoff.ms", "100")
            .set("reconnect.backoff.max.ms", "500")
            .set("socket.connection.setup.timeout.ms", "5000")
            .set("allow.auto.create.topics", "false")
            .create_with_context::<_, BaseConsumer<Quiet>>(Quiet)
            .map_err(|e| BrokerError::Probe(e.to_string()))?;
        Ok(Probe { client })
    }

    /// Node ids of the brokers in a fresh metadata response, sorted.
    pub fn broker_ids(&self, timeout: Duration) -> Result<Vec<i32>, String> {
        let md = self.client.fetch_metadata(None, timeout).map_err(|e| e.to_string())?;
        let mut ids: Vec<i32> = md.brokers().iter().map(|b| b.id()).collect();
        ids.sort_unstable();
        Ok(ids)
    }
}

/// Whether the broker at `bootstrap` (one node) itself answers a metadata request that
/// lists node `id`. A fresh client each time: its first request can only go to its
/// bootstrap broker, while a client that learned of the others may ask one of them — and
/// after a SIGKILL they keep listing the dead node until its broker session expires.
pub(crate) fn answers_itself(bootstrap: &str, id: i32, timeout: Duration) -> Result<bool, BrokerError> {
    let probe = Probe::new(bootstrap)?;
    Ok(probe
        .client
        .fetch_metadata(None, timeout)
        .is_ok_and(|md| md.orig_broker_id() == id && md.brokers().iter().any(|b| b.id() == id)))
}
