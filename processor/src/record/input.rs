//! [`InputRecord`]: one consumed record, owned.

use rdkafka::message::{BorrowedMessage, Headers, Message};

use super::header::Header;
use super::topic::Topic;
use crate::codec::{Codec, DecodeError};

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

    /// `topic/partition/offset`, the value of [`ORIGIN_HEADER`](super::header::ORIGIN_HEADER).
    pub fn origin(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.offset)
    }
}

fn missing(what: &str) -> DecodeError {
    DecodeError { codec: "record", message: format!("record has no {what}") }
}
