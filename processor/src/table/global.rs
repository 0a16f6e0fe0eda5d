//! The in-memory copy of the global tables one pipeline instance shares between all its
//! tasks: versions that never change once published, read by lookups without a lock.
//!
//! The [reader](super::global_reader) applies updates to its own working copy and publishes
//! it as a new version; a task takes the latest version when a batch attempt begins and
//! looks rows up in it for the whole attempt, so a batch never sees the table change under
//! it. A version shares every row with the next one except those of the shards an update
//! touched: each table is split by key hash into [`SHARDS`] maps, and the working copy copies
//! a shard (`Arc::make_mut`) only when a published version still holds it. An update thus
//! costs its shard's copy, not the table's.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::def::TableDef;
use super::entry::{apply, Entry, Rows};
use crate::error::Error;

/// Shards per global table: an update copies at most 1/64 of the table while a batch
/// holds the version before it.
const SHARDS: usize = 64;

/// One global table's rows, sharded by key hash.
#[derive(Clone)]
pub(crate) struct GlobalRows {
    shards: Vec<Arc<Rows>>,
}

impl GlobalRows {
    fn new() -> GlobalRows {
        GlobalRows { shards: (0..SHARDS).map(|_| Arc::new(Rows::new())).collect() }
    }

    fn shard(key: &[u8]) -> usize {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        (h.finish() % SHARDS as u64) as usize
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.shards[Self::shard(key)].get(key)
    }

    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }
}

/// The global tables as one version holds them, in declaration order
/// ([`PipelineConfig::global_tables`](crate::PipelineConfig::global_tables)).
#[derive(Clone, Default)]
pub(crate) struct GlobalView {
    tables: Vec<GlobalRows>,
}

impl GlobalView {
    /// Empty tables, `tables` of them.
    pub(crate) fn new(tables: usize) -> GlobalView {
        GlobalView { tables: (0..tables).map(|_| GlobalRows::new()).collect() }
    }

    /// Applies one record of global table `index` (`def`): a null value deletes its key.
    /// Copies the key's shard first if another version still holds it.
    pub(crate) fn apply(&mut self, def: &TableDef, index: usize, key: &[u8], value: Option<&[u8]>) {
        if let Some(table) = self.tables.get_mut(index) {
            apply(Arc::make_mut(&mut table.shards[GlobalRows::shard(key)]), def, key, value);
        }
    }

    pub(super) fn table(&self, index: usize) -> Option<&GlobalRows> {
        self.tables.get(index)
    }

    /// Live rows per table.
    pub(crate) fn sizes(&self) -> Vec<usize> {
        self.tables.iter().map(GlobalRows::len).collect()
    }
}

/// What the instance's tasks share of the global tables: the latest published version,
/// and the reader's failure, if it failed.
pub(crate) struct GlobalTables {
    current: Mutex<Arc<GlobalView>>,
    failed: Mutex<Option<(String, rdkafka::error::KafkaError)>>,
    stop: AtomicBool,
}

impl GlobalTables {
    pub(crate) fn new(view: GlobalView) -> GlobalTables {
        GlobalTables { current: Mutex::new(Arc::new(view)), failed: Mutex::new(None), stop: AtomicBool::new(false) }
    }

    /// The latest version, for a batch attempt; the reader's error once it failed (the
    /// table can no longer be kept current, so the pipeline stops rather than serve a stale
    /// copy without end).
    pub(crate) fn view(&self) -> Result<Arc<GlobalView>, Error> {
        if let Some((topic, e)) = self.failed.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Err(read_error(topic, e.clone()));
        }
        Ok(self.current.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Makes `view` the version the next batch attempts see.
    pub(super) fn publish(&self, view: GlobalView) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(view);
    }

    /// The reader cannot read `topic` any more (`e` is definite).
    pub(super) fn fail(&self, topic: &str, e: rdkafka::error::KafkaError) {
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some((topic.to_string(), e));
    }

    /// Asks the reader to stop (the pipeline ended).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub(super) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// The error of a global table's reader that cannot read `topic`.
pub(super) fn read_error(topic: &str, e: rdkafka::error::KafkaError) -> Error {
    Error::kafka_failure(
        format!("reading global table topic {topic}"),
        crate::error::KafkaError::new(e),
        "check that the table topic exists and is readable by this principal",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Json;
    use crate::table::{declare, TableRef, TableViews};

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Merchant {
        country: String,
    }

    const DE: &[u8] = br#"{"country":"DE"}"#;
    const FR: &[u8] = br#"{"country":"FR"}"#;

    fn country(view: &GlobalView, handle: &crate::table::Table<Merchant>, key: &str) -> Option<String> {
        let rows = TableRef::new(handle, TableViews { partition: None, global: Some(view) });
        rows.get(key).unwrap().map(|m| m.country.clone())
    }

    #[test]
    fn a_published_version_never_changes_and_an_update_copies_only_its_shard() {
        let (def, handle) = declare::<Merchant, _>(0, true, "merchants".into(), Json);
        let mut working = GlobalView::new(1);
        for m in 0..1_000 {
            working.apply(&def, 0, format!("m{m}").as_bytes(), Some(DE));
        }
        let tables = GlobalTables::new(working.clone());
        let v1 = tables.view().unwrap();

        working.apply(&def, 0, b"m1", Some(FR));
        working.apply(&def, 0, b"m2", None);
        working.apply(&def, 0, b"m3", Some(b"not json"));
        assert_eq!(country(&v1, &handle, "m1").as_deref(), Some("DE"), "a taken version is not changed");
        tables.publish(working.clone());
        let v2 = tables.view().unwrap();

        assert_eq!(country(&v1, &handle, "m2").as_deref(), Some("DE"));
        assert_eq!(country(&v2, &handle, "m1").as_deref(), Some("FR"), "the next version has the update");
        assert_eq!(country(&v2, &handle, "m2"), None, "a tombstone deletes the row");
        let bad = TableRef::new(&handle, TableViews { partition: None, global: Some(&v2) }).get("m3");
        assert!(matches!(bad, Err(crate::table::TableError::Decode { ref key, .. }) if key == "m3"), "{bad:?}");
        assert_eq!((v1.sizes(), v2.sizes()), (vec![1_000], vec![999]));

        let shared = (v1.tables[0].shards.iter().zip(&v2.tables[0].shards)).filter(|(a, b)| Arc::ptr_eq(a, b)).count();
        assert!(shared >= SHARDS - 3, "only the 3 updated keys' shards are copied: {shared} of {SHARDS} shared");
    }

    #[test]
    fn a_handle_finds_only_its_own_kind_of_table_and_a_failed_reader_fails_the_view() {
        let (def, global) = declare::<Merchant, _>(0, true, "rates".into(), Json);
        let (_, partitioned) = declare::<Merchant, _>(0, false, "merchants".into(), Json);
        let mut view = GlobalView::new(1);
        view.apply(&def, 0, b"m1", Some(DE));
        assert_eq!(country(&view, &global, "m1").as_deref(), Some("DE"));
        assert_eq!(
            country(&view, &partitioned, "m1"),
            None,
            "a co-partitioned table is not looked up in the global ones"
        );

        let tables = GlobalTables::new(view);
        let e =
            rdkafka::error::KafkaError::MessageConsumption(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition);
        tables.fail("rates", e);
        let err = tables.view().err().expect("a failed reader fails the next attempt").to_string();
        assert!(err.contains("rates"), "{err}");
    }
}
