//! [`OutputRecord`]: one record a processor wants written.

use super::header::{Header, ORIGIN_HEADER};
use super::input::InputRecord;
use super::topic::Topic;
use crate::codec::{Codec, DecodeError};

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
