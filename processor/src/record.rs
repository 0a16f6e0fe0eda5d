//! Records: what a processor receives and what it returns.
//!
//! An [`InputRecord`] is an owned copy of one consumed Kafka record. The runtime keeps the
//! records of the open transaction so that, after an abort, it can replay them without
//! seeking the consumer (the replay starts exactly at the last committed offset, which is
//! what a rewind would do). An [`OutputRecord`] names its topic and, optionally, its
//! partition; without one, Kafka's default partitioner picks by key.

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
    /// Topic it was read from.
    pub topic: String,
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
    /// An owned copy of a message as rdkafka delivers it (for readers outside the runtime,
    /// such as the test kit's).
    pub fn from_message(m: &BorrowedMessage<'_>) -> InputRecord {
        let headers = m
            .headers()
            .map(|hs| hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect())
            .unwrap_or_default();
        InputRecord {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
        }
    }

    /// Decodes the key with codec `C`; a missing key is an error.
    pub fn key_as<C: Codec<T>, T>(&self) -> Result<T, DecodeError> {
        C::decode(self.key.as_deref().ok_or_else(|| missing("key"))?)
    }

    /// Decodes the value with codec `C`; a tombstone (no value) is an error.
    pub fn value_as<C: Codec<T>, T>(&self) -> Result<T, DecodeError> {
        C::decode(self.value.as_deref().ok_or_else(|| missing("value"))?)
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

/// One record a processor wants written, built fluently:
///
/// ```
/// use kafka_eos::{codec::Json, OutputRecord};
/// let out = OutputRecord::to("totals")
///     .key("merchant-7")
///     .encode_value::<Json, _>(&42u64).unwrap()
///     .header("source", "demo");
/// assert_eq!(out.value.as_deref(), Some(&b"42"[..]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRecord {
    /// Destination topic.
    pub topic: String,
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
    /// An empty record for `topic` (no key, tombstone value until one is set).
    pub fn to(topic: impl Into<String>) -> OutputRecord {
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

    /// Encodes and sets the key with codec `C`.
    pub fn encode_key<C: Codec<T>, T>(mut self, key: &T) -> Result<Self, DecodeError> {
        self.key = Some(C::encode(key)?);
        Ok(self)
    }

    /// Encodes and sets the value with codec `C`.
    pub fn encode_value<C: Codec<T>, T>(mut self, value: &T) -> Result<Self, DecodeError> {
        self.value = Some(C::encode(value)?);
        Ok(self)
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
        let r = InputRecord {
            topic: "orders.v1-eu".into(),
            partition: 3,
            offset: 12345,
            timestamp: None,
            key: None,
            value: None,
            headers: vec![],
        };
        assert_eq!(parse_origin(r.origin().as_bytes()), Some(("orders.v1-eu".into(), 3, 12345)));
        assert_eq!(parse_origin(b"garbage"), None);
        assert_eq!(parse_origin(b"t/x/1"), None);
    }
}
