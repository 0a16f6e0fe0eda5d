//! Codecs: how typed keys and values become bytes and back.
//!
//! A [`Codec`] is a *value*: the unit structs [`Json`], [`Bincode`] and [`Raw`] cover the
//! common formats and cost nothing to pass, and a codec that needs a client (a schema
//! registry, a key management service, a compression dictionary) is a struct holding it.
//! Record helpers take the codec by reference:
//!
//! ```
//! use kafka_eos::codec::{Bincode, Codec, Json};
//! #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
//! struct Payment { cents: i64 }
//! let bytes = Json.encode(&Payment { cents: 250 }).unwrap();
//! assert_eq!(bytes, br#"{"cents":250}"#);
//! let back: Payment = Json.decode(&bytes).unwrap();
//! assert_eq!(back, Payment { cents: 250 });
//! let compact = Bincode.encode(&Payment { cents: 250 }).unwrap();
//! assert_eq!(compact.len(), 8);
//! ```
//!
//! Which to pick: [`Json`] when other tools read the topic (readable, self-describing, about
//! 2-5x larger); [`Bincode`] between kafka-eos pipelines you own (compact and fast, but the
//! schema lives only in your Rust types: change a field and old records no longer decode);
//! [`Raw`] for bytes you interpret yourself.
//!
//! # Stateful codecs
//! [`Codec`] methods take `&self` and the trait requires `Send + Sync`, so one codec value
//! can be shared (in an `Arc`, or cloned into each partition's processor) and hold what it
//! needs behind its own synchronisation: a schema-registry client with a cache of schema
//! ids behind a `Mutex` is the usual example (the unit test `a_codec_can_hold_a_client`
//! shows one). A codec is called on the partition task's thread, inside the transaction
//! cycle: a blocking network call there stalls the partition, so cache what you fetch.
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
    /// The codec that failed (`"json"`, `"bincode"`, `"raw"`, or a custom codec's name).
    pub codec: &'static str,
    /// What went wrong, from the underlying library.
    pub message: String,
}

impl DecodeError {
    /// A failure of codec `codec`.
    pub fn new(codec: &'static str, message: impl Into<String>) -> DecodeError {
        DecodeError { codec, message: message.into() }
    }
}

/// A wire format for values of type `T`. Implemented by values, so a codec may hold state
/// (see the [module docs](self)).
pub trait Codec<T>: Send + Sync {
    /// Serializes `value`.
    fn encode(&self, value: &T) -> Result<Vec<u8>, DecodeError>;
    /// Deserializes `bytes`.
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError>;
}

impl<T, C: Codec<T> + ?Sized> Codec<T> for &C {
    fn encode(&self, value: &T) -> Result<Vec<u8>, DecodeError> {
        (**self).encode(value)
    }
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        (**self).decode(bytes)
    }
}

impl<T, C: Codec<T> + ?Sized> Codec<T> for std::sync::Arc<C> {
    fn encode(&self, value: &T) -> Result<Vec<u8>, DecodeError> {
        (**self).encode(value)
    }
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        (**self).decode(bytes)
    }
}

/// JSON through `serde_json` (feature `json`, on by default).
#[cfg(feature = "json")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

#[cfg(feature = "json")]
impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(&self, value: &T) -> Result<Vec<u8>, DecodeError> {
        serde_json::to_vec(value).map_err(|e| DecodeError::new("json", e.to_string()))
    }
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        serde_json::from_slice(bytes).map_err(|e| DecodeError::new("json", e.to_string()))
    }
}

/// bincode 1.x (little-endian, fixed-width integers): compact, not self-describing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bincode;

impl<T: Serialize + DeserializeOwned> Codec<T> for Bincode {
    fn encode(&self, value: &T) -> Result<Vec<u8>, DecodeError> {
        bincode::serialize(value).map_err(|e| DecodeError::new("bincode", e.to_string()))
    }
    fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        bincode::deserialize(bytes).map_err(|e| DecodeError::new("bincode", e.to_string()))
    }
}

/// The bytes as they are (`Vec<u8>`), or as UTF-8 text (`String`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Codec<Vec<u8>> for Raw {
    fn encode(&self, value: &Vec<u8>) -> Result<Vec<u8>, DecodeError> {
        Ok(value.clone())
    }
    fn decode(&self, bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
        Ok(bytes.to_vec())
    }
}

impl Codec<String> for Raw {
    fn encode(&self, value: &String) -> Result<Vec<u8>, DecodeError> {
        Ok(value.as_bytes().to_vec())
    }
    fn decode(&self, bytes: &[u8]) -> Result<String, DecodeError> {
        String::from_utf8(bytes.to_vec()).map_err(|e| DecodeError::new("raw", format!("not UTF-8: {e}")))
    }
}

#[cfg(all(test, feature = "json"))]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::record::{InputRecord, OutputRecord, Topic};

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug, Clone)]
    struct Row {
        id: u64,
        name: String,
    }

    #[test]
    fn round_trips_and_reports_garbage() {
        let row = Row { id: 7, name: "a".into() };
        let j = Json.encode(&row).unwrap();
        assert_eq!(Codec::<Row>::decode(&Json, &j).unwrap(), row);
        let b = Bincode.encode(&row).unwrap();
        assert_eq!(Codec::<Row>::decode(&Bincode, &b).unwrap(), row);
        let err = Codec::<Row>::decode(&Json, b"{not json").unwrap_err();
        assert_eq!(err.codec, "json");
        let err = Codec::<Row>::decode(&Bincode, &[1, 2]).unwrap_err();
        assert_eq!(err.codec, "bincode");
        let err = Codec::<String>::decode(&Raw, &[0xff, 0xfe]).unwrap_err();
        assert!(err.to_string().contains("UTF-8"), "{err}");
    }

    /// A stand-in for a schema-registry client: registers a subject's schema once, hands
    /// out ids, counts its round trips.
    #[derive(Default)]
    struct Registry {
        ids: Mutex<HashMap<&'static str, u32>>,
        next: AtomicU32,
        round_trips: AtomicU32,
    }

    impl Registry {
        fn id_of(&self, subject: &'static str) -> u32 {
            *self.ids.lock().unwrap().entry(subject).or_insert_with(|| {
                self.round_trips.fetch_add(1, Ordering::SeqCst);
                self.next.fetch_add(1, Ordering::SeqCst) + 1
            })
        }
        fn knows(&self, id: u32) -> bool {
            self.ids.lock().unwrap().values().any(|v| *v == id)
        }
    }

    /// Confluent-style framing: magic byte 0, a 4-byte schema id, then JSON.
    struct RegistryJson {
        subject: &'static str,
        registry: Arc<Registry>,
    }

    impl<T: Serialize + DeserializeOwned> Codec<T> for RegistryJson {
        fn encode(&self, value: &T) -> Result<Vec<u8>, DecodeError> {
            let mut out = vec![0];
            out.extend_from_slice(&self.registry.id_of(self.subject).to_be_bytes());
            out.extend(Json.encode(value)?);
            Ok(out)
        }
        fn decode(&self, bytes: &[u8]) -> Result<T, DecodeError> {
            let [0, a, b, c, d, rest @ ..] = bytes else {
                return Err(DecodeError::new("registry-json", "no schema-id header"));
            };
            let id = u32::from_be_bytes([*a, *b, *c, *d]);
            if !self.registry.knows(id) {
                return Err(DecodeError::new("registry-json", format!("unknown schema id {id}")));
            }
            Json.decode(rest)
        }
    }

    #[test]
    fn a_codec_can_hold_a_client() {
        let registry = Arc::new(Registry::default());
        let codec = RegistryJson { subject: "rows-value", registry: registry.clone() };
        let topic = Topic::new("rows");
        let row = Row { id: 1, name: "x".into() };
        let out = OutputRecord::to(&topic).encode_value(&codec, &row).unwrap();
        let again = OutputRecord::to(&topic).encode_value(&codec, &row).unwrap();
        assert_eq!(registry.round_trips.load(Ordering::SeqCst), 1, "the schema id is cached");
        assert_eq!(out.value.as_deref().map(|v| &v[..5]), Some(&[0, 0, 0, 0, 1][..]));
        let input = InputRecord { value: again.value, ..InputRecord::test("rows", 0, 0) };
        let back: Row = input.value_as(&codec).unwrap();
        assert_eq!(back, row);
        let stranger = InputRecord { value: Some(vec![0, 0, 0, 0, 9, b'{', b'}']), ..input };
        let err = stranger.value_as::<Row>(&codec).unwrap_err();
        assert!(err.to_string().contains("unknown schema id 9"), "{err}");
        // Shared by reference or through an Arc, as a processor holding it would.
        let shared: Arc<dyn Codec<Row>> = Arc::new(codec);
        assert_eq!(shared.decode(&shared.encode(&row).unwrap()).unwrap(), row);
    }
}
