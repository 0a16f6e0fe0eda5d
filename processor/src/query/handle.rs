//! [`StateQuery`]: reads of the stores' committed state from any thread while the pipeline
//! runs, and where a key's owner is.

use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::adverts::{Adverts, Instance};
use super::answer::{KeyMetadata, LocalScan, QueryAnswer};
use super::error::QueryError;
use super::partitioner::PartitionKey;
use super::registry::{Offer, Registry};
use crate::config::PipelineConfig;
use crate::runtime::ShutdownHandle;
use crate::state::{format, StateError, Store};

/// Reads the committed state of a running pipeline's stores, by key or by scan, from any
/// thread (cheap to clone): [`Pipeline::state_query`](crate::Pipeline::state_query). See
/// [`crate::query`] for what a read sees and how the owner of a key is found.
///
/// Every read blocks for as long as the store's backend takes (memory: a lock and a lookup;
/// a scan reads every entry of the partitions it covers): from async code, call it inside
/// `tokio::task::spawn_blocking` when the store is on disk or the scan is large.
#[derive(Clone)]
pub struct StateQuery {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: Arc<PipelineConfig>,
    handle: ShutdownHandle,
    registry: Arc<Registry>,
    adverts: Arc<Adverts>,
    /// The first input topic's partition count, learnt by the start-up checks.
    partitions: OnceLock<i32>,
    running: AtomicBool,
}

impl std::fmt::Debug for StateQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateQuery")
            .field("application_id", &self.inner.cfg.application_id)
            .field("running", &self.inner.running.load(Ordering::SeqCst))
            .field("endpoint", &self.endpoint())
            .finish_non_exhaustive()
    }
}

impl StateQuery {
    pub(crate) fn new(cfg: Arc<PipelineConfig>, handle: ShutdownHandle) -> StateQuery {
        let registry = Arc::new(Registry::default());
        if cfg.advertise.is_some() || cfg.stores.iter().any(|s| s.is_served()) {
            registry.want();
        }
        let inner = Inner {
            cfg,
            handle,
            registry,
            adverts: Arc::new(Adverts::default()),
            partitions: OnceLock::new(),
            running: AtomicBool::new(false),
        };
        StateQuery { inner: Arc::new(inner) }
    }

    /// Where the tasks offer their restored partitions.
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.inner.registry.clone()
    }

    /// What the endpoints thread keeps current.
    pub(crate) fn adverts(&self) -> Arc<Adverts> {
        self.inner.adverts.clone()
    }

    /// The pipeline's configuration (the HTTP endpoint finds the served stores in it).
    #[cfg(feature = "ops-server")]
    pub(crate) fn config(&self) -> &PipelineConfig {
        &self.inner.cfg
    }

    /// The start-up checks passed: the first input topic has `input_partitions` partitions.
    pub(crate) fn started(&self, input_partitions: i32) {
        let _ = self.inner.partitions.set(input_partitions);
        self.inner.running.store(true, Ordering::SeqCst);
    }

    /// The run ended: nothing is served any more, and the endpoints thread stops.
    pub(crate) fn stopped(&self) {
        self.inner.running.store(false, Ordering::SeqCst);
        self.inner.registry.clear();
        self.inner.adverts.stop();
    }

    /// This instance advertises `endpoint` to the others.
    pub(crate) fn advertise(&self, endpoint: String) {
        self.inner.adverts.set_own(endpoint);
    }

    /// Someone holds a handle: the tasks restore partitions as soon as they are assigned,
    /// so that a partition without input answers too.
    pub(crate) fn want(&self) {
        self.inner.registry.want();
    }

    /// The endpoint this instance advertises
    /// ([`advertised_endpoint`](crate::PipelineBuilder::advertised_endpoint)), once the
    /// pipeline runs.
    pub fn endpoint(&self) -> Option<String> {
        self.inner.adverts.own().map(str::to_string)
    }

    /// Every instance that advertises an endpoint, with the partitions it owns, as the
    /// adverts read so far tell (this one included once its own advert is read back).
    pub fn instances(&self) -> Vec<Instance> {
        self.inner.adverts.instances()
    }

    /// The committed value of `key` in `store`, if this instance owns the key's partition;
    /// else where to ask. The key's partition is that of its
    /// [`PartitionKey`] under the pipeline's
    /// [`input_partitioner`](crate::PipelineBuilder::input_partitioner).
    pub fn get<K, V>(&self, store: &Store<K, V>, key: &K) -> Result<QueryAnswer<V>, QueryError>
    where
        K: Serialize + PartitionKey,
        V: DeserializeOwned,
    {
        self.get_for_input_key(store, key, &key.partition_key())
    }

    /// [`get`](Self::get) for a store key whose input record key is `input_key` (a key type
    /// without [`PartitionKey`], or a store keyed otherwise than its input).
    pub fn get_for_input_key<K, V>(
        &self,
        store: &Store<K, V>,
        key: &K,
        input_key: &[u8],
    ) -> Result<QueryAnswer<V>, QueryError>
    where
        K: Serialize,
        V: DeserializeOwned,
    {
        let index = self.index_of(store)?;
        let encoded = format::encode_key(key).map_err(|e| self.codec_error(index, "encode", "key", e.to_string()))?;
        let version = self.inner.cfg.stores[index].version;
        Ok(match self.get_raw(index, &encoded, input_key)? {
            QueryAnswer::Found(bytes) => QueryAnswer::Found(
                format::decode_value(version, &bytes)
                    .map_err(|m| self.codec_error(index, "decode", "value", m.to_string()))?,
            ),
            QueryAnswer::Absent => QueryAnswer::Absent,
            QueryAnswer::NotOwnedHere { partition, owner } => QueryAnswer::NotOwnedHere { partition, owner },
            QueryAnswer::NotReady { partition } => QueryAnswer::NotReady { partition },
        })
    }

    /// Where `key` of `store` lives: its partition and the owner's endpoint.
    pub fn metadata_for_key<K, V>(&self, store: &Store<K, V>, key: &K) -> Result<KeyMetadata, QueryError>
    where
        K: PartitionKey,
    {
        self.index_of(store)?;
        self.metadata_for_input_key(&key.partition_key())
    }

    /// Where the state of input records keyed `input_key` lives.
    pub fn metadata_for_input_key(&self, input_key: &[u8]) -> Result<KeyMetadata, QueryError> {
        let partition = self.partition_of(input_key)?;
        let local = self.holds(partition);
        let owner = if local { self.endpoint() } else { self.owner_of(partition) };
        Ok(KeyMetadata { partition, owner, local })
    }

    /// The entries of `store` whose keys are in `range` (by the key type's `Ord`), from every
    /// partition this instance owns and has restored. Reads every entry of those
    /// partitions (bincode does not keep the keys' order in their bytes, so there is no
    /// seek): a scan costs the local store's size, not the range's.
    pub fn range<K, V, R>(&self, store: &Store<K, V>, range: R) -> Result<LocalScan<K, V>, QueryError>
    where
        K: DeserializeOwned + Ord,
        V: DeserializeOwned,
        R: RangeBounds<K>,
    {
        self.scan(store, |k| range.contains(k))
    }

    /// The entries of `store` whose keys start with `prefix`, from every partition this
    /// instance owns and has restored, sorted by key. Costs what [`range`](Self::range) does.
    pub fn prefix<K, V>(&self, store: &Store<K, V>, prefix: &str) -> Result<LocalScan<K, V>, QueryError>
    where
        K: DeserializeOwned + Ord + AsRef<str>,
        V: DeserializeOwned,
    {
        self.scan(store, |k| <K as AsRef<str>>::as_ref(k).starts_with(prefix))
    }

    /// The committed value (encoded) of encoded `key` in store `index`, placed by `input_key`.
    pub(crate) fn get_raw(
        &self,
        index: usize,
        key: &[u8],
        input_key: &[u8],
    ) -> Result<QueryAnswer<Vec<u8>>, QueryError> {
        let partition = self.partition_of(input_key)?;
        if !self.holds(partition) {
            return Ok(QueryAnswer::NotOwnedHere { partition, owner: self.owner_of(partition) });
        }
        let reader = match self.inner.registry.reader(partition, index) {
            Offer::Reader(reader) => reader,
            Offer::Absent => return Ok(QueryAnswer::NotReady { partition }),
            Offer::NoReader => return Err(QueryError::Unsupported { store: self.name(index) }),
        };
        match reader.get(key) {
            Ok(Some(value)) => Ok(QueryAnswer::Found(value)),
            Ok(None) => Ok(QueryAnswer::Absent),
            Err(source) => Err(StateError::Backend { store: self.name(index), partition, source }.into()),
        }
    }

    /// The entries that `keep` keeps, of every local restored partition of `store`.
    fn scan<K, V>(&self, store: &Store<K, V>, keep: impl Fn(&K) -> bool) -> Result<LocalScan<K, V>, QueryError>
    where
        K: DeserializeOwned + Ord,
        V: DeserializeOwned,
    {
        let index = self.index_of(store)?;
        self.partition_count()?;
        let version = self.inner.cfg.stores[index].version;
        let mut scan = LocalScan { entries: Vec::new(), partitions: Vec::new(), not_ready: Vec::new() };
        for partition in self.inner.handle.health_state().assigned_partitions(&self.inner.cfg.input_topics[0]) {
            let reader = match self.inner.registry.reader(partition, index) {
                Offer::Reader(reader) => reader,
                Offer::Absent => {
                    scan.not_ready.push(partition);
                    continue;
                }
                Offer::NoReader => return Err(QueryError::Unsupported { store: self.name(index) }),
            };
            let mut failed: Option<QueryError> = None;
            let entries = &mut scan.entries;
            let read = reader.scan(&mut |k: &[u8], v: &[u8]| -> bool {
                let key: K = match format::decode_key(k) {
                    Ok(key) => key,
                    Err(m) => {
                        failed = Some(self.codec_error(index, "decode", "key", m.to_string()));
                        return false;
                    }
                };
                if !keep(&key) {
                    return true;
                }
                match format::decode_value(version, v) {
                    Ok(value) => {
                        entries.push((key, value));
                        true
                    }
                    Err(m) => {
                        failed = Some(self.codec_error(index, "decode", "value", m.to_string()));
                        false
                    }
                }
            });
            if let Err(source) = read {
                return Err(StateError::Backend { store: self.name(index), partition, source }.into());
            }
            if let Some(e) = failed {
                return Err(e);
            }
            scan.partitions.push(partition);
        }
        scan.entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(scan)
    }

    /// The index of `store` among this pipeline's stores, if it was declared on its builder.
    fn index_of<K, V>(&self, store: &Store<K, V>) -> Result<usize, QueryError> {
        match self.inner.cfg.stores.get(store.index) {
            Some(def) if Arc::ptr_eq(&def.name, &store.name) => Ok(store.index),
            _ => Err(QueryError::ForeignStore { store: store.name().to_string() }),
        }
    }

    fn name(&self, index: usize) -> String {
        self.inner.cfg.stores.get(index).map_or_else(String::new, |s| s.name.to_string())
    }

    fn codec_error(&self, index: usize, op: &'static str, what: &'static str, detail: String) -> QueryError {
        StateError::Codec { store: self.name(index), op, what, detail }.into()
    }

    /// The first input topic's partition count, while the pipeline runs.
    fn partition_count(&self) -> Result<i32, QueryError> {
        match (self.inner.running.load(Ordering::SeqCst), self.inner.partitions.get()) {
            (true, Some(n)) => Ok(*n),
            _ => Err(QueryError::NotRunning),
        }
    }

    /// The input partition of records keyed `input_key`.
    fn partition_of(&self, input_key: &[u8]) -> Result<i32, QueryError> {
        let n = self.partition_count()?;
        Ok(self.inner.cfg.partitioner.partition(input_key, n))
    }

    /// Whether the group assigned `partition` to this instance. A partition this instance
    /// still has state of but no longer holds (revoked, its task not stopped yet) is not
    /// served: its next owner may already have committed past it.
    fn holds(&self, partition: i32) -> bool {
        self.inner.handle.health_state().holds(&self.inner.cfg.input_topics[0], partition)
    }

    /// The advertised owner of a partition this instance does not hold. Adverts that still
    /// name this instance (its revocation's advert not read back yet) give no owner, so
    /// that nobody is sent back here.
    fn owner_of(&self, partition: i32) -> Option<String> {
        let owner = self.inner.adverts.owner(partition)?;
        (Some(owner.as_str()) != self.inner.adverts.own()).then_some(owner)
    }
}
