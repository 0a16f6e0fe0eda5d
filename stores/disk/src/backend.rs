//! [`DiskBackend`]: one redb database per store partition, its entries and its changelog
//! checkpoint committed together.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_eos::state::backend::{BackendError, Change, Checkpoint, CommittedReader, KeyValueBackend, Location};
use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata, TableDefinition};

/// The store's entries: encoded key -> encoded value.
const ENTRIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("entries");
/// The checkpoint and the entries' byte count.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const CHECKPOINT: &str = "checkpoint";
const BYTES: &str = "bytes";

/// How long [`DiskBackend::open`] waits for a database another task of this process is
/// still closing (a partition revoked and assigned again at once).
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// The committed state of one store partition in a redb database (made by
/// [`DiskStore::factory`](crate::DiskStore::factory); kafka-eos calls it on the partition
/// task's thread). Reads and scans go to the database (redb caches hot pages); the entry
/// count and byte size are kept in the database beside the checkpoint.
pub struct DiskBackend {
    root: PathBuf,
    sync_interval: Duration,
    /// Set by [`open`](KeyValueBackend::open).
    path: Option<PathBuf>,
    /// Shared with the backend's [`CommittedReader`]s (queries of the store).
    db: Option<Arc<Database>>,
    /// Another process holds the database: never delete it under that process.
    locked: bool,
    len: u64,
    bytes: u64,
    last_sync: Instant,
}

impl DiskBackend {
    /// A backend that keeps its database under `root` once opened.
    pub fn new(root: &Path, sync_interval: Duration) -> DiskBackend {
        DiskBackend {
            root: root.to_path_buf(),
            sync_interval,
            path: None,
            db: None,
            locked: false,
            len: 0,
            bytes: 0,
            last_sync: Instant::now(),
        }
    }

    /// The database file, once opened.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn error(
        &self,
        what: &str,
        hint: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> BackendError {
        let at = self.path.as_deref().unwrap_or(&self.root).display();
        BackendError { what: format!("{what} {at}"), hint, source: source.into() }
    }

    fn db(&self) -> Result<&Database, BackendError> {
        self.db.as_deref().ok_or_else(|| {
            self.error("using the state store", "kafka-eos opens a store before using it; this is a bug", "not opened")
        })
    }

    /// Opens (or creates) the database at `path`, waiting out a lock this process is
    /// releasing; redb's own checks of a damaged file may panic in debug builds, which
    /// counts as a damaged file too.
    fn open_db(path: &Path) -> Result<Database, redb::DatabaseError> {
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let opened = catch_unwind(AssertUnwindSafe(|| Database::create(path))).unwrap_or_else(|panic| {
                let what = panic.downcast_ref::<String>().cloned().unwrap_or_else(|| "redb panicked".into());
                Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(what)))
            });
            match opened {
                Err(redb::DatabaseError::DatabaseAlreadyOpen) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                r => return r,
            }
        }
    }

    /// Reads the checkpoint and the sizes of the open database.
    fn read_meta(&mut self) -> Result<Option<Checkpoint>, BackendError> {
        let hint = "the store is rebuilt from its changelog";
        let db = self.db()?;
        let tx = db.begin_read().map_err(|e| self.error("reading", hint, e))?;
        let (meta, entries) = match (tx.open_table(META), tx.open_table(ENTRIES)) {
            (Ok(meta), Ok(entries)) => (meta, entries),
            // A new database: no tables yet.
            (Err(redb::TableError::TableDoesNotExist(_)), _) | (_, Err(redb::TableError::TableDoesNotExist(_))) => {
                return Ok(None)
            }
            (Err(e), _) | (_, Err(e)) => return Err(self.error("reading", hint, e)),
        };
        let get = |key: &str| meta.get(key).map(|v| v.map(|v| v.value().to_vec()));
        let checkpoint = get(CHECKPOINT).map_err(|e| self.error("reading the checkpoint of", hint, e))?;
        let bytes = get(BYTES).map_err(|e| self.error("reading", hint, e))?;
        let len = entries.len().map_err(|e| self.error("reading", hint, e))?;
        self.len = len;
        self.bytes = bytes.and_then(|b| Some(u64::from_be_bytes(b.try_into().ok()?))).unwrap_or(0);
        match checkpoint {
            None => Ok(None),
            Some(bytes) => decode_checkpoint(&bytes)
                .map(Some)
                .ok_or_else(|| self.error("reading the checkpoint of", hint, "it is not 16 bytes")),
        }
    }
}

fn encode_checkpoint(cp: &Checkpoint) -> [u8; 16] {
    let ms = cp.written_at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&cp.next_offset.to_be_bytes());
    out[8..].copy_from_slice(&ms.to_be_bytes());
    out
}

fn decode_checkpoint(bytes: &[u8]) -> Option<Checkpoint> {
    let next_offset = i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
    let ms = i64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
    Some(Checkpoint { next_offset, written_at: UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64) })
}

impl KeyValueBackend for DiskBackend {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.try_get(key).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let hint = "the batch is replayed; if this repeats, stop the instance and delete the file (it is rebuilt from the changelog)";
        let tx = self.db()?.begin_read().map_err(|e| self.error("reading", hint, e))?;
        let table = match tx.open_table(ENTRIES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(self.error("reading", hint, e)),
        };
        let value = table.get(key).map_err(|e| self.error("reading", hint, e))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn write_batch(&mut self, changes: Vec<Change>) {
        if let Err(e) = self.write_checkpointed(changes, None) {
            panic!("{e}");
        }
    }

    fn write_checkpointed(&mut self, changes: Vec<Change>, next_offset: Option<i64>) -> Result<(), BackendError> {
        let hint = "the committed changes are in the changelog: the partition's state is restored from it. If \
                    the disk is full or failing, free or replace it";
        let sync = self.last_sync.elapsed() >= self.sync_interval;
        let db = self.db()?;
        let mut tx = db.begin_write().map_err(|e| self.error("writing", hint, e))?;
        let durability = if sync { Durability::Immediate } else { Durability::None };
        tx.set_durability(durability).map_err(|e| self.error("writing", hint, e))?;
        // A crash then reopens at once: redb saves its allocator state with the commit.
        tx.set_quick_repair(sync);
        let (mut len, mut bytes) = (self.len, self.bytes);
        {
            let mut entries = tx.open_table(ENTRIES).map_err(|e| self.error("writing", hint, e))?;
            for (k, v) in &changes {
                let old = match v {
                    Some(v) => entries.insert(k.as_slice(), v.as_slice()),
                    None => entries.remove(k.as_slice()),
                }
                .map_err(|e| self.error("writing", hint, e))?;
                if let Some(old) = old {
                    len -= 1;
                    bytes = bytes.saturating_sub((k.len() + old.value().len()) as u64);
                }
                if let Some(v) = v {
                    len += 1;
                    bytes += (k.len() + v.len()) as u64;
                }
            }
            let mut meta = tx.open_table(META).map_err(|e| self.error("writing", hint, e))?;
            meta.insert(BYTES, bytes.to_be_bytes().as_slice()).map_err(|e| self.error("writing", hint, e))?;
            if let Some(next_offset) = next_offset {
                let cp = Checkpoint { next_offset, written_at: SystemTime::now() };
                meta.insert(CHECKPOINT, encode_checkpoint(&cp).as_slice())
                    .map_err(|e| self.error("writing the checkpoint of", hint, e))?;
            }
        }
        tx.commit().map_err(|e| self.error("committing", hint, e))?;
        (self.len, self.bytes) = (len, bytes);
        if sync {
            self.last_sync = Instant::now();
        }
        Ok(())
    }

    fn scan(&self) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + '_> {
        let hint = "the batch is replayed; if this repeats, stop the instance and delete the file";
        let failed = |e: &dyn std::fmt::Display| -> ! { panic!("{}", self.error("scanning", hint, e.to_string())) };
        let tx = self.db().unwrap_or_else(|e| failed(&e)).begin_read().unwrap_or_else(|e| failed(&e));
        let table = match tx.open_table(ENTRIES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Box::new(std::iter::empty()),
            Err(e) => failed(&e),
        };
        let range = table.range::<&[u8]>(..).unwrap_or_else(|e| failed(&e));
        Box::new(range.map(move |r| {
            let (k, v) = r.unwrap_or_else(|e| failed(&e));
            (k.value().to_vec(), v.value().to_vec())
        }))
    }

    fn len(&self) -> usize {
        self.len as usize
    }

    fn size_bytes(&self) -> usize {
        self.bytes as usize
    }

    fn kind(&self) -> String {
        "disk".into()
    }

    fn committed_reader(&self) -> Option<Arc<dyn CommittedReader>> {
        let db = self.db.clone()?;
        let path = self.path.clone().unwrap_or_else(|| self.root.clone());
        Some(Arc::new(DiskReader { db, path }))
    }

    fn open(&mut self, at: &Location<'_>) -> Result<Option<Checkpoint>, BackendError> {
        let dir = self.root.join(at.application_id).join(at.store).join(at.partition.to_string());
        let path = dir.join("state.redb");
        self.path = Some(path.clone());
        self.db = None;
        std::fs::create_dir_all(&dir).map_err(|e| {
            self.error("creating the state directory for", "check the state directory's permissions and free space", e)
        })?;
        match Self::open_db(&path) {
            Ok(db) => self.db = Some(Arc::new(db)),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                self.locked = true;
                let hint = "another process uses this state directory: give each instance its own \
                            (DiskStore::at, or KAFKA_EOS_STATE_DIR)";
                return Err(self.error("opening", hint, redb::DatabaseError::DatabaseAlreadyOpen));
            }
            Err(e) => return Err(self.error("opening", "the store is rebuilt from its changelog", e)),
        }
        self.read_meta()
    }

    fn clear(&mut self) -> Result<(), BackendError> {
        let path = self.path.clone().ok_or_else(|| {
            self.error(
                "clearing the state store",
                "kafka-eos opens a store before clearing it; this is a bug",
                "not opened",
            )
        })?;
        if self.locked {
            let hint = "another process uses this state directory: give each instance its own";
            return Err(self.error("clearing", hint, "the database is locked by another process"));
        }
        // A damaged file is not worth reading: the store starts anew.
        self.db = None;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(self.error("deleting", "check the state directory's permissions", e))
            }
            _ => {}
        }
        let db = Self::open_db(&path).map_err(|e| self.error("creating", "check the state directory", e))?;
        self.db = Some(Arc::new(db));
        (self.len, self.bytes) = (0, 0);
        Ok(())
    }
}

/// A [`DiskBackend`]'s committed state, for queries: its database, read in redb read
/// transactions, which see the last committed write transaction whole (redb keeps the
/// previous version for open readers) and never block the partition task's writes. It
/// keeps the database open while it lives: a partition assigned again to this process
/// waits for the readers of the old one ([`LOCK_WAIT`]).
struct DiskReader {
    db: Arc<Database>,
    path: PathBuf,
}

impl DiskReader {
    fn error(&self, what: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BackendError {
        let hint = "the query failed; the partition's processing is not affected";
        BackendError { what: format!("{what} {}", self.path.display()), hint, source: source.into() }
    }
}

impl CommittedReader for DiskReader {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let tx = self.db.begin_read().map_err(|e| self.error("reading", e))?;
        let table = match tx.open_table(ENTRIES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(self.error("reading", e)),
        };
        let value = table.get(key).map_err(|e| self.error("reading", e))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn scan(&self, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<(), BackendError> {
        let tx = self.db.begin_read().map_err(|e| self.error("scanning", e))?;
        let table = match tx.open_table(ENTRIES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(self.error("scanning", e)),
        };
        for entry in table.range::<&[u8]>(..).map_err(|e| self.error("scanning", e))? {
            let (k, v) = entry.map_err(|e| self.error("scanning", e))?;
            if !visit(k.value(), v.value()) {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
