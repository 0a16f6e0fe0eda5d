//! Codecs: how typed keys and values become bytes and back.
//!
//! Kafka stores bytes; processors usually want types. A [`Codec`] is a zero-sized marker
//! type naming a wire format, so the format is chosen at the call site and checked at
//! compile time:
//!
//! ```
//! use kafka_eos::codec::{Bincode, Codec, Json};
//! #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
//! struct Payment { cents: i64 }
//! let bytes = Json::encode(&Payment { cents: 250 }).unwrap();
//! assert_eq!(bytes, br#"{"cents":250}"#);
//! let back: Payment = Json::decode(&bytes).unwrap();
//! assert_eq!(back, Payment { cents: 250 });
//! let compact = Bincode::encode(&Payment { cents: 250 }).unwrap();
//! assert_eq!(compact.len(), 8);
//! ```
//!
//! Which to pick: [`Json`] when other tools read the topic (readable, self-describing, about
//! 2-5x larger); [`Bincode`] between kafka-eos pipelines you own (compact and fast, but the
//! schema lives only in your Rust types: change a field and old records no longer decode);
//! [`Raw`] for bytes you interpret yourself.
//!
//! A record that fails to decode is a [`DecodeError`]; returned from a processor it is a
//! processor error and follows the pipeline's
//! [`ProcessorErrorPolicy`](crate::ProcessorErrorPolicy) (retry, dead-letter, or stop) —
//! it is never silently dropped.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A bytes <-> value failure, naming the codec and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{codec} codec: {message}")]
pub struct DecodeError {
    /// The codec that failed (`"json"`, `"bincode"`, `"raw"`).
    pub codec: &'static str,
    /// What went wrong, from the underlying library.
    pub message: String,
}

/// A wire format for values of type `T`.
pub trait Codec<T> {
    /// Serializes `value`.
    fn encode(value: &T) -> Result<Vec<u8>, DecodeError>;
    /// Deserializes `bytes`.
    fn decode(bytes: &[u8]) -> Result<T, DecodeError>;
}

/// JSON through `serde_json` (feature `json`, on by default).
#[cfg(feature = "json")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

#[cfg(feature = "json")]
impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(value: &T) -> Result<Vec<u8>, DecodeError> {
        serde_json::to_vec(value).map_err(|e| DecodeError { codec: "json", message: e.to_string() })
    }
    fn decode(bytes: &[u8]) -> Result<T, DecodeError> {
        serde_json::from_slice(bytes).map_err(|e| DecodeError { codec: "json", message: e.to_string() })
    }
}

/// bincode 1.x (little-endian, fixed-width integers): compact, not self-describing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bincode;

impl<T: Serialize + DeserializeOwned> Codec<T> for Bincode {
    fn encode(value: &T) -> Result<Vec<u8>, DecodeError> {
        bincode::serialize(value).map_err(|e| DecodeError { codec: "bincode", message: e.to_string() })
    }
    fn decode(bytes: &[u8]) -> Result<T, DecodeError> {
        bincode::deserialize(bytes).map_err(|e| DecodeError { codec: "bincode", message: e.to_string() })
    }
}

/// The bytes as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Codec<Vec<u8>> for Raw {
    fn encode(value: &Vec<u8>) -> Result<Vec<u8>, DecodeError> {
        Ok(value.clone())
    }
    fn decode(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
        Ok(bytes.to_vec())
    }
}

impl Codec<String> for Raw {
    fn encode(value: &String) -> Result<Vec<u8>, DecodeError> {
        Ok(value.as_bytes().to_vec())
    }
    fn decode(bytes: &[u8]) -> Result<String, DecodeError> {
        String::from_utf8(bytes.to_vec()).map_err(|e| DecodeError { codec: "raw", message: format!("not UTF-8: {e}") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Row {
        id: u64,
        name: String,
    }

    #[test]
    fn round_trips_and_reports_garbage() {
        let row = Row { id: 7, name: "a".into() };
        let j = Json::encode(&row).unwrap();
        assert_eq!(<Json as Codec<Row>>::decode(&j).unwrap(), row);
        let b = Bincode::encode(&row).unwrap();
        assert_eq!(<Bincode as Codec<Row>>::decode(&b).unwrap(), row);
        let err = <Json as Codec<Row>>::decode(b"{not json").unwrap_err();
        assert_eq!(err.codec, "json");
        let err = <Bincode as Codec<Row>>::decode(&[1, 2]).unwrap_err();
        assert_eq!(err.codec, "bincode");
        let err = <Raw as Codec<String>>::decode(&[0xff, 0xfe]).unwrap_err();
        assert!(err.to_string().contains("UTF-8"), "{err}");
    }
}
