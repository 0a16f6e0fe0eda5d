//! What a test pipes in ([`TestInput`]) and reads out ([`TestRecord`]).

use kafka_eos::codec::{Codec, DecodeError};
use kafka_eos::record::Header;

/// An input record to pipe into the driver: partition (default 0), key, value, headers,
/// timestamp (default: the driver's clock). Its offset is the partition's next.
///
/// ```
/// use kafka_eos::codec::Json;
/// use kafka_eos_testkit::driver::TestInput;
/// let input = TestInput::new().partition(1).key("merchant-7").encode_value(&Json, &42u32)?.timestamp(1_000);
/// # Ok::<(), kafka_eos::codec::DecodeError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestInput {
    pub(crate) partition: i32,
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<Header>,
    pub(crate) timestamp: Option<i64>,
}

impl TestInput {
    /// A record for partition 0 with no key, value, headers or timestamp.
    pub fn new() -> TestInput {
        TestInput::default()
    }

    /// The input partition (its processor instance and its state).
    pub fn partition(mut self, partition: i32) -> TestInput {
        self.partition = partition;
        self
    }

    /// The key's bytes.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> TestInput {
        self.key = Some(key.into());
        self
    }

    /// The value's bytes (no value: a tombstone).
    pub fn value(mut self, value: impl Into<Vec<u8>>) -> TestInput {
        self.value = Some(value.into());
        self
    }

    /// The key, encoded with `codec`.
    pub fn encode_key<T>(self, codec: &impl Codec<T>, key: &T) -> Result<TestInput, DecodeError> {
        Ok(self.key(codec.encode(key)?))
    }

    /// The value, encoded with `codec`.
    pub fn encode_value<T>(self, codec: &impl Codec<T>, value: &T) -> Result<TestInput, DecodeError> {
        Ok(self.value(codec.encode(value)?))
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> TestInput {
        self.headers.push((name.into(), Some(value.into())));
        self
    }

    /// The record's timestamp, ms since the epoch (default: the driver's clock when piped).
    pub fn timestamp(mut self, ms: i64) -> TestInput {
        self.timestamp = Some(ms);
        self
    }
}

/// A committed output record, as a `read_committed` consumer would read it — plus the input
/// record it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRecord {
    /// Its topic.
    pub topic: String,
    /// The partition the processor chose, if any (without one, a real producer picks by key).
    pub partition: Option<i32>,
    /// Key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers, the `kafka-eos.origin` header included unless the pipeline turned it off.
    pub headers: Vec<Header>,
    /// The timestamp the processor set (a real producer stamps `None` with the send time).
    pub timestamp: Option<i64>,
    /// The input record's partition and offset.
    pub input: (i32, i64),
}

impl TestRecord {
    /// The key, decoded with `codec`.
    pub fn key_as<T>(&self, codec: &impl Codec<T>) -> Result<T, DecodeError> {
        codec.decode(self.key.as_deref().ok_or_else(|| DecodeError::new("record", "record has no key"))?)
    }

    /// The value, decoded with `codec`.
    pub fn value_as<T>(&self, codec: &impl Codec<T>) -> Result<T, DecodeError> {
        codec.decode(self.value.as_deref().ok_or_else(|| DecodeError::new("record", "record has no value"))?)
    }

    /// The key as UTF-8 text (lossy), for assertions.
    pub fn key_str(&self) -> Option<String> {
        self.key.as_deref().map(|k| String::from_utf8_lossy(k).into_owned())
    }

    /// The first header named `name`, if present and non-null.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.as_deref())
    }
}
