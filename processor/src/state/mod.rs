//! State stores: keyed state that commits atomically with a transaction's outputs and offsets.
//!
//! A stateful processor ([`PipelineBuilder::stateful_processor`](crate::PipelineBuilder::stateful_processor))
//! receives a [`Context`] with every record; through it, it reads and writes the stores
//! declared with [`PipelineBuilder::store`](crate::PipelineBuilder::store): named, typed
//! key-value maps (keys and values are serde types, encoded with bincode), **one instance
//! per store per input partition**.
//!
//! # How a store stays exactly-once
//! ```text
//!   processor --put/delete--> overlay (this transaction's changes)
//!                               |  at the end of the batch, in the SAME transaction:
//!                               +--> changelog topic <app-id>-<store>-changelog, partition = input partition
//!   commit  -> overlay merged into the committed backend
//!   abort   -> overlay discarded (the replay recomputes it from the committed state)
//!   assign  -> backend rebuilt from the changelog partition, read_committed, to its end,
//!              before the partition's first record is processed
//! ```
//! - The overlay holds the latest value per key, so the changelog gets one record per key
//!   changed per transaction (a delete is a tombstone); the topic is compacted, so its size
//!   follows the live state, not the history.
//! - Because the changelog records, the outputs and the input offsets are in one
//!   transaction, the restored state always matches the committed offset the partition
//!   resumes from: a crash can neither double-count nor lose an update.
//! - Before reading the changelog, the restore fetches the partition's committed offset as
//!   *stable* (`require_stable`, KIP-447): it waits until any transaction of a previous
//!   owner that carried this partition's offsets has completed, so no committed change is
//!   still invisible to the read_committed restore (in per-partition mode
//!   `init_transactions` has already resolved it). A previous owner's transaction that never
//!   sent its offsets can never commit (its group generation is gone), so the restore may
//!   skip it.
//! - Under [`AtLeastOnce`](crate::Guarantee::AtLeastOnce) the changelog is written without a
//!   transaction, acknowledged before the offsets are committed: after a crash the state may
//!   include updates of records that are then processed again (at-least-once state).
//!
//! # Limits
//! State lives in memory ([`backend::MemoryBackend`]) and is rebuilt on every assignment:
//! restore time grows with the live state (see `docs/state.md` for the measured rate). A
//! disk-backed store implements [`backend::KeyValueBackend`] and is passed with
//! [`StoreSpec::with_backend`]; processors do not change. Stores need a single input topic:
//! changelog partition *n* belongs to input partition *n*.

pub mod backend;
pub(crate) mod changelog;

/// Restores the stores of input `partitions` from their changelogs exactly as an assignment
/// would, then drops them, and returns the number of changelog records read: what a
/// restore costs, for benchmarks and capacity planning. Blocks until done or `deadline`.
pub fn measure_restore(
    cfg: &crate::PipelineConfig,
    partitions: &[i32],
    deadline: std::time::Instant,
) -> crate::Result<u64> {
    changelog::restore(cfg, partitions, deadline).map(|(_, records)| records)
}

use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::record::OutputRecord;
use backend::{BackendFactory, KeyValueBackend};

/// A declared store: its name and how its committed state is kept.
#[derive(Clone)]
pub struct StoreSpec {
    pub(crate) name: String,
    pub(crate) backend: BackendFactory,
}

impl std::fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSpec").field("name", &self.name).finish_non_exhaustive()
    }
}

impl StoreSpec {
    /// An in-memory store (the default backend).
    pub fn memory(name: impl Into<String>) -> StoreSpec {
        StoreSpec { name: name.into(), backend: backend::memory() }
    }

    /// A store whose committed state is kept by `factory`'s backends (one per partition).
    pub fn with_backend(name: impl Into<String>, factory: BackendFactory) -> StoreSpec {
        StoreSpec { name: name.into(), backend: factory }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The changelog topic of `store` in pipeline `application_id`.
pub fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}

/// Why a store operation failed. Returned to the processor, which usually propagates it
/// with `?`: the batch is then aborted and retried like any processor error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The processor asked for a store that was not declared.
    #[error("no store named {name:?} (declared: {declared:?}); declare it with PipelineBuilder::store")]
    UnknownStore {
        /// The name asked for.
        name: String,
        /// The stores declared.
        declared: Vec<String>,
    },
    /// A key or value could not be encoded or decoded with bincode (a type mismatch between
    /// the processor and the stored data, e.g. after changing a state type without a
    /// migration: reset the changelog or version the store name).
    #[error("store {store:?}: cannot {op} a {what}: {source}")]
    Codec {
        /// The store.
        store: String,
        /// "encode" or "decode".
        op: &'static str,
        /// "key" or "value".
        what: &'static str,
        /// bincode's error.
        source: bincode::Error,
    },
}

/// What operators count; committed with the transaction (so replays do not count twice) and
/// exported as metrics and in the [`Summary`](crate::Summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Tally {
    /// Records dropped by [`Dedup`](crate::operators::Dedup).
    Duplicate,
    /// Records routed to a late-records topic by a window operator.
    Late,
}

/// What a partition's committed transaction changed.
pub(crate) struct Committed {
    /// Changelog records written, per store.
    pub changes: Vec<(String, u64)>,
    /// Operator tallies per (what, store).
    pub tallies: BTreeMap<(Tally, String), u64>,
}

/// One store of one partition: committed backend plus the open transaction's overlay.
pub(crate) struct StoreCell {
    name: String,
    changelog: String,
    backend: Box<dyn KeyValueBackend>,
    /// Changes of the open transaction, latest per key; `None` is a delete.
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl StoreCell {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match self.pending.get(key) {
            Some(v) => v.clone(),
            None => self.backend.get(key),
        }
    }

    /// Committed entries with the overlay applied, in key byte order.
    fn merged(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::with_capacity(self.backend.len());
        let mut pending = self.pending.iter().peekable();
        for (k, v) in self.backend.scan() {
            while let Some((pk, pv)) = pending.next_if(|(pk, _)| pk.as_slice() < k.as_slice()) {
                if let Some(pv) = pv {
                    out.push((pk.clone(), pv.clone()));
                }
            }
            match pending.next_if(|(pk, _)| pk.as_slice() == k.as_slice()) {
                Some((_, Some(pv))) => out.push((k, pv.clone())),
                Some((_, None)) => {}
                None => out.push((k, v)),
            }
        }
        out.extend(pending.filter_map(|(k, v)| v.as_ref().map(|v| (k.clone(), v.clone()))));
        out
    }
}

/// Every store of one input partition, plus the operators' uncommitted tallies.
pub(crate) struct PartitionState {
    partition: i32,
    stores: Vec<StoreCell>,
    tallies: BTreeMap<(Tally, String), u64>,
}

impl PartitionState {
    pub(crate) fn new(application_id: &str, specs: &[StoreSpec], partition: i32) -> PartitionState {
        let stores = specs
            .iter()
            .map(|s| StoreCell {
                name: s.name.clone(),
                changelog: changelog_topic(application_id, &s.name),
                backend: (s.backend)(&s.name, partition),
                pending: BTreeMap::new(),
            })
            .collect();
        PartitionState { partition, stores, tallies: BTreeMap::new() }
    }

    pub(crate) fn partition(&self) -> i32 {
        self.partition
    }

    pub(crate) fn backend_mut(&mut self, store: usize) -> &mut dyn KeyValueBackend {
        self.stores[store].backend.as_mut()
    }

    /// (entries, bytes) of the committed state of every store.
    pub(crate) fn sizes(&self) -> Vec<(&str, usize, usize)> {
        self.stores.iter().map(|s| (s.name.as_str(), s.backend.len(), s.backend.size_bytes())).collect()
    }

    /// The open transaction's changelog records: one per changed key per store.
    pub(crate) fn changelog_records(&self) -> Vec<OutputRecord> {
        let mut out = Vec::new();
        for s in &self.stores {
            for (k, v) in &s.pending {
                let mut r = OutputRecord::to(s.changelog.clone()).partition(self.partition);
                r.key = Some(k.clone());
                r.value = v.clone();
                out.push(r);
            }
        }
        out
    }

    /// The transaction committed: the overlay becomes committed state. Returns what it
    /// changed: changelog records per store, and the operators' tallies.
    pub(crate) fn commit(&mut self) -> Committed {
        let mut committed = Committed { tallies: std::mem::take(&mut self.tallies), changes: Vec::new() };
        for s in &mut self.stores {
            if !s.pending.is_empty() {
                committed.changes.push((s.name.clone(), s.pending.len() as u64));
                let changes = std::mem::take(&mut s.pending).into_iter().collect();
                s.backend.write_batch(changes);
            }
        }
        committed
    }

    /// The transaction aborted: forget its changes.
    pub(crate) fn abort(&mut self) {
        for s in &mut self.stores {
            s.pending.clear();
        }
        self.tallies.clear();
    }
}

/// What a stateful processor sees besides the record: the stores of the record's partition.
pub struct Context<'a> {
    state: &'a mut PartitionState,
}

impl<'a> Context<'a> {
    pub(crate) fn new(state: &'a mut PartitionState) -> Context<'a> {
        Context { state }
    }

    /// The input partition whose state this is.
    pub fn partition(&self) -> i32 {
        self.state.partition
    }

    /// The store `name` with key type `K` and value type `V`. The types are the processor's
    /// to keep consistent: the store holds bincode bytes, and decoding them as another type
    /// fails with [`StateError::Codec`] (or, for layout-compatible types, silently
    /// misreads).
    pub fn store<K, V>(&mut self, name: &str) -> Result<Store<'_, K, V>, StateError>
    where
        K: Serialize + DeserializeOwned,
        V: Serialize + DeserializeOwned,
    {
        let declared = || self.state.stores.iter().map(|s| s.name.clone()).collect();
        let Some(i) = self.state.stores.iter().position(|s| s.name == name) else {
            return Err(StateError::UnknownStore { name: name.to_string(), declared: declared() });
        };
        Ok(Store { cell: &mut self.state.stores[i], _types: PhantomData })
    }

    pub(crate) fn tally(&mut self, what: Tally, store: &str, n: u64) {
        *self.state.tallies.entry((what, store.to_string())).or_default() += n;
    }
}

/// A typed view of one store of one partition. Reads see this transaction's own writes.
pub struct Store<'s, K, V> {
    cell: &'s mut StoreCell,
    _types: PhantomData<fn(K) -> V>,
}

impl<K, V> Store<'_, K, V>
where
    K: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    fn encode<T: Serialize>(&self, what: &'static str, t: &T) -> Result<Vec<u8>, StateError> {
        bincode::serialize(t).map_err(|source| StateError::Codec {
            store: self.cell.name.clone(),
            op: "encode",
            what,
            source,
        })
    }

    fn decode<T: DeserializeOwned>(&self, what: &'static str, bytes: &[u8]) -> Result<T, StateError> {
        bincode::deserialize(bytes).map_err(|source| StateError::Codec {
            store: self.cell.name.clone(),
            op: "decode",
            what,
            source,
        })
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &K) -> Result<Option<V>, StateError> {
        let k = self.encode("key", key)?;
        self.cell.get(&k).map(|v| self.decode("value", &v)).transpose()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &K, value: &V) -> Result<(), StateError> {
        let (k, v) = (self.encode("key", key)?, self.encode("value", value)?);
        self.cell.pending.insert(k, Some(v));
        Ok(())
    }

    /// Removes `key` (a tombstone in the changelog).
    pub fn delete(&mut self, key: &K) -> Result<(), StateError> {
        let k = self.encode("key", key)?;
        self.cell.pending.insert(k, None);
        Ok(())
    }

    /// Every entry, in the byte order of the encoded keys (bincode: fixed-width
    /// little-endian integers, so this is *not* numeric order). Costs a copy of the store:
    /// operators use it for occasional sweeps, not per record.
    pub fn entries(&self) -> Result<Vec<(K, V)>, StateError> {
        self.cell.merged().iter().map(|(k, v)| Ok((self.decode("key", k)?, self.decode("value", v)?))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> PartitionState {
        PartitionState::new("app", &[StoreSpec::memory("s")], 3)
    }

    #[test]
    fn reads_see_own_writes_and_abort_forgets_them() {
        let mut st = state();
        {
            let mut ctx = Context::new(&mut st);
            let mut s = ctx.store::<String, u64>("s").unwrap();
            s.put(&"a".into(), &1).unwrap();
            assert_eq!(s.get(&"a".into()).unwrap(), Some(1));
        }
        st.commit();
        {
            let mut ctx = Context::new(&mut st);
            let mut s = ctx.store::<String, u64>("s").unwrap();
            s.put(&"a".into(), &2).unwrap();
            s.put(&"b".into(), &3).unwrap();
            s.delete(&"a".into()).unwrap();
            assert_eq!(s.get(&"a".into()).unwrap(), None);
            assert_eq!(s.entries().unwrap(), vec![("b".to_string(), 3)]);
        }
        st.abort();
        let mut ctx = Context::new(&mut st);
        let s = ctx.store::<String, u64>("s").unwrap();
        assert_eq!(s.entries().unwrap(), vec![("a".to_string(), 1)]);
    }

    #[test]
    fn changelog_has_one_record_per_changed_key_with_tombstones() {
        let mut st = state();
        let mut ctx = Context::new(&mut st);
        let mut s = ctx.store::<u32, u32>("s").unwrap();
        s.put(&1, &10).unwrap();
        s.put(&1, &11).unwrap();
        s.put(&2, &20).unwrap();
        s.delete(&2).unwrap();
        let recs = st.changelog_records();
        assert_eq!(recs.len(), 2);
        assert!(recs.iter().all(|r| r.topic == "app-s-changelog" && r.partition == Some(3)));
        assert_eq!(recs[0].value, Some(bincode::serialize(&11u32).unwrap()));
        assert_eq!(recs[1].value, None);
    }

    #[test]
    fn merged_view_interleaves_overlay_and_committed() {
        let mut st = state();
        st.backend_mut(0).write_batch(vec![
            (bincode::serialize(&2u8).unwrap(), Some(bincode::serialize(&20u8).unwrap())),
            (bincode::serialize(&4u8).unwrap(), Some(bincode::serialize(&40u8).unwrap())),
        ]);
        let mut ctx = Context::new(&mut st);
        let mut s = ctx.store::<u8, u8>("s").unwrap();
        s.put(&1, &10).unwrap();
        s.put(&3, &30).unwrap();
        s.put(&4, &41).unwrap();
        s.delete(&2).unwrap();
        s.put(&5, &50).unwrap();
        assert_eq!(s.entries().unwrap(), vec![(1, 10), (3, 30), (4, 41), (5, 50)]);
        assert!(matches!(ctx.store::<u8, u8>("nope"), Err(StateError::UnknownStore { .. })));
    }
}
