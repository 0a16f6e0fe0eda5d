//! The versioned encoding of stored keys and values (what the changelog holds).
//!
//! ```text
//!   key   = [FORMAT] ++ bincode(key)
//!   value = [FORMAT, schema version] ++ bincode(value)        (a delete is a tombstone)
//! ```
//! - [`FORMAT`] names the framing and the codec (bincode 1.x, framing version 1). A later
//!   encoding gets another byte, so records of both can be told apart on restore.
//! - The *schema version* is the store's own ([`StoreSpec::version`](super::StoreSpec::version),
//!   default 1): bump it when the value type changes, and register how to read the older
//!   versions ([`StoreSpec::migrate_from`](super::StoreSpec::migrate_from)).
//! - Keys carry no schema version on purpose: a key's bytes are its identity in the
//!   backend and in the compacted changelog, so they must not change when the value type
//!   does. Changing the *key* type means a new store (another name).
//! - Records written before versioning (raw bincode, no header) are schema version 0: they
//!   restore only through a migration from version 0. The tell is the first byte, so a
//!   legacy record whose bincode happens to start with [`FORMAT`] is taken for a versioned
//!   one (and then fails to decode, with the same error and the same fixes).
//!
//! On restore every record is checked (and its key and value decoded) against the
//! declared types: an incompatible store fails the partition's restore at once with
//! [`StateError::Incompatible`](super::StateError::Incompatible), naming the store, the
//! record and the fixes, instead of failing at some later `get`.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The first byte of every stored key and value: bincode 1.x, framing version 1.
pub const FORMAT: u8 = 0xB1;

/// The schema version of records written before state was versioned (no header).
pub const UNVERSIONED: u8 = 0;

/// `[FORMAT] ++ bincode(key)`.
pub(crate) fn encode_key<K: Serialize + ?Sized>(key: &K) -> bincode::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(1 + bincode::serialized_size(key)? as usize);
    out.push(FORMAT);
    bincode::serialize_into(&mut out, key)?;
    Ok(out)
}

/// `[FORMAT, version] ++ bincode(value)`.
pub(crate) fn encode_value<V: Serialize + ?Sized>(version: u8, value: &V) -> bincode::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(2 + bincode::serialized_size(value)? as usize);
    out.extend_from_slice(&[FORMAT, version]);
    bincode::serialize_into(&mut out, value)?;
    Ok(out)
}

/// Why a stored record cannot be read as the declared types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// No header: written before state was versioned.
    Unversioned,
    /// A value of a schema version that is neither current nor migrated.
    UnknownVersion(u8),
    /// The header is right, the bytes do not decode as the declared type.
    Undecodable(String),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Unversioned => f.write_str(
                "the record has no format header: it was written before kafka-eos versioned its state \
                 (schema version 0)",
            ),
            Mismatch::UnknownVersion(v) => {
                write!(f, "the value has schema version {v}, which the store neither is at nor migrates from")
            }
            Mismatch::Undecodable(e) => f.write_str(e),
        }
    }
}

/// Decodes a key (with its header).
pub(crate) fn decode_key<K: DeserializeOwned>(bytes: &[u8]) -> Result<K, Mismatch> {
    match bytes.split_first() {
        Some((&FORMAT, rest)) => bincode::deserialize(rest).map_err(|e| {
            Mismatch::Undecodable(format!("the key does not decode as {}: {e}", std::any::type_name::<K>()))
        }),
        _ => Err(Mismatch::Unversioned),
    }
}

/// Decodes a value of schema `version` (with its header).
pub(crate) fn decode_value<V: DeserializeOwned>(version: u8, bytes: &[u8]) -> Result<V, Mismatch> {
    match bytes {
        [FORMAT, v, rest @ ..] if *v == version => bincode::deserialize(rest).map_err(|e| {
            Mismatch::Undecodable(format!(
                "the value does not decode as {} (schema version {v}): {e}",
                std::any::type_name::<V>()
            ))
        }),
        [FORMAT, v, ..] => Err(Mismatch::UnknownVersion(*v)),
        _ => Err(Mismatch::Unversioned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_carry_their_header() {
        assert_eq!(encode_key(&7u32).unwrap(), vec![FORMAT, 7, 0, 0, 0]);
        assert_eq!(encode_value(3, &1u8).unwrap(), vec![FORMAT, 3, 1]);
        assert_eq!(decode_key::<u32>(&encode_key(&7u32).unwrap()), Ok(7));
        assert_eq!(decode_value::<u8>(3, &[FORMAT, 3, 1]), Ok(1));
        assert_eq!(decode_value::<u8>(3, &[FORMAT, 2, 1]), Err(Mismatch::UnknownVersion(2)));
        assert_eq!(decode_value::<u8>(3, &bincode::serialize(&9u64).unwrap()), Err(Mismatch::Unversioned));
        assert!(matches!(decode_value::<u64>(3, &[FORMAT, 3, 1]), Err(Mismatch::Undecodable(m)) if m.contains("u64")));
    }
}
