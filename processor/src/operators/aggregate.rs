//! A keyed running aggregate: count, sum, or any fold per key, emitting the new value.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::state::{StateError, Store};
use crate::{Context, PipelineBuilder};

/// A running aggregate per key (a count, a sum, a latest row), kept in one store.
///
/// [`update`](Aggregate::update) folds one record into its key's value and returns the new
/// value, which the processor usually emits keyed by the same key: downstream, the latest
/// record per key (a compacted topic, an upsert) is the current aggregate.
pub struct Aggregate<K, A> {
    store: Store<K, A>,
}

impl<K, A> Clone for Aggregate<K, A> {
    fn clone(&self) -> Self {
        Aggregate { store: self.store.clone() }
    }
}

impl<K, A> Aggregate<K, A>
where
    K: Serialize + DeserializeOwned + 'static,
    A: Serialize + DeserializeOwned + Default + 'static,
{
    /// An aggregate kept in store `store`, declared on `builder`.
    pub fn new(builder: &mut PipelineBuilder, store: impl Into<String>) -> Self {
        Aggregate { store: builder.operator_store(store, "aggregate") }
    }

    /// Its store's handle (to read it in a hook, say).
    pub fn store(&self) -> &Store<K, A> {
        &self.store
    }

    /// Folds into `key`'s value (starting from `A::default()`) and returns the new value.
    pub fn update(&self, ctx: &mut Context<'_>, key: &K, fold: impl FnOnce(&mut A)) -> Result<A, StateError> {
        let mut store = ctx.store(&self.store);
        let mut value = store.get(key)?.unwrap_or_default();
        fold(&mut value);
        store.put(key, &value)?;
        Ok(value)
    }

    /// The current value of `key`, if it has one.
    pub fn get(&self, ctx: &mut Context<'_>, key: &K) -> Result<Option<A>, StateError> {
        ctx.store(&self.store).get(key)
    }

    /// Removes `key`'s value (a tombstone in the changelog).
    pub fn remove(&self, ctx: &mut Context<'_>, key: &K) -> Result<(), StateError> {
        ctx.store(&self.store).delete(key)
    }
}
