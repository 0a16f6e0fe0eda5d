//! Where a store's committed state lives: the [`KeyValueBackend`] trait and its in-memory
//! implementation.
//!
//! A backend only ever holds *committed* state: the changes of the open transaction sit in
//! the store's overlay ([`super::StoreCell`]) and reach the backend in one
//! [`write_batch`](KeyValueBackend::write_batch) after the transaction commits. So a
//! backend needs no transactions of its own, and a disk-backed one (RocksDB, sled, an
//! append-only file) only has to implement these five methods; processors and operators do
//! not change.

use std::collections::BTreeMap;

/// One change to a store: a key and its new value, `None` for a delete.
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// Committed key-value state of one store for one input partition. Keys and values are the
/// bincode encodings of the typed store's key and value.
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
}

/// Creates a backend for one store of one input partition: `(store, partition)`.
pub type BackendFactory = std::sync::Arc<dyn Fn(&str, i32) -> Box<dyn KeyValueBackend> + Send + Sync>;

/// The default backend: a `BTreeMap` in memory. State size is bounded by the process's
/// memory, and every assignment restores it from the changelog.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl KeyValueBackend for MemoryBackend {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.map.get(key).cloned()
    }

    fn write_batch(&mut self, changes: Vec<Change>) {
        for (k, v) in changes {
            let klen = k.len();
            let old = match v {
                Some(v) => {
                    self.bytes += klen + v.len();
                    self.map.insert(k, v)
                }
                None => self.map.remove(&k),
            };
            if let Some(old) = old {
                self.bytes -= klen + old.len();
            }
        }
    }

    fn scan(&self) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + '_> {
        Box::new(self.map.iter().map(|(k, v)| (k.clone(), v.clone())))
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn size_bytes(&self) -> usize {
        self.bytes
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
}
