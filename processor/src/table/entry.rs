//! One table row as kept in memory (decoded, or why it could not be), and the lookup of a
//! key among rows: shared by co-partitioned and global tables, so that both answer a lookup
//! the same way.

use std::collections::HashMap;
use std::sync::Arc;

use super::def::{Row, TableDef};
use crate::codec::DecodeError;

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The key's latest row could not be decoded by the table's codec.
    #[error("table {topic:?}: the row of key {key:?} cannot be decoded ({source}); fix the producer of the table or its codec, a later row for the key replaces it")]
    Decode {
        /// The table's topic.
        topic: String,
        /// The key, lossily as text.
        key: String,
        /// The codec's error.
        source: DecodeError,
    },
}

/// One row as kept: decoded, or why it could not be. A bad row is kept (not skipped) so
/// that a lookup of its key fails instead of finding an older or no row.
#[derive(Clone)]
pub(super) enum Entry {
    Row(Row),
    Bad(Arc<DecodeError>),
}

/// A table's rows by key (the table record's key bytes).
pub(super) type Rows = HashMap<Vec<u8>, Entry>;

/// Applies one record of table `def` to `rows`: a null value (tombstone) deletes the key.
pub(super) fn apply(rows: &mut Rows, def: &TableDef, key: &[u8], value: Option<&[u8]>) {
    match value {
        None => {
            rows.remove(key);
        }
        Some(bytes) => {
            let entry = match (def.decode)(bytes) {
                Ok(row) => Entry::Row(row),
                Err(e) => Entry::Bad(Arc::new(e)),
            };
            rows.insert(key.to_vec(), entry);
        }
    }
}

/// What a lookup of `key` finds in `entry`: its row, nothing, or the decode error of
/// table `topic`.
pub(super) fn found<'a, V: 'static>(
    topic: &str,
    key: &[u8],
    entry: Option<&'a Entry>,
) -> Result<Option<&'a V>, TableError> {
    match entry {
        None => Ok(None),
        Some(Entry::Row(row)) => Ok(row.downcast_ref::<V>()),
        Some(Entry::Bad(e)) => Err(TableError::Decode {
            topic: topic.to_string(),
            key: String::from_utf8_lossy(key).into_owned(),
            source: DecodeError::new(e.codec, e.message.clone()),
        }),
    }
}
