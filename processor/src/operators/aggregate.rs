//! A keyed running aggregate: count, sum, or any fold per key, emitting the new value.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::state::{Context, StateError, StoreSpec};

/// A running aggregate per key (a count, a sum, a latest row), kept in one store.
///
/// [`update`](Aggregate::update) folds one record into its key's value and returns the new
/// value, which the processor usually emits keyed by the same key: downstream, the latest
/// record per key (a compacted topic, an upsert) is the current aggregate.
pub struct Aggregate<K, A> {
    store: String,
    _types: PhantomData<fn(K) -> A>,
}

impl<K, A> Aggregate<K, A>
where
    K: Serialize + DeserializeOwned,
    A: Serialize + DeserializeOwned + Default,
{
    /// An aggregate kept in store `store`.
    pub fn new(store: impl Into<String>) -> Self {
        Aggregate { store: store.into(), _types: PhantomData }
    }

    /// The store to declare with [`PipelineBuilder::store`](crate::PipelineBuilder::store).
    pub fn store(&self) -> StoreSpec {
        StoreSpec::memory(&self.store)
    }

    /// Folds into `key`'s value (starting from `A::default()`) and returns the new value.
    pub fn update(&self, ctx: &mut Context<'_>, key: &K, fold: impl FnOnce(&mut A)) -> Result<A, StateError> {
        let mut store = ctx.store::<K, A>(&self.store)?;
        let mut value = store.get(key)?.unwrap_or_default();
        fold(&mut value);
        store.put(key, &value)?;
        Ok(value)
    }

    /// The current value of `key`, if it has one.
    pub fn get(&self, ctx: &mut Context<'_>, key: &K) -> Result<Option<A>, StateError> {
        ctx.store::<K, A>(&self.store)?.get(key)
    }

    /// Removes `key`'s value (a tombstone in the changelog).
    pub fn remove(&self, ctx: &mut Context<'_>, key: &K) -> Result<(), StateError> {
        ctx.store::<K, A>(&self.store)?.delete(key)
    }
}
