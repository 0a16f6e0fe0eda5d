//! The delivery reports of a producer's current cycle, counted inside `poll` on the task's
//! thread; reports of earlier (aborted) cycles are ignored by their cycle number. The last
//! offset each changelog partition got (the stores' checkpoints). And what a failed
//! delivery says about a missing output topic.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;

/// Counts this cycle's delivery reports; runs inside `poll` on the task thread.
#[derive(Default)]
pub(crate) struct DeliveryTracker {
    /// For the statistics callback's metric labels.
    pub(super) pipeline: String,
    pub(super) transactional_id: Option<String>,
    pub(super) cycle: AtomicUsize,
    pub(super) acked: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) first_error: Mutex<Option<KafkaError>>,
    /// The topic of the first failed delivery: named when it turns out not to exist.
    pub(super) failed_topic: Mutex<Option<String>>,
    /// The pipeline's changelog topics, and the last offset each of their partitions got
    /// acknowledged, with the cycle it was in: after a commit, where the stores'
    /// checkpoints move to.
    pub(super) changelogs: HashSet<String>,
    pub(super) changelog_ends: Mutex<HashMap<String, PartitionEnds>>,
    /// The errors librdkafka reported for the client itself (a broken connection, requests
    /// timed out), served by `poll`: one during an `EndTxn` call means librdkafka may have
    /// sent that `EndTxn` again ([`TxnProducer::must_be_replaced`](super::TxnProducer::must_be_replaced)).
    pub(super) client_errors: AtomicU64,
}

/// Per partition: the cycle of the last acknowledged record, and its offset.
type PartitionEnds = HashMap<i32, (usize, i64)>;

impl DeliveryTracker {
    /// The changelog topics of `cfg`'s stores.
    pub(super) fn changelogs_of(cfg: &crate::config::PipelineConfig) -> HashSet<String> {
        cfg.stores.iter().map(|s| crate::state::changelog_topic(&cfg.application_id, &s.name)).collect()
    }
}

impl ClientContext for DeliveryTracker {
    fn error(&self, error: KafkaError, reason: &str) {
        self.client_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(transactional_id = ?self.transactional_id, %error, reason, "librdkafka client error");
    }

    /// librdkafka statistics (when `statistics.interval.ms` is set): the producer epoch.
    fn stats(&self, stats: rdkafka::Statistics) {
        if let (Some(eos), Some(id)) = (stats.eos, &self.transactional_id) {
            crate::metrics::producer_epoch(&self.pipeline, id, eos.producer_epoch);
            tracing::trace!(transactional_id = %id, state = %eos.txn_state, epoch = eos.producer_epoch, "producer statistics");
        }
    }
}

impl ProducerContext for DeliveryTracker {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, cycle: usize) {
        if cycle != self.cycle.load(Ordering::Relaxed) {
            return; // a report from an aborted cycle
        }
        match result {
            Ok(m) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
                let topic = rdkafka::Message::topic(m);
                if !self.changelogs.is_empty() && self.changelogs.contains(topic) {
                    let mut ends = self.changelog_ends.lock().unwrap_or_else(|p| p.into_inner());
                    if !ends.contains_key(topic) {
                        ends.insert(topic.to_string(), HashMap::new());
                    }
                    let offset = rdkafka::Message::offset(m);
                    let partitions = ends.get_mut(topic).expect("inserted above");
                    let end = partitions.entry(rdkafka::Message::partition(m)).or_insert((cycle, offset));
                    *end = (cycle, if end.0 == cycle { end.1.max(offset) } else { offset });
                }
            }
            Err((e, m)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
                if first.is_none() {
                    *first = Some(e.clone());
                    *self.failed_topic.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(rdkafka::Message::topic(m).to_string());
                }
            }
        }
    }
}
