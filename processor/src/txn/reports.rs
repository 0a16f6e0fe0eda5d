//! What a producer's delivery reports tell once a cycle's acknowledgements are in: the last
//! offset each changelog partition got, and an output topic found missing.

use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::Producer;

use super::{Step, StepError, TxnProducer};

impl TxnProducer {
    /// The last offset of each changelog partition acknowledged in the current cycle: after
    /// a commit, the last changelog record of each store partition the transaction wrote.
    pub(crate) fn changelog_ends(&self) -> crate::state::ChangelogEnds {
        let ends = self.inner.context().changelog_ends.lock().unwrap_or_else(|p| p.into_inner());
        let partitions =
            ends.iter().flat_map(|(topic, partitions)| partitions.iter().map(move |(p, end)| (topic, p, end)));
        partitions
            .filter(|(_, _, (cycle, _))| *cycle == self.cycle)
            .map(|(topic, p, (_, offset))| ((topic.clone(), *p), *offset))
            .collect()
    }

    /// After a failed [`await_acks`](Self::await_acks): the topic of the first failed
    /// delivery, if the failure is one a missing topic causes (`_UNKNOWN_TOPIC`,
    /// `UNKNOWN_TOPIC_OR_PARTITION`, or a message timeout: under a transaction the message
    /// timeout, capped by `transaction.timeout.ms`, runs out before librdkafka gives up on
    /// the topic's metadata) and the cluster confirms the topic does not exist. Otherwise
    /// the same produce is retried until the task timeout, every attempt failing the same
    /// way with a `MessageTimedOut` that never names the topic.
    pub(crate) fn missing_topic(&self, e: &StepError, timeout: Duration) -> Option<String> {
        use RDKafkaErrorCode as C;
        let suspicious = e.step == Step::AwaitAcks
            && matches!(
                e.err.rdkafka_error_code(),
                Some(C::UnknownTopic | C::UnknownTopicOrPartition | C::MessageTimedOut)
            );
        if !suspicious {
            return None;
        }
        let topic = self.inner.context().failed_topic.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let md = self.inner.client().fetch_metadata(Some(&topic), timeout).ok()?;
        let exists = md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
        (!exists).then_some(topic)
    }
}
