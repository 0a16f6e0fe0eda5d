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
pub(crate) mod base;
mod cell;
pub(crate) mod changelog;
pub(crate) mod checkpoint;
mod error;
// The encoding's constants are for the benchmarks that write changelogs themselves.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod format;
#[cfg(not(feature = "test-hooks"))]
pub(crate) mod format;
mod partition;
pub(crate) mod standby;
mod store;

pub(crate) use crate::counters::Tally;
pub use error::StateError;
pub use partition::changelog_topic;
#[cfg(feature = "test-hooks")]
pub(crate) use partition::Entries;
pub(crate) use partition::{ChangelogEnds, Committed, PartitionState};
pub use store::{Store, StoreDef, StoreMut, StoreRef, StoreSpec};

/// Restores the stores of input `partitions` from their changelogs exactly as an assignment
/// would, then drops them, and returns the number of changelog records read: what a
/// restore costs, for benchmarks (feature `test-hooks`, outside semver). Blocks until done
/// or `deadline`.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn measure_restore(
    cfg: &crate::PipelineConfig,
    partitions: &[i32],
    deadline: std::time::Instant,
) -> crate::Result<u64> {
    changelog::restore(cfg, partitions, deadline, None).map(|r| r.records)
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

    /// What a query reads: the committed state only, never the open transaction's overlay.
    #[test]
    fn a_committed_reader_sees_a_transaction_only_once_committed() {
        let (h, mut st) = state::<String, u64>();
        let reader = st.committed_readers().remove(0).expect("memory has a reader");
        let key = format::encode_key(&"a".to_string()).unwrap();
        st.store_mut(&h).put(&"a".into(), &1).unwrap();
        assert_eq!(reader.get(&key).unwrap(), None, "an open transaction is not seen");
        st.commit(&ChangelogEnds::new());
        assert_eq!(reader.get(&key).unwrap(), Some(format::encode_value(1, &1u64).unwrap()));
        st.store_mut(&h).put(&"a".into(), &2).unwrap();
        st.abort();
        assert_eq!(reader.get(&key).unwrap(), Some(format::encode_value(1, &1u64).unwrap()), "nor an aborted one");
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
