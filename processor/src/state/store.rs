//! Typed stores: the declaration ([`StoreSpec`]), the handle it yields ([`Store`]), and the
//! views a processor reads and writes through ([`StoreMut`], [`StoreRef`]).

use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::backend::{self, BackendFactory, Change};
use super::cell::StoreCell;
use super::error::StateError;
use super::format::{self, Mismatch, FORMAT, UNVERSIONED};

type Migration<V> = Arc<dyn Fn(&[u8]) -> Result<V, String> + Send + Sync>;

/// Checks (and migrates) one restored changelog record: `Ok(None)` keeps its bytes,
/// `Ok(Some(change))` stores the migrated change instead.
pub(crate) type RestoreCheck = Arc<dyn Fn(&[u8], Option<&[u8]>) -> Result<Option<Change>, Mismatch> + Send + Sync>;

/// The declaration of a store with key type `K` and value type `V`: its name, backend,
/// schema version and migrations. Pass it to
/// [`PipelineBuilder::store_spec`](crate::PipelineBuilder::store_spec), which returns the
/// [`Store`] handle the processor uses; [`PipelineBuilder::store`](crate::PipelineBuilder::store)
/// is the short form for an in-memory store at version 1.
///
/// ```
/// use kafka_eos::{state::StoreSpec, Pipeline};
/// #[derive(serde::Serialize, serde::Deserialize, Default)]
/// struct Total { cents: i64, payments: u32 } // version 2 added `payments`
/// let mut builder = Pipeline::builder();
/// let totals = builder.store_spec(
///     StoreSpec::<String, Total>::new("totals")
///         .version(2)
///         .migrate_from::<i64>(1, |cents| Total { cents, payments: 0 }),
/// );
/// assert_eq!(totals.name(), "totals");
/// ```
pub struct StoreSpec<K, V> {
    name: String,
    /// `None`: the pipeline's [`state_backend`](crate::PipelineBuilder::state_backend), or memory.
    backend: Option<BackendFactory>,
    version: u8,
    migrations: Vec<(u8, Migration<V>)>,
    _types: PhantomData<fn(K) -> V>,
}

impl<K, V> StoreSpec<K, V>
where
    K: Serialize + DeserializeOwned + 'static,
    V: Serialize + DeserializeOwned + 'static,
{
    /// An in-memory store named `name` at schema version 1. The name names the changelog
    /// topic (`<application-id>-<name>-changelog`): letters, digits, `.`, `_`, `-`.
    pub fn new(name: impl Into<String>) -> Self {
        StoreSpec { name: name.into(), backend: None, version: 1, migrations: Vec::new(), _types: PhantomData }
    }

    /// Keeps the committed state in `factory`'s backends (one per partition) instead of
    /// memory.
    pub fn backend(mut self, factory: BackendFactory) -> Self {
        self.backend = Some(factory);
        self
    }

    /// The schema version of the values this store writes (1 to 255; default 1). Bump it
    /// when `V` changes in a way bincode cannot read across (any added, removed or retyped
    /// field: bincode is not self-describing), and register a
    /// [migration](Self::migrate_from) for each version the changelog may still hold.
    pub fn version(mut self, version: u8) -> Self {
        self.version = version;
        self
    }

    /// Reads values of schema `version` as `Old` (bincode) and converts them with
    /// `migrate`. Version 0 stands for records written before kafka-eos versioned its state
    /// (no header; their keys are re-encoded too). Migrated records are converted on
    /// every restore: the changelog keeps them as written until the key is written again,
    /// so a migration stays registered as long as any old record may remain.
    pub fn migrate_from<Old>(mut self, version: u8, migrate: impl Fn(Old) -> V + Send + Sync + 'static) -> Self
    where
        Old: DeserializeOwned,
    {
        let decode = move |bytes: &[u8]| {
            bincode::deserialize::<Old>(bytes).map(&migrate).map_err(|e| {
                format!("a value of schema version {version} does not decode as {}: {e}", std::any::type_name::<Old>())
            })
        };
        self.migrations.push((version, Arc::new(decode)));
        self
    }

    /// The type-erased declaration the runtime keeps.
    pub(crate) fn into_def(self) -> StoreDef {
        let (version, migrations) = (self.version, self.migrations);
        let check: RestoreCheck = Arc::new(move |key: &[u8], value: Option<&[u8]>| {
            let migration = |from: u8| {
                migrations.iter().find(|(v, _)| *v == from).map(|(_, m)| m).ok_or(if from == UNVERSIONED {
                    Mismatch::Unversioned
                } else {
                    Mismatch::UnknownVersion(from)
                })
            };
            let legacy_key = key.first() != Some(&FORMAT);
            let key = if legacy_key {
                migration(UNVERSIONED)?;
                let k: K = bincode::deserialize(key).map_err(|e| {
                    Mismatch::Undecodable(format!(
                        "an unversioned key does not decode as {}: {e}",
                        std::any::type_name::<K>()
                    ))
                })?;
                format::encode_key(&k).map_err(|e| Mismatch::Undecodable(e.to_string()))?
            } else {
                format::decode_key::<K>(key)?;
                Vec::new() // unchanged
            };
            let value = match value {
                None => None,
                Some(bytes) => {
                    let from = match bytes {
                        [FORMAT, v, ..] if !legacy_key => *v,
                        _ => UNVERSIONED,
                    };
                    if from == version {
                        format::decode_value::<V>(version, bytes)?;
                        None // unchanged
                    } else {
                        let body = if from == UNVERSIONED { bytes } else { &bytes[2..] };
                        let v = migration(from)?(body).map_err(Mismatch::Undecodable)?;
                        Some(Some(format::encode_value(version, &v).map_err(|e| Mismatch::Undecodable(e.to_string()))?))
                    }
                }
            };
            Ok(match (legacy_key, value) {
                (false, None) => None,
                (false, Some(v)) => Some((Vec::new(), v)),
                (true, v) => Some((key, v.unwrap_or(None))),
            })
        });
        let (backend, own_backend) = match self.backend {
            Some(f) => (f, true),
            None => (backend::memory(), false),
        };
        StoreDef {
            name: Arc::from(self.name.as_str()),
            backend,
            own_backend,
            version,
            check,
            role: "store",
            #[cfg(feature = "ops-server")]
            http: None,
        }
    }
}

impl<K, V> std::fmt::Debug for StoreSpec<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSpec").field("name", &self.name).field("version", &self.version).finish_non_exhaustive()
    }
}

/// A declared store, without its types: what the configuration lists.
#[derive(Clone)]
pub struct StoreDef {
    pub(crate) name: Arc<str>,
    pub(crate) backend: BackendFactory,
    /// Whether the declaration chose the backend (else the pipeline's default applies).
    pub(crate) own_backend: bool,
    pub(crate) version: u8,
    pub(crate) check: RestoreCheck,
    /// What declared it, for the topology description: `store` (the builder), or the
    /// operator that owns it (`dedup`, `tumbling windows`, `timers`, ...).
    pub(crate) role: &'static str,
    /// How `GET /state/<store>/<key>` reads its key and writes its value, if the store is
    /// served over HTTP ([`PipelineBuilder::serve_store`](crate::PipelineBuilder::serve_store)).
    #[cfg(feature = "ops-server")]
    pub(crate) http: Option<crate::query::served::HttpCodec>,
}

impl StoreDef {
    /// This store with `factory` as its backend, unless its declaration chose one.
    pub(crate) fn or_backend(self, factory: &BackendFactory) -> StoreDef {
        match self.own_backend {
            true => self,
            false => StoreDef { backend: factory.clone(), ..self },
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema version its values are written with.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// Whether the ops server serves it (`GET /state/<store>/<key>`).
    #[cfg(feature = "ops-server")]
    pub(crate) fn is_served(&self) -> bool {
        self.http.is_some()
    }

    /// Whether the ops server serves it: never without the feature `ops-server`.
    #[cfg(not(feature = "ops-server"))]
    pub(crate) fn is_served(&self) -> bool {
        false
    }
}

impl std::fmt::Debug for StoreDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreDef").field("name", &self.name).field("version", &self.version).finish_non_exhaustive()
    }
}

/// The handle of a declared store, typed: `ctx.store(&totals)` gives its view for the
/// record's partition. Cheap to clone (a name and an index); only obtainable by declaring
/// the store on a builder, so a processor cannot name a store that does not exist, nor use
/// it with other types.
pub struct Store<K, V> {
    pub(crate) index: usize,
    pub(crate) name: Arc<str>,
    _types: PhantomData<fn(K) -> V>,
}

impl<K, V> Store<K, V> {
    pub(crate) fn new(index: usize, name: Arc<str>) -> Self {
        Store { index, name, _types: PhantomData }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<K, V> Clone for Store<K, V> {
    fn clone(&self) -> Self {
        Store { index: self.index, name: self.name.clone(), _types: PhantomData }
    }
}

impl<K, V> std::fmt::Debug for Store<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({:?})", &*self.name)
    }
}

fn encode_err(cell: &StoreCell, what: &'static str, source: bincode::Error) -> StateError {
    StateError::Codec { store: cell.name.to_string(), op: "encode", what, detail: source.to_string() }
}

fn get<K: Serialize, V: DeserializeOwned>(cell: &StoreCell, key: &K) -> Result<Option<V>, StateError> {
    let k = format::encode_key(key).map_err(|e| encode_err(cell, "key", e))?;
    cell.get(&k)?.map(|v| decode(cell, "value", format::decode_value(cell.version, &v))).transpose()
}

fn entries<K: DeserializeOwned, V: DeserializeOwned>(cell: &StoreCell) -> Result<Vec<(K, V)>, StateError> {
    cell.merged()
        .iter()
        .map(|(k, v)| {
            Ok((
                decode(cell, "key", format::decode_key(k))?,
                decode(cell, "value", format::decode_value(cell.version, v))?,
            ))
        })
        .collect()
}

fn decode<T>(cell: &StoreCell, what: &'static str, r: Result<T, Mismatch>) -> Result<T, StateError> {
    r.map_err(|m| StateError::Codec { store: cell.name.to_string(), op: "decode", what, detail: m.to_string() })
}

/// A typed, writable view of one store of one partition, for the open transaction. Reads
/// see the transaction's own writes; every write reaches the changelog with the
/// transaction, or is discarded with it.
pub struct StoreMut<'s, K, V> {
    pub(crate) cell: &'s mut StoreCell,
    pub(crate) _types: PhantomData<fn(K) -> V>,
}

impl<K, V> StoreMut<'_, K, V>
where
    K: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// The value of `key`, if any.
    pub fn get(&self, key: &K) -> Result<Option<V>, StateError> {
        get(self.cell, key)
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &K, value: &V) -> Result<(), StateError> {
        let k = format::encode_key(key).map_err(|e| encode_err(self.cell, "key", e))?;
        let v = format::encode_value(self.cell.version, value).map_err(|e| encode_err(self.cell, "value", e))?;
        self.cell.pending.insert(k, Some(v));
        Ok(())
    }

    /// Removes `key` (a tombstone in the changelog).
    pub fn delete(&mut self, key: &K) -> Result<(), StateError> {
        let k = format::encode_key(key).map_err(|e| encode_err(self.cell, "key", e))?;
        self.cell.pending.insert(k, None);
        Ok(())
    }

    /// Every entry, in the byte order of the encoded keys (bincode: fixed-width
    /// little-endian integers, so this is *not* numeric order). Costs a copy of the store:
    /// operators use it for occasional sweeps, not per record.
    pub fn entries(&self) -> Result<Vec<(K, V)>, StateError> {
        entries(self.cell)
    }
}

/// A typed, read-only view of one store of one partition: what the
/// [`init`](crate::processor::Processor::init) and [`close`](crate::processor::Processor::close) hooks see (they
/// run outside any transaction, so they may not write).
pub struct StoreRef<'s, K, V> {
    pub(crate) cell: &'s StoreCell,
    pub(crate) _types: PhantomData<fn(K) -> V>,
}

impl<K, V> StoreRef<'_, K, V>
where
    K: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// The value of `key`, if any.
    pub fn get(&self, key: &K) -> Result<Option<V>, StateError> {
        get(self.cell, key)
    }

    /// Every entry, in encoded-key byte order (see [`StoreMut::entries`]).
    pub fn entries(&self) -> Result<Vec<(K, V)>, StateError> {
        entries(self.cell)
    }
}
