//! State stores: keyed state that commits atomically with a transaction's outputs and offsets.
//!
//! A store is declared once on the builder, which returns its typed handle:
//! `let totals = builder.store::<String, i64>("totals")` (or
//! [`store_spec`](crate::PipelineBuilder::store_spec) with a [`StoreSpec`] for another
//! backend, a schema version and migrations). The processor reads and writes it through the
//! record's [`Context`](crate::Context): `ctx.store(&totals).get(&merchant)?`. Keys and
//! values are serde types, encoded with bincode behind a version header ([`format`](mod@format)), **one
//! instance per store per input partition**. A store with other types than declared does
//! not compile; a store that was not declared cannot be named.
//!
//! # How a store stays exactly-once
//! ```text
//!   processor --put/delete--> overlay (this transaction's changes)
//!                               |  at the end of the batch, in the SAME transaction:
//!                               +--> changelog topic <app-id>-<store>-changelog, partition = input partition
//!   commit  -> overlay merged into the committed backend
//!   abort   -> overlay discarded (the replay recomputes it from the committed state)
//!   assign  -> backend rebuilt from the changelog partition, read_committed, to its end,
//!              before the partition's first record is processed: from the start, or from
//!              a persistent backend's trusted checkpoint (only the tail)
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
//!   `init_transactions` has already resolved it). A transaction that wrote changes and
//!   never sent offsets is not waited for there; the restore reads to the high watermark it
//!   saw at its start, so it waits for such a transaction to end instead of stopping at the
//!   last stable offset it holds back (`changelog::restore`).
//! - Under [`AtLeastOnce`](crate::Guarantee::AtLeastOnce) the changelog is written without a
//!   transaction, acknowledged before the offsets are committed: after a crash the state may
//!   include updates of records that are then processed again (at-least-once state).
//!
//! # Where committed state lives
//! By default in memory ([`backend::MemoryBackend`]), rebuilt from the changelog's start on
//! every assignment: restore time grows with the live state (see `docs/state.md` for the
//! measured rate). A persistent backend (the `kafka-eos-disk` crate, passed with
//! [`StoreSpec::backend`] or for every store with
//! [`PipelineBuilder::state_backend`](crate::PipelineBuilder::state_backend); processors do
//! not change) keeps the state and a
//! [`Checkpoint`](backend::Checkpoint) — the changelog offset it reflects — in one local
//! transaction, so an assignment restores only the changelog's tail (`state/checkpoint.rs` has
//! the rules for when a checkpoint is trusted).
//!
//! **Never ahead of the commit** (the problem of Kafka's KIP-892): a backend is written
//! only *after* the Kafka transaction committed, with the offsets the changelog records got
//! in that transaction. So a local store never holds an aborted or still-open
//! transaction's changes. A crash between the Kafka commit and the local write leaves the
//! checkpoint *behind* the changelog: the tail restore reads the missing transaction back.
//! A commit whose outcome was unknown and reconciled as committed writes its changes
//! without moving the checkpoint (behind again, and re-applying changelog records the data
//! already has is harmless: each sets a key to an absolute value).
//!
//! Changelog partition *n* belongs to input partition *n*. A stateful pipeline over several
//! input topics treats them as **co-partitioned**: partition *n* of every input shares one
//! state (a stream–stream join of two topics), owned by one task — in per-partition mode one
//! producer and transactional.id (`<app>:<first input topic>:<n>`) for all of them — and the
//! topics must have the same partition count (checked at start-up). Validation requires a
//! range assignor ([`Rebalancing::Eager`](crate::Rebalancing::Eager), or the consumer
//! protocol with `group.remote.assignor=range`), the only ones that keep partition *n* of
//! every input on one instance.

pub mod backend;
pub(crate) mod changelog;
pub(crate) mod checkpoint;
pub mod format;
mod store;

pub use store::{Store, StoreDef, StoreMut, StoreRef, StoreSpec};

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

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;

pub(crate) use crate::counters::Tally;
use crate::record::{OutputRecord, Topic};
use backend::{BackendError, KeyValueBackend};

/// The last offset each changelog partition got in a committed transaction, from the
/// producer's delivery reports: `(changelog topic, partition) -> offset`.
pub(crate) type ChangelogEnds = HashMap<(String, i32), i64>;

/// The changelog topic of `store` in pipeline `application_id`.
pub fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
}

/// Why a store operation, or a store's restore, failed. A processor usually propagates it
/// with `?`: the batch is then aborted and retried like any processor error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A key or value could not be encoded or decoded (a type the store's data does not
    /// match). With typed handles this only happens when the stored bytes are not what the
    /// declaration says, which the restore already checks: see [`StateError::Incompatible`].
    #[error("store {store:?}: cannot {op} a {what}: {detail}")]
    Codec {
        /// The store.
        store: String,
        /// "encode" or "decode".
        op: &'static str,
        /// "key" or "value".
        what: &'static str,
        /// The codec's error.
        detail: String,
    },
    /// A changelog record cannot be read as the store's declared types and schema version
    /// (see [`format`](mod@format)): the store's partition is not restored and the pipeline stops,
    /// before processing anything with wrong state.
    #[error(
        "store {store:?} cannot restore partition {partition} from {changelog} (offset {offset}): {problem}. \
         Either declare how to read it (StoreSpec::version(n) with migrate_from::<OldType>(old_version, ..), \
         version 0 for records written before state was versioned), or reset the store: stop the \
         pipeline, delete the changelog topic {changelog} and reprocess the input from the start (or \
         give the store a new name, starting it empty)"
    )]
    Incompatible {
        /// The store.
        store: String,
        /// Its changelog topic.
        changelog: String,
        /// The input (and changelog) partition.
        partition: i32,
        /// The offending record's changelog offset.
        offset: i64,
        /// What is wrong with it.
        problem: String,
    },
    /// The store's backend failed (a disk backend's read or write). The batch is aborted
    /// and replayed; the committed state is the changelog's, so nothing is lost.
    #[error("store {store:?}, partition {partition}: {source}")]
    Backend {
        /// The store.
        store: String,
        /// The input (and changelog) partition.
        partition: i32,
        /// What failed, and what to do.
        source: BackendError,
    },
}

/// What a partition's committed transaction changed.
pub(crate) struct Committed {
    /// Changelog records written, per store.
    pub changes: Vec<(String, u64)>,
    /// Operator tallies per (what, store).
    pub tallies: BTreeMap<(Tally, String), u64>,
    /// A backend that failed to write the committed changes: the partition's state must be
    /// dropped and restored from the changelog (its tail, if the checkpoint survived).
    pub failed: Option<StateError>,
}

/// One store of one partition: committed backend plus the open transaction's overlay.
pub(crate) struct StoreCell {
    name: Arc<str>,
    partition: i32,
    version: u8,
    changelog: Topic,
    backend: Box<dyn KeyValueBackend>,
    /// Changes of the open transaction, latest per key; `None` is a delete.
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl StoreCell {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        match self.pending.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.backend.try_get(key).map_err(|source| self.backend_error(source)),
        }
    }

    fn backend_error(&self, source: BackendError) -> StateError {
        StateError::Backend { store: self.name.to_string(), partition: self.partition, source }
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
    pub(crate) fn new(application_id: &str, defs: &[StoreDef], partition: i32) -> PartitionState {
        let stores = defs
            .iter()
            .map(|s| StoreCell {
                name: s.name.clone(),
                partition,
                version: s.version,
                changelog: Topic::from(changelog_topic(application_id, &s.name)),
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
        self.stores.iter().map(|s| (&*s.name, s.backend.len(), s.backend.size_bytes())).collect()
    }

    /// Every store's committed entries (the overlay left out), by store name: what the
    /// test driver compares between runs.
    pub(crate) fn committed_entries(&self) -> Vec<(&str, crate::testing::Entries)> {
        self.stores.iter().map(|s| (&*s.name, s.backend.scan().collect())).collect()
    }

    /// The open transaction's changelog records: one per changed key per store.
    pub(crate) fn changelog_records(&self) -> Vec<OutputRecord> {
        let mut out = Vec::new();
        for s in &self.stores {
            for (k, v) in &s.pending {
                let mut r = OutputRecord::to(&s.changelog).partition(self.partition);
                r.key = Some(k.clone());
                r.value = v.clone();
                out.push(r);
            }
        }
        out
    }

    /// The transaction committed: the overlay becomes committed state, checkpointed at the
    /// offset after the last changelog record the transaction wrote (`ends`; a store whose
    /// offset is unknown keeps its checkpoint, behind). Returns what it changed: changelog
    /// records per store, the operators' tallies, and a backend's failure if one failed.
    pub(crate) fn commit(&mut self, ends: &ChangelogEnds) -> Committed {
        let mut committed = Committed { tallies: std::mem::take(&mut self.tallies), changes: Vec::new(), failed: None };
        for s in &mut self.stores {
            if !s.pending.is_empty() {
                committed.changes.push((s.name.to_string(), s.pending.len() as u64));
                let changes = std::mem::take(&mut s.pending).into_iter().collect();
                let next = ends.get(&(s.changelog.to_string(), self.partition)).map(|last| last + 1);
                if let Err(e) = s.backend.write_checkpointed(changes, next) {
                    committed.failed.get_or_insert(s.backend_error(e));
                }
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

impl PartitionState {
    fn index_of<K, V>(&self, store: &Store<K, V>) -> usize {
        match self.stores.get(store.index) {
            Some(cell) if Arc::ptr_eq(&cell.name, &store.name) => store.index,
            _ => panic!(
                "store handle {:?} was declared on another pipeline's builder: use the handle returned by this \
                 pipeline's PipelineBuilder::store",
                &*store.name
            ),
        }
    }

    /// The writable view of `store`. Panics if the handle was declared on another builder.
    pub(crate) fn store_mut<K, V>(&mut self, store: &Store<K, V>) -> StoreMut<'_, K, V> {
        let i = self.index_of(store);
        StoreMut { cell: &mut self.stores[i], _types: PhantomData }
    }

    /// The read-only view of `store`. Panics if the handle was declared on another builder.
    pub(crate) fn store_ref<K, V>(&self, store: &Store<K, V>) -> StoreRef<'_, K, V> {
        StoreRef { cell: &self.stores[self.index_of(store)], _types: PhantomData }
    }

    pub(crate) fn tally(&mut self, what: Tally, store: &str, n: u64) {
        *self.tallies.entry((what, store.to_string())).or_default() += n;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Pipeline;

    /// A partition's state for the stores declared on `builder` (as the runtime makes it).
    pub(crate) fn state_of(builder: &crate::PipelineBuilder, partition: i32) -> PartitionState {
        PartitionState::new("app", builder.store_defs(), partition)
    }

    fn state<K, V>() -> (Store<K, V>, PartitionState)
    where
        K: serde::Serialize + serde::de::DeserializeOwned + 'static,
        V: serde::Serialize + serde::de::DeserializeOwned + 'static,
    {
        let mut b = Pipeline::builder();
        let s = b.store::<K, V>("s");
        (s, state_of(&b, 3))
    }

    #[test]
    fn reads_see_own_writes_and_abort_forgets_them() {
        let (h, mut st) = state::<String, u64>();
        {
            let mut s = st.store_mut(&h);
            s.put(&"a".into(), &1).unwrap();
            assert_eq!(s.get(&"a".into()).unwrap(), Some(1));
        }
        st.commit(&ChangelogEnds::new());
        {
            let mut s = st.store_mut(&h);
            s.put(&"a".into(), &2).unwrap();
            s.put(&"b".into(), &3).unwrap();
            s.delete(&"a".into()).unwrap();
            assert_eq!(s.get(&"a".into()).unwrap(), None);
            assert_eq!(s.entries().unwrap(), vec![("b".to_string(), 3)]);
        }
        st.abort();
        assert_eq!(st.store_ref(&h).entries().unwrap(), vec![("a".to_string(), 1)]);
    }

    #[test]
    fn changelog_has_one_record_per_changed_key_with_tombstones() {
        let (h, mut st) = state::<u32, u32>();
        let mut s = st.store_mut(&h);
        s.put(&1, &10).unwrap();
        s.put(&1, &11).unwrap();
        s.put(&2, &20).unwrap();
        s.delete(&2).unwrap();
        let recs = st.changelog_records();
        assert_eq!(recs.len(), 2);
        assert!(recs.iter().all(|r| r.topic == "app-s-changelog" && r.partition == Some(3)));
        assert_eq!(recs[0].key, Some(format::encode_key(&1u32).unwrap()));
        assert_eq!(recs[0].value, Some(format::encode_value(1, &11u32).unwrap()));
        assert_eq!(recs[1].value, None);
    }

    #[test]
    fn merged_view_interleaves_overlay_and_committed() {
        let (h, mut st) = state::<u8, u8>();
        let kv = |k: u8, v: u8| (format::encode_key(&k).unwrap(), Some(format::encode_value(1, &v).unwrap()));
        st.backend_mut(0).write_batch(vec![kv(2, 20), kv(4, 40)]);
        let mut s = st.store_mut(&h);
        s.put(&1, &10).unwrap();
        s.put(&3, &30).unwrap();
        s.put(&4, &41).unwrap();
        s.delete(&2).unwrap();
        s.put(&5, &50).unwrap();
        assert_eq!(s.entries().unwrap(), vec![(1, 10), (3, 30), (4, 41), (5, 50)]);
    }

    #[test]
    #[should_panic(expected = "declared on another pipeline's builder")]
    fn a_handle_of_another_builder_is_refused() {
        let (_, mut st) = state::<u8, u8>();
        let mut other = Pipeline::builder();
        let _first = other.store::<u8, u8>("t");
        let foreign = other.store::<u8, u8>("s");
        st.store_mut(&foreign);
    }
}
