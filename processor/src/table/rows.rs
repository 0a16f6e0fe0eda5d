//! A table's rows for one input partition, as the reader applies them and a processor's
//! lookups see them.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use super::def::{Row, Table, TableDef};
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

/// One row as kept: decoded, or why it could not be.
#[derive(Clone)]
enum Entry {
    Row(Row),
    Bad(Arc<DecodeError>),
}

/// The tables of one input partition, in declaration order.
#[derive(Clone, Default)]
pub(crate) struct PartitionTables {
    rows: Vec<HashMap<Vec<u8>, Entry>>,
}

impl PartitionTables {
    pub(crate) fn new(tables: usize) -> PartitionTables {
        PartitionTables { rows: vec![HashMap::new(); tables] }
    }

    /// Applies one record of table `index` (a null value deletes its key).
    pub(crate) fn apply(&mut self, def: &TableDef, index: usize, key: &[u8], value: Option<&[u8]>) {
        let rows = &mut self.rows[index];
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

    /// Live rows per table.
    pub(crate) fn sizes(&self) -> Vec<usize> {
        self.rows.iter().map(HashMap::len).collect()
    }
}

/// The view of one table for the record's partition, from
/// [`Context::table`](crate::Context::table).
pub struct TableRef<'a, V> {
    topic: &'a str,
    rows: Option<&'a HashMap<Vec<u8>, Entry>>,
    _value: PhantomData<fn() -> V>,
}

impl<'a, V: 'static> TableRef<'a, V> {
    pub(crate) fn new(table: &'a Table<V>, tables: Option<&'a PartitionTables>) -> TableRef<'a, V> {
        TableRef { topic: &table.topic, rows: tables.and_then(|t| t.rows.get(table.index)), _value: PhantomData }
    }

    /// The row of `key` (the table record's key bytes), if the table has one.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<&'a V>, TableError> {
        let key = key.as_ref();
        match self.rows.and_then(|rows| rows.get(key)) {
            None => Ok(None),
            Some(Entry::Row(row)) => Ok(row.downcast_ref::<V>()),
            Some(Entry::Bad(e)) => Err(TableError::Decode {
                topic: self.topic.to_string(),
                key: String::from_utf8_lossy(key).into_owned(),
                source: DecodeError::new(e.codec, e.message.clone()),
            }),
        }
    }

    /// How many rows the table holds for this partition.
    pub fn len(&self) -> usize {
        self.rows.map_or(0, HashMap::len)
    }

    /// Whether the table holds no row for this partition.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
