//! A table's rows for one input partition, as the reader applies them, and the view a
//! processor's lookups go through (of a co-partitioned or a global table).

use std::marker::PhantomData;

use super::def::{Table, TableDef};
use super::entry::{apply, found, Entry, Rows, TableError};
use super::global::{GlobalRows, GlobalView};

/// The tables of one input partition, in declaration order.
#[derive(Clone, Default)]
pub(crate) struct PartitionTables {
    rows: Vec<Rows>,
}

impl PartitionTables {
    pub(crate) fn new(tables: usize) -> PartitionTables {
        PartitionTables { rows: vec![Rows::new(); tables] }
    }

    /// Applies one record of table `index` (a null value deletes its key).
    pub(crate) fn apply(&mut self, def: &TableDef, index: usize, key: &[u8], value: Option<&[u8]>) {
        apply(&mut self.rows[index], def, key, value);
    }

    /// Live rows per table.
    pub(crate) fn sizes(&self) -> Vec<usize> {
        self.rows.iter().map(Rows::len).collect()
    }
}

/// The tables a processor call looks rows up in: its partition's co-partitioned tables
/// and the instance's global tables, each as of the start of the batch attempt.
#[derive(Clone, Copy, Default)]
pub(crate) struct TableViews<'a> {
    pub(crate) partition: Option<&'a PartitionTables>,
    pub(crate) global: Option<&'a GlobalView>,
}

/// Where a [`TableRef`] finds its rows.
#[derive(Clone, Copy)]
enum Source<'a> {
    None,
    Partition(&'a Rows),
    Global(&'a GlobalRows),
}

/// The view of one table for the record being processed, from
/// [`Context::table`](crate::Context::table): of a co-partitioned table, its rows of the
/// record's partition; of a global table, all its rows.
pub struct TableRef<'a, V> {
    topic: &'a str,
    rows: Source<'a>,
    _value: PhantomData<fn() -> V>,
}

impl<'a, V: 'static> TableRef<'a, V> {
    pub(crate) fn new(table: &'a Table<V>, views: TableViews<'a>) -> TableRef<'a, V> {
        let rows = if table.global {
            views.global.and_then(|g| g.table(table.index)).map_or(Source::None, Source::Global)
        } else {
            views.partition.and_then(|t| t.rows.get(table.index)).map_or(Source::None, Source::Partition)
        };
        TableRef { topic: &table.topic, rows, _value: PhantomData }
    }

    /// The row of `key` (the table record's key bytes), if the table has one.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<&'a V>, TableError> {
        let key = key.as_ref();
        let entry: Option<&'a Entry> = match self.rows {
            Source::None => None,
            Source::Partition(rows) => rows.get(key),
            Source::Global(rows) => rows.get(key),
        };
        found(self.topic, key, entry)
    }

    /// How many rows the table holds for this partition (a global table: in all).
    pub fn len(&self) -> usize {
        match self.rows {
            Source::None => 0,
            Source::Partition(rows) => rows.len(),
            Source::Global(rows) => rows.len(),
        }
    }

    /// Whether the table holds no row for this partition (a global table: at all).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
