//! What a producer's delivery reports tell once a cycle's acknowledgements are in: the last
//! offset each changelog partition got, an output topic found missing, and the ACL a
//! refused step asks for.

use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::Producer;

use super::{DeliveryTracker, Step, StepError, TxnProducer};
use crate::acl::{denied, Operation};
use crate::config::PipelineConfig;
use crate::error::ErrorClass;

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

    /// A failed step of this producer's as the error that stops the pipeline (`who`: its
    /// transactional id or role); a refusal ([`ErrorClass::NotAuthorized`]) names its ACL.
    pub(crate) fn failure(&self, e: StepError, cfg: &PipelineConfig, who: &str) -> crate::Error {
        if e.class != ErrorClass::NotAuthorized {
            return e.into_error(who);
        }
        let during = format!("{} for {who}", e.step.as_str());
        let (topic, operation) = self.refused_topic(&e, cfg);
        let source = crate::error::KafkaError::with_class(e.err.clone(), e.class);
        let code = crate::error::refusal_code(&e.err).unwrap_or(RDKafkaErrorCode::TopicAuthorizationFailed);
        let acl = denied::wanted(cfg, code, &topic, operation);
        denied::not_authorized(&cfg.producer_properties, &cfg.bootstrap_servers, acl, during, Some(source))
    }

    /// The topic a refused step was about, and the operation it needed there: a refused
    /// delivery's, its topic; the offsets' (`TxnOffsetCommit` reads the input topics'
    /// offsets), an input topic; else (a partition refused to the transaction, which fails
    /// every record queued, or a transaction's end refused for such a produce's sake) the
    /// first topic the pipeline writes that the brokers say this principal may not write.
    fn refused_topic(&self, e: &StepError, cfg: &PipelineConfig) -> (String, Operation) {
        // A delivery refused itself (not purged for the transaction's sake) names its topic.
        if matches!(e.err, rdkafka::error::KafkaError::MessageProduction(_)) {
            let failed = self.inner.context().failed_topic.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(topic) = failed {
                return (topic, Operation::Write);
            }
        }
        let uses: Vec<(String, Operation)> = if e.step == Step::SendOffsets {
            cfg.input_topics.iter().map(|t| (t.clone(), Operation::Read)).collect()
        } else {
            let changelogs = DeliveryTracker::changelogs_of(cfg);
            let dead_letter = match &cfg.processor_error_policy.then {
                crate::config::Exhausted::DeadLetter(t) => Some(t.clone()),
                _ => None,
            };
            let written = cfg.output_topics.iter().cloned().chain(changelogs).chain(dead_letter);
            written.map(|t| (t, Operation::Write)).collect()
        };
        let unnamed = || ("<a topic it writes>".to_string(), Operation::Write);
        denied::locate(self.inner.client(), &uses, self.call_timeout).unwrap_or_else(unnamed)
    }
}
