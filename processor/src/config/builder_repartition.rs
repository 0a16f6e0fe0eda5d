//! The builder's repartition topics: re-keying a stream and processing it by its new key in
//! the same application ([`PipelineBuilder::repartition`]).

use super::PipelineBuilder;
use crate::record::Topic;

impl PipelineBuilder {
    /// Declares a repartition topic, `<application-id>-<name>-repartition`, and returns its
    /// handle: the way to process a stream by another key than its input's (a per-merchant
    /// total over a card-keyed stream). The processor sends re-keyed records to it
    /// ([`OutputRecord::to`](crate::OutputRecord::to)), and receives them back as input
    /// records of that topic, each on the partition of its new key (murmur2 over the key
    /// bytes, as the Java client places keys; a record without a key as the empty key),
    /// where the partition's stores hold the state of that key:
    ///
    /// ```no_run
    /// # use kafka_eos::{Pipeline, OutputRecord};
    /// let mut builder = Pipeline::builder().application_id("velocity").input_topic("payments");
    /// let by_merchant = builder.repartition("by-merchant");
    /// let totals = builder.store::<String, u64>("merchant-totals");
    /// let builder = builder.processor(move |ctx, record| {
    ///     if record.topic == by_merchant {
    ///         // Downstream: keyed by merchant, every record of a merchant on one partition.
    ///         let merchant = String::from_utf8(record.key.clone().unwrap_or_default())?;
    ///         let total = ctx.store(&totals).get(&merchant)?.unwrap_or(0) + 1;
    ///         ctx.store(&totals).put(&merchant, &total)?;
    ///     } else {
    ///         // Upstream: keyed by card; the merchant is in the value.
    ///         let merchant = record.value.clone().unwrap_or_default();
    ///         ctx.emit(OutputRecord::to(&by_merchant).key(merchant).value("1"));
    ///     }
    ///     Ok(())
    /// });
    /// ```
    ///
    /// The pipeline creates the topic at start-up with as many partitions as its (first)
    /// input topic and the changelogs' replication, and refuses one that exists with
    /// another count. It reads it as one more input, co-partitioned with the others: its
    /// partition *n* belongs to the task of input partition *n*, and a stateful pipeline
    /// needs the range assignor ([`Rebalancing::Eager`](crate::Rebalancing::Eager)), as with
    /// several inputs. Exactly-once end to end: a record is written to the topic in its
    /// input batch's transaction, read read_committed, and its own offset is committed in
    /// the transaction of the batch that processed it. Records are never purged from the
    /// topic: give it a retention (`retention.ms`) with the Kafka tools.
    ///
    /// Call it after [`application_id`](Self::application_id), which names the topic; the
    /// build fails otherwise. Declaring the same name twice returns the same topic.
    pub fn repartition(&mut self, name: impl AsRef<str>) -> Topic {
        let name = name.as_ref();
        if let Some((_, _, t)) = self.repartitions.iter().find(|(n, _, _)| n == name) {
            return t.clone();
        }
        let app = self.application_id.clone();
        let topic = Topic::new(repartition_topic(app.as_deref().unwrap_or_default(), name));
        self.repartitions.push((name.to_string(), app, topic.clone()));
        topic
    }

    /// The repartition topics, checked against the final application id: each is added to
    /// the inputs and the outputs.
    pub(super) fn take_repartitions(&mut self, application_id: &str) -> Result<Vec<String>, String> {
        let mut topics = Vec::new();
        for (name, app, topic) in std::mem::take(&mut self.repartitions) {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
                return Err(format!(
                    "repartition name {name:?} must be non-empty and use only letters, digits, '.', '_' and '-' (it names a topic)"
                ));
            }
            if app.as_deref() != Some(application_id) {
                return Err(format!(
                    "repartition({name:?}) was declared before application_id (or the id changed after it): its topic is \
                     named after the application id, so call application_id first"
                ));
            }
            if self.input_topics.iter().any(|t| t == topic.as_str()) {
                return Err(format!(
                    "repartition topic {topic} is also declared as an input topic: declare it once, with repartition"
                ));
            }
            if !self.output_topics.contains(&topic) {
                self.output_topics.push(topic.clone());
            }
            topics.push(topic.to_string());
        }
        self.input_topics.extend(topics.iter().cloned());
        Ok(topics)
    }
}

/// The repartition topic `name` of application `application_id`.
pub(crate) fn repartition_topic(application_id: &str, name: &str) -> String {
    format!("{application_id}-{name}-repartition")
}
