//! A table's declaration: the handle a processor looks rows up with, and the definition the
//! pipeline's configuration holds (its topic and how to decode its values).

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::codec::{Codec, DecodeError};

/// A decoded table row, type-erased (the handle knows its type).
pub(super) type Row = Arc<dyn Any + Send + Sync>;
/// Decodes a row's value bytes.
pub(crate) type Decoder = Arc<dyn Fn(&[u8]) -> Result<Row, DecodeError> + Send + Sync>;

/// The handle of a table with values of type `V`, from
/// [`PipelineBuilder::table`](crate::PipelineBuilder::table) (co-partitioned) or
/// [`PipelineBuilder::global_table`](crate::PipelineBuilder::global_table): `ctx.table(&handle)`
/// in the processor, the same for both. Cheap to clone.
pub struct Table<V> {
    /// The table's index among the pipeline's co-partitioned tables, or among its global ones.
    pub(super) index: usize,
    pub(super) topic: Arc<str>,
    pub(super) global: bool,
    _value: PhantomData<fn() -> V>,
}

impl<V> Clone for Table<V> {
    fn clone(&self) -> Self {
        Table { index: self.index, topic: self.topic.clone(), global: self.global, _value: PhantomData }
    }
}

impl<V> Table<V> {
    /// The topic the table is read from.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Whether the table is global: read whole by every instance, any key found from any
    /// partition (see [`crate::table`]).
    pub fn is_global(&self) -> bool {
        self.global
    }
}

/// A table's declaration, held by the pipeline's configuration.
#[derive(Clone)]
pub struct TableDef {
    /// The compacted topic holding the table.
    pub topic: String,
    pub(crate) decode: Decoder,
}

impl std::fmt::Debug for TableDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableDef").field("topic", &self.topic).finish_non_exhaustive()
    }
}

/// Declares table number `index` (among the global tables if `global`, else among the
/// co-partitioned ones) read from `topic` with `codec`, and returns its handle.
pub(crate) fn declare<V, C>(index: usize, global: bool, topic: String, codec: C) -> (TableDef, Table<V>)
where
    V: Send + Sync + 'static,
    C: Codec<V> + 'static,
{
    let decode: Decoder = Arc::new(move |bytes| codec.decode(bytes).map(|v| Arc::new(v) as Row));
    let handle = Table { index, topic: Arc::from(topic.as_str()), global, _value: PhantomData };
    (TableDef { topic, decode }, handle)
}
