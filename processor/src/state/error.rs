//! Why a store operation, or a store's restore, failed: the error every layer that touches
//! state (stores, operators, the restore, the transaction cycle) reports.

use super::backend::BackendError;

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
    /// (see [`format`](mod@super::format)): the store's partition is not restored and the pipeline stops,
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
