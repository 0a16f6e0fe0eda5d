//! Why a query could not be answered at all (an answer that says "ask elsewhere" or "not
//! yet" is a [`QueryAnswer`](super::QueryAnswer), not an error).

use crate::state::StateError;

/// Why a query of a store could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The pipeline is not running: state is queryable from the start of
    /// [`Pipeline::run`](crate::Pipeline::run) (once its start-up checks passed) until it
    /// returns.
    #[error(
        "the pipeline is not running: its state can be queried once Pipeline::run has started, until it \
         returns"
    )]
    NotRunning,
    /// The store handle was declared on another pipeline's builder.
    #[error(
        "store {store:?} was declared on another pipeline's builder: query with the handle this \
         pipeline's builder returned"
    )]
    ForeignStore {
        /// The store.
        store: String,
    },
    /// The store's backend offers no reads beside its partition task
    /// ([`KeyValueBackend::committed_reader`](crate::state::backend::KeyValueBackend::committed_reader)
    /// is `None`), so its state cannot be queried.
    #[error(
        "store {store:?} keeps its state in a backend that cannot be read beside its partition task \
         (KeyValueBackend::committed_reader is None): it cannot be queried"
    )]
    Unsupported {
        /// The store.
        store: String,
    },
    /// The committed state could not be read (a disk backend's read failed) or does not
    /// decode as the store's types.
    #[error(transparent)]
    State(#[from] StateError),
}
