//! One input partition's state: every store's committed backend, the open transaction's
//! overlay on it, and what a commit changed.

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;

use super::backend::{CommittedReader, KeyValueBackend};
use super::cell::StoreCell;
use super::{StateError, Store, StoreDef, StoreMut, StoreRef, Tally};
use crate::record::{OutputRecord, Topic};

/// The last offset each changelog partition got in a committed transaction, from the
/// producer's delivery reports: `(changelog topic, partition) -> offset`.
pub(crate) type ChangelogEnds = HashMap<(String, i32), i64>;

/// A store's committed entries (encoded keys and values), in key byte order.
pub(crate) type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The changelog topic of `store` in pipeline `application_id`.
pub fn changelog_topic(application_id: &str, store: &str) -> String {
    format!("{application_id}-{store}-changelog")
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

/// Every store of one input partition, plus the operators' uncommitted tallies.
pub(crate) struct PartitionState {
    partition: i32,
    stores: Vec<StoreCell>,
    tallies: BTreeMap<(Tally, String), u64>,
    /// Dropped with the state: what marks the partition as a task's meanwhile (a standby
    /// replica's lease, `super::standby`).
    guard: Option<Box<dyn std::any::Any + Send>>,
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
        PartitionState { partition, stores, tallies: BTreeMap::new(), guard: None }
    }

    pub(crate) fn partition(&self) -> i32 {
        self.partition
    }

    /// Keeps `guard` for as long as the state lives.
    pub(crate) fn hold(&mut self, guard: Box<dyn std::any::Any + Send>) {
        self.guard = Some(guard);
    }

    pub(crate) fn backend_mut(&mut self, store: usize) -> &mut dyn KeyValueBackend {
        self.stores[store].backend.as_mut()
    }

    /// (entries, bytes) of the committed state of every store.
    pub(crate) fn sizes(&self) -> Vec<(&str, usize, usize)> {
        self.stores.iter().map(|s| (&*s.name, s.backend.len(), s.backend.size_bytes())).collect()
    }

    /// Every store's reader of its committed state, for queries, in declaration order
    /// (`None`: the store's backend has none). The overlay is not in the backend, so a
    /// reader never sees the open transaction.
    pub(crate) fn committed_readers(&self) -> Vec<Option<Arc<dyn CommittedReader>>> {
        self.stores.iter().map(|s| s.backend.committed_reader()).collect()
    }

    /// Every store's committed entries (the overlay left out), by store name: what the
    /// test driver compares between runs.
    pub(crate) fn committed_entries(&self) -> Vec<(&str, Entries)> {
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
