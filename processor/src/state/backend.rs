//! Where a store's committed state lives: the [`KeyValueBackend`] trait and its in-memory
//! implementation.
//!
//! A backend only ever holds *committed* state: the changes of the open transaction sit in
//! the store's overlay (`StoreCell`) and reach the backend in one
//! [`write_checkpointed`](KeyValueBackend::write_checkpointed) after the transaction
//! commits. So a backend needs no transactions of the Kafka kind, and processors and
//! operators do not change with the backend.
//!
//! # Persistent backends and checkpoints
//! A backend that keeps its state across restarts (the `kafka-eos-disk` crate) also keeps a
//! [`Checkpoint`]: the changelog offset its state reflects, written **in the same local
//! transaction as the data**. On assignment the core [`open`](KeyValueBackend::open)s it,
//! checks the checkpoint against the changelog (`state::checkpoint`) and restores only the
//! changelog's tail from there, or [`clear`](KeyValueBackend::clear)s it and restores from
//! the start. The one invariant a backend must keep: **its checkpoint never exceeds the
//! first changelog offset its data does not reflect**. A checkpoint *behind* the data is
//! harmless — changelog records set a key to an absolute value, so re-applying records the
//! data already has ends at the same state.
//!
//! # Reads from other threads
//! [Queries](crate::query) read a store's committed state while its partition task runs,
//! through the backend's [`CommittedReader`]. Since a backend holds only committed state,
//! a reader never sees an open transaction's changes; it must only never see a committed
//! transaction's changes half applied.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::SystemTime;

/// One change to a store: a key and its new value, `None` for a delete.
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// The changelog position a persistent backend's committed state reflects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// The next changelog offset to read: every committed record below it is reflected.
    pub next_offset: i64,
    /// When the checkpoint was written (local clock): a checkpoint older than the
    /// changelog's `delete.retention.ms` may have missed tombstones that compaction has
    /// removed since, and is not trusted.
    pub written_at: SystemTime,
}

/// Where a backend's state belongs: passed to [`KeyValueBackend::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location<'a> {
    /// The pipeline's `application_id`.
    pub application_id: &'a str,
    /// The store's name.
    pub store: &'a str,
    /// The input (and changelog) partition.
    pub partition: i32,
}

/// A backend operation failed. The changelog stays the truth: a failed open or read is
/// rebuilt or retried from it, never guessed at.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}. {hint}")]
pub struct BackendError {
    /// What was being done, e.g. "opening /var/lib/kafka-eos/app/totals/3/state.redb".
    pub what: String,
    /// What to do about it.
    pub hint: &'static str,
    /// The underlying error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Committed key-value state of one store for one input partition. Keys and values are the
/// bincode encodings of the typed store's key and value.
///
/// The first six methods are all an in-memory backend needs; the others have defaults for
/// one (nothing persists, so no checkpoint) and are what a persistent backend overrides.
/// Backends are called on the partition task's OS thread, never on an async worker, so
/// blocking disk I/O is fine.
pub trait KeyValueBackend: Send {
    /// The value of `key`, if present.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// Applies a committed transaction's changes (`None` deletes), in order.
    fn write_batch(&mut self, changes: Vec<Change>);
    /// Every entry, in key byte order.
    fn scan(&self) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + '_>;
    /// Number of entries.
    fn len(&self) -> usize;
    /// Whether the store is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Approximate size of keys and values in bytes (reported in the restore log line).
    fn size_bytes(&self) -> usize;

    /// Opens the state kept for `location` and returns its checkpoint; called once, before
    /// the restore. `Ok(None)`: no usable state (nothing persisted, or a store without a
    /// checkpoint), and the core restores from the changelog's start (after a
    /// [`clear`](Self::clear) if the backend is not empty). `Err`: the local state is
    /// unusable (corrupt, unreadable): the core logs it and calls `clear`.
    fn open(&mut self, location: &Location<'_>) -> Result<Option<Checkpoint>, BackendError> {
        let _ = location;
        Ok(None)
    }

    /// Applies a committed transaction's changes and, when `next_offset` is given, records
    /// in the **same local transaction** that the state reflects the changelog below it.
    /// `None`: the offset is not known (a commit reconciled after an unknown outcome): the
    /// data is written and the checkpoint stays where it was, behind, which is safe. An
    /// error leaves the previous state and checkpoint in place (the write is atomic): the
    /// core then drops the partition's state and restores the tail again.
    fn write_checkpointed(&mut self, changes: Vec<Change>, next_offset: Option<i64>) -> Result<(), BackendError> {
        let _ = next_offset;
        self.write_batch(changes);
        Ok(())
    }

    /// Removes every entry and the checkpoint: the state is about to be rebuilt from the
    /// changelog's start.
    fn clear(&mut self) -> Result<(), BackendError> {
        let deletes: Vec<Change> = self.scan().map(|(k, _)| (k, None)).collect();
        self.write_batch(deletes);
        Ok(())
    }

    /// [`get`](Self::get) for backends whose reads can fail; the store's views call this
    /// one, and an error aborts the batch (it is replayed per the processor error policy).
    fn try_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.get(key))
    }

    /// What kind of backend this is, as [`Pipeline::describe`](crate::Pipeline::describe)
    /// names it (`memory`, `disk`). Default: the type's name (the description drops its
    /// path). Asked of a backend made by the store's factory and never opened.
    fn kind(&self) -> String {
        std::any::type_name::<Self>().to_string()
    }

    /// A reader of this backend's committed state for other threads, asked once the
    /// partition's state is restored; `None` (the default): the backend has none, and
    /// queries of its store fail with
    /// [`QueryError::Unsupported`](crate::query::QueryError::Unsupported). See
    /// [`CommittedReader`] for what a reader must keep.
    fn committed_reader(&self) -> Option<Arc<dyn CommittedReader>> {
        None
    }
}

/// The committed state of one store partition, read from threads other than its partition
/// task's while the task goes on writing: what [queries](crate::query) read.
///
/// A reader must see each write of a committed transaction
/// ([`write_checkpointed`](KeyValueBackend::write_checkpointed),
/// [`write_batch`](KeyValueBackend::write_batch)) whole or not at all, and stay usable after
/// its backend is dropped (a partition revoked while a query reads it). Its reads may run
/// on any thread, blocking for as long as the storage takes.
pub trait CommittedReader: Send + Sync {
    /// The committed value of `key`, if present.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError>;
    /// Calls `visit` with every committed entry, in key byte order, until it returns `false`.
    fn scan(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError>;
}

/// Creates a backend for one store of one input partition: `(store, partition)`. Called on
/// every assignment, and once per store by [`Pipeline::describe`](crate::Pipeline::describe)
/// to ask the backend's [`kind`](KeyValueBackend::kind): keep it cheap, and leave touching
/// the storage to [`open`](KeyValueBackend::open).
pub type BackendFactory = std::sync::Arc<dyn Fn(&str, i32) -> Box<dyn KeyValueBackend> + Send + Sync>;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// The default backend: a `BTreeMap` in memory. State size is bounded by the process's
/// memory, and every assignment restores it from the changelog.
///
/// The map sits behind a lock shared with its [`CommittedReader`]s: the partition task
/// takes the write lock only to apply a committed transaction's changes, all of them under
/// one lock (a query sees the transaction whole or not at all), and reads under the read
/// lock, which queries share. A long query scan therefore delays the task's next merge
/// by as long as it reads.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    map: Arc<RwLock<Map>>,
    bytes: usize,
}

impl MemoryBackend {
    fn map(&self) -> RwLockReadGuard<'_, Map> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl KeyValueBackend for MemoryBackend {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.map().get(key).cloned()
    }

    fn write_batch(&mut self, changes: Vec<Change>) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        for (k, v) in changes {
            let klen = k.len();
            let old = match v {
                Some(v) => {
                    self.bytes += klen + v.len();
                    map.insert(k, v)
                }
                None => map.remove(&k),
            };
            if let Some(old) = old {
                self.bytes -= klen + old.len();
            }
        }
    }

    fn scan(&self) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + '_> {
        Box::new(MemoryScan { map: self.map(), after: None })
    }

    fn len(&self) -> usize {
        self.map().len()
    }

    fn size_bytes(&self) -> usize {
        self.bytes
    }

    fn kind(&self) -> String {
        "memory".into()
    }

    fn committed_reader(&self) -> Option<Arc<dyn CommittedReader>> {
        Some(Arc::new(MemoryReader(self.map.clone())))
    }
}

/// A scan of a [`MemoryBackend`] in key order, under its read lock: each step looks up the
/// key after the last one, so the iterator holds the lock and nothing borrowed from it.
struct MemoryScan<'a> {
    map: RwLockReadGuard<'a, Map>,
    after: Option<Vec<u8>>,
}

impl Iterator for MemoryScan<'_> {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        let next = match &self.after {
            None => self.map.iter().next().map(|(k, v)| (k.clone(), v.clone())),
            Some(after) => self
                .map
                .range::<[u8], _>((Bound::Excluded(after.as_slice()), Bound::Unbounded))
                .next()
                .map(|(k, v)| (k.clone(), v.clone())),
        };
        let (k, v) = next?;
        self.after = Some(k.clone());
        Some((k, v))
    }
}

/// A [`MemoryBackend`]'s committed state, for queries: the same map, under the same lock.
struct MemoryReader(Arc<RwLock<Map>>);

impl CommittedReader for MemoryReader {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.0.read().unwrap_or_else(|p| p.into_inner()).get(key).cloned())
    }

    fn scan(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        for (k, v) in map.iter() {
            if !visit(k.as_slice(), v.as_slice()) {
                break;
            }
        }
        Ok(())
    }
}

/// The factory of [`MemoryBackend`]s.
pub fn memory() -> BackendFactory {
    std::sync::Arc::new(|_, _| Box::new(MemoryBackend::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_batch_applies_puts_and_deletes_and_tracks_size() {
        let mut m = MemoryBackend::default();
        m.write_batch(vec![(b"a".to_vec(), Some(b"12".to_vec())), (b"b".to_vec(), Some(b"3".to_vec()))]);
        assert_eq!((m.len(), m.size_bytes()), (2, 5));
        m.write_batch(vec![(b"a".to_vec(), Some(b"1".to_vec())), (b"b".to_vec(), None)]);
        assert_eq!(m.get(b"a"), Some(b"1".to_vec()));
        assert_eq!(m.get(b"b"), None);
        assert_eq!((m.len(), m.size_bytes()), (1, 2));
        assert_eq!(m.scan().collect::<Vec<_>>(), vec![(b"a".to_vec(), b"1".to_vec())]);
    }

    #[test]
    fn defaults_keep_no_checkpoint_and_clear_empties() {
        let mut m = MemoryBackend::default();
        let at = Location { application_id: "app", store: "s", partition: 0 };
        assert_eq!(m.open(&at).unwrap(), None);
        m.write_checkpointed(vec![(b"a".to_vec(), Some(b"1".to_vec()))], Some(7)).unwrap();
        assert_eq!(m.try_get(b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(m.open(&at).unwrap(), None, "memory keeps no checkpoint");
        m.clear().unwrap();
        assert_eq!((m.len(), m.size_bytes()), (0, 0));
    }

    #[test]
    fn a_committed_reader_sees_every_write_and_outlives_its_backend() {
        let mut m = MemoryBackend::default();
        let reader = m.committed_reader().expect("memory has a reader");
        assert_eq!(reader.get(b"a").unwrap(), None);
        m.write_batch(vec![(b"b".to_vec(), Some(b"2".to_vec())), (b"a".to_vec(), Some(b"1".to_vec()))]);
        assert_eq!(reader.get(b"a").unwrap(), Some(b"1".to_vec()));
        let mut seen = Vec::new();
        reader
            .scan(&mut |k: &[u8], v: &[u8]| {
                seen.push((k.to_vec(), v.to_vec()));
                false
            })
            .unwrap();
        assert_eq!(seen, vec![(b"a".to_vec(), b"1".to_vec())], "in key order, until told to stop");
        m.write_batch(vec![(b"a".to_vec(), None)]);
        drop(m);
        assert_eq!(reader.get(b"a").unwrap(), None);
        assert_eq!(reader.get(b"b").unwrap(), Some(b"2".to_vec()));
    }
}
