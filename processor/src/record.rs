//! Records: what a processor receives and what it returns.
//!
//! An [`InputRecord`] is an owned copy of one consumed Kafka record. The runtime keeps the
//! records of the open transaction so that, after an abort, it can replay them without
//! seeking the consumer (the replay starts exactly at the last committed offset, which is
//! what a rewind would do). An [`OutputRecord`] names its topic and, optionally, its
//! partition; without one, Kafka's default partitioner picks by key.
//!
//! Topic names are [`Topic`]s: a shared name (`Arc<str>`) cloned into every record for the
//! price of a reference count. Output topics are declared once with
//! [`PipelineBuilder::output_topic`](crate::PipelineBuilder::output_topic), so producing
//! allocates no topic name per record; an input record's [`topic`](InputRecord::topic) is
//! the runtime's one `Topic` per input topic, so consuming allocates none either.

use std::sync::Arc;

use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::codec::{Codec, DecodeError};

/// The header every output record carries, by default, naming the input record it came
/// from as `topic/partition/offset`. The verifier (`kafka_eos_testkit::verify`) joins on it to prove
/// exactly-once 1:1; turn it off with
/// [`PipelineBuilder::origin_header`](crate::PipelineBuilder::origin_header).
pub const ORIGIN_HEADER: &str = "kafka-eos.origin";

/// A Kafka record header: a name and an optional value.
pub type Header = (String, Option<Vec<u8>>);

/// One consumed record, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRecord {
    /// Topic it was read from. A [`Topic`] (a shared `Arc<str>`), not a `String`: the
    /// runtime hands every record of an input topic the same name, so consuming allocates no
    /// topic name per record. It reads like a `&str` (`&*rec.topic`, `rec.topic.as_str()`,
    /// `rec.topic == "orders"`).
    pub topic: Topic,
    /// Partition it was read from.
    pub partition: i32,
    /// Its offset in that partition.
    pub offset: i64,
    /// Its timestamp in milliseconds since the epoch (create or log-append time), if any.
    pub timestamp: Option<i64>,
    /// Key bytes, if any.
    pub key: Option<Vec<u8>>,
    /// Value bytes; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers in their order on the wire.
    pub headers: Vec<Header>,
}

impl InputRecord {
    /// An owned copy of a message as rdkafka delivers it, for readers outside the runtime
    /// such as the test kit's (feature `test-hooks`, outside semver: rdkafka's type).
    /// Allocates the topic name; the runtime reuses one [`Topic`] per input topic instead.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn from_message(m: &BorrowedMessage<'_>) -> InputRecord {
        InputRecord::from_message_in(m, Topic::new(m.topic()))
    }

    /// An owned copy of message `m`, with the message's topic already made: `topic` must
    /// name `m.topic()`.
    pub(crate) fn from_message_in(m: &BorrowedMessage<'_>, topic: Topic) -> InputRecord {
        debug_assert_eq!(topic, m.topic());
        let headers = m
            .headers()
            .map(|hs| hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect())
            .unwrap_or_default();
        InputRecord {
            topic,
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
        }
    }

    /// Decodes the key with `codec` (e.g. `rec.key_as::<Order>(&Json)`); a missing key is
    /// an error.
    pub fn key_as<T>(&self, codec: &impl Codec<T>) -> Result<T, DecodeError> {
        codec.decode(self.key.as_deref().ok_or_else(|| missing("key"))?)
    }

    /// Decodes the value with `codec` (e.g. `rec.value_as::<Order>(&Json)`); a tombstone
    /// (no value) is an error.
    pub fn value_as<T>(&self, codec: &impl Codec<T>) -> Result<T, DecodeError> {
        codec.decode(self.value.as_deref().ok_or_else(|| missing("value"))?)
    }

    /// A record of `topic`/`partition`/`offset` with no key, value, timestamp or headers:
    /// for tests and examples (`InputRecord { value: .., ..InputRecord::test("t", 0, 0) }`).
    pub fn test(topic: &str, partition: i32, offset: i64) -> InputRecord {
        InputRecord {
            topic: Topic::new(topic),
            partition,
            offset,
            timestamp: None,
            key: None,
            value: None,
            headers: Vec::new(),
        }
    }

    /// The first header with this name, if present and non-null.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.as_deref())
    }

    /// `topic/partition/offset`, the value of [`ORIGIN_HEADER`].
    pub fn origin(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.offset)
    }
}

fn missing(what: &str) -> DecodeError {
    DecodeError { codec: "record", message: format!("record has no {what}") }
}

/// Parses an [`ORIGIN_HEADER`] value back into `(topic, partition, offset)`.
pub fn parse_origin(value: &[u8]) -> Option<(String, i32, i64)> {
    let s = std::str::from_utf8(value).ok()?;
    let mut it = s.rsplitn(3, '/');
    let offset = it.next()?.parse().ok()?;
    let partition = it.next()?.parse().ok()?;
    let topic = it.next()?.to_string();
    Some((topic, partition, offset))
}

/// The name of a topic records are read from or written to: cheap to clone (a shared
/// `Arc<str>`).
///
/// It compares, hashes and orders like its `str` (and borrows as one), so a map keyed by
/// `Topic` is looked up with a `&str`:
///
/// ```
/// use std::collections::HashMap;
/// use kafka_eos::{InputRecord, Topic};
/// let rec = InputRecord::test("orders", 0, 7);
/// assert_eq!(rec.topic, "orders");
/// assert_eq!(rec.topic.as_str(), "orders");
/// let mut seen: HashMap<Topic, u64> = HashMap::new();
/// *seen.entry(rec.topic.clone()).or_default() += 1; // a reference count, no allocation
/// assert_eq!(seen.get("orders"), Some(&1));
/// ```
///
/// Declare the pipeline's fixed output topics with
/// [`PipelineBuilder::output_topic`](crate::PipelineBuilder::output_topic), which lists them
/// in [`PipelineConfig::output_topics`](crate::PipelineConfig::output_topics) (checked at
/// start-up). A topic chosen per record (routing by content) may be made with
/// [`Topic::new`] or from a `&str`/`String`: that allocates once per conversion, so keep
/// such topics in the processor rather than converting per record.
// The derived `Hash`, `Eq` and `Ord` are those of the `str` (`Arc<str>` delegates to it),
// as `Borrow<str>` requires.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic(Arc<str>);

impl Topic {
    /// A topic named `name`.
    pub fn new(name: impl AsRef<str>) -> Topic {
        Topic(Arc::from(name.as_ref()))
    }

    /// The topic's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Topic {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&Topic> for Topic {
    fn from(t: &Topic) -> Topic {
        t.clone()
    }
}

impl From<&str> for Topic {
    fn from(s: &str) -> Topic {
        Topic::new(s)
    }
}

impl From<String> for Topic {
    fn from(s: String) -> Topic {
        Topic(Arc::from(s))
    }
}

impl From<&String> for Topic {
    fn from(s: &String) -> Topic {
        Topic::new(s)
    }
}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Topic {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Topic> for str {
    fn eq(&self, other: &Topic) -> bool {
        self == &*other.0
    }
}

impl PartialEq<Topic> for &str {
    fn eq(&self, other: &Topic) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<Topic> for String {
    fn eq(&self, other: &Topic) -> bool {
        **self == *other.0
    }
}

impl From<Topic> for String {
    fn from(t: Topic) -> String {
        t.0.to_string()
    }
}

/// One record a processor wants written, built fluently and handed to
/// [`Context::emit`](crate::Context::emit):
///
/// ```
/// use kafka_eos::{codec::Json, OutputRecord, Topic};
/// let totals = Topic::new("totals"); // in a pipeline: builder.output_topic("totals")
/// let out = OutputRecord::to(&totals)
///     .key("merchant-7")
///     .encode_value(&Json, &42u64).unwrap()
///     .header("source", "demo");
/// assert_eq!(out.value.as_deref(), Some(&b"42"[..]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRecord {
    /// Destination topic.
    pub topic: Topic,
    /// Destination partition; `None` lets the producer's partitioner choose by key.
    pub partition: Option<i32>,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes; `None` writes a tombstone.
    pub value: Option<Vec<u8>>,
    /// Timestamp in ms since the epoch; `None` lets the producer stamp it.
    pub timestamp: Option<i64>,
    /// Headers.
    pub headers: Vec<Header>,
}

impl OutputRecord {
    /// An empty record for `topic` (no key, tombstone value until one is set). Pass a
    /// `&Topic` (no allocation); a `&str` allocates the name.
    pub fn to(topic: impl Into<Topic>) -> OutputRecord {
        OutputRecord {
            topic: topic.into(),
            partition: None,
            key: None,
            value: None,
            timestamp: None,
            headers: Vec::new(),
        }
    }

    /// Sets the key bytes.
    pub fn key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.key = Some(key.as_ref().to_vec());
        self
    }

    /// Sets the value bytes.
    pub fn value(mut self, value: impl AsRef<[u8]>) -> Self {
        self.value = Some(value.as_ref().to_vec());
        self
    }

    /// Encodes and sets the key with `codec`.
    pub fn encode_key<T>(mut self, codec: &impl Codec<T>, key: &T) -> Result<Self, DecodeError> {
        self.key = Some(codec.encode(key)?);
        Ok(self)
    }

    /// Encodes and sets the value with `codec`.
    pub fn encode_value<T>(mut self, codec: &impl Codec<T>, value: &T) -> Result<Self, DecodeError> {
        self.value = Some(codec.encode(value)?);
        Ok(self)
    }

    /// A copy of `input` for `topic`: its key, value, timestamp and headers, unchanged (the
    /// runtime's own [`ORIGIN_HEADER`] excepted: it is written afresh). The partition is
    /// left to the partitioner; pin it with [`partition`](Self::partition) to keep the
    /// input's partitioning.
    pub fn copy_of(input: &InputRecord, topic: impl Into<Topic>) -> OutputRecord {
        OutputRecord {
            topic: topic.into(),
            partition: None,
            key: input.key.clone(),
            value: input.value.clone(),
            timestamp: input.timestamp,
            headers: input.headers.iter().filter(|(k, _)| k != ORIGIN_HEADER).cloned().collect(),
        }
    }

    /// Pins the destination partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Sets the timestamp (ms since the epoch).
    pub fn timestamp(mut self, ts_ms: i64) -> Self {
        self.timestamp = Some(ts_ms);
        self
    }

    /// Appends a header.
    pub fn header(mut self, name: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        self.headers.push((name.into(), Some(value.as_ref().to_vec())));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_round_trips_with_dashes_and_dots() {
        let r = InputRecord::test("orders.v1-eu", 3, 12345);
        assert_eq!(parse_origin(r.origin().as_bytes()), Some(("orders.v1-eu".into(), 3, 12345)));
        assert_eq!(parse_origin(b"garbage"), None);
        assert_eq!(parse_origin(b"t/x/1"), None);
    }

    #[test]
    fn copies_keep_everything_but_the_old_origin() {
        let input = InputRecord {
            key: Some(b"k".to_vec()),
            value: Some(b"v".to_vec()),
            timestamp: Some(7),
            headers: vec![("h".into(), Some(b"1".to_vec())), (ORIGIN_HEADER.into(), Some(b"x/0/1".to_vec()))],
            ..InputRecord::test("in", 0, 1)
        };
        let topic = Topic::new("out");
        let out = OutputRecord::copy_of(&input, &topic);
        assert_eq!((out.key, out.value, out.timestamp), (input.key.clone(), input.value.clone(), Some(7)));
        assert_eq!(out.headers, vec![("h".to_string(), Some(b"1".to_vec()))]);
        assert!(Arc::ptr_eq(&out.topic.0, &topic.0), "no new topic name per record");
    }

    #[test]
    fn topics_hash_compare_and_order_like_their_str() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let t = Topic::new("orders.v1");
        assert_eq!(hasher.hash_one(&t), hasher.hash_one("orders.v1"));
        assert_eq!(hasher.hash_one((t.clone(), 3)), hasher.hash_one(("orders.v1", 3)));
        let name = String::from("orders.v1");
        assert_eq!(t, "orders.v1");
        assert_eq!("orders.v1", t);
        assert_eq!(t, name);
        assert_eq!(name, t);
        assert_eq!(*"orders.v1", t);
        assert!(Topic::new("a") < Topic::new("b") && Topic::new("a").cmp(&Topic::new("ab")) == "a".cmp("ab"));
        let set: std::collections::HashSet<Topic> = [t.clone()].into();
        assert!(set.contains("orders.v1") && !set.contains("orders"));
        assert_eq!(String::from(t), "orders.v1");
    }
}
