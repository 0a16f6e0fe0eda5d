//! The runtime: a consumer thread, partition tasks, and the glue between them and async code.
//!
//! ```text
//!   async caller ── Pipeline::run ──> [consumer thread] ── records, assign/revoke ──> [task thread] x N
//!        ^                                │   ^                                            │
//!        └──── Summary / Error ───────────┘   └──── control: commit offsets, fenced, fatal ┘
//! ```
//!
//! - The **consumer thread** ([`consumer`]) owns the librdkafka consumer, polls it, routes
//!   each record to the task owning its partition, and runs the rebalance callbacks. On
//!   assignment it starts the partitions' tasks and waits until their producers are
//!   initialised *before* librdkafka fetches the committed offsets; on revocation it waits,
//!   bounded by the task timeout, until the tasks have committed their batches.
//! - A task busy with a failing batch is **interrupted** ([`interrupt`]) on revocation,
//!   lost partitions and shutdown: it drops the batch by a short deadline instead of
//!   replaying it until the task timeout while the consumer thread (and the group's
//!   rebalance) waits for it.
//! - Each **task** ([`task`]) owns a producer and runs the transaction cycle
//!   ([`crate::txn`]) on its own OS thread: blocking librdkafka calls never run on an async
//!   worker thread. A transaction whose outcome is unknown is fenced and reconciled by the
//!   task itself ([`reconcile`]), without a rebalance.
//! - Deadlock freedom: tasks never wait for the consumer thread (they write to an unbounded
//!   control channel), so the consumer thread may wait for them; every wait has a timeout.

pub(crate) mod consumer;
pub(crate) mod interrupt;
pub(crate) mod limits;
mod pending;
mod pipeline;
pub(crate) mod preflight;
pub(crate) mod reconcile;
mod registry;
mod shared;
mod shutdown;
pub(crate) mod slots;
mod stats;
pub(crate) mod task;

pub use pipeline::Pipeline;
pub(crate) use shared::{Control, Shared, POLL_INTERVAL};
pub use shutdown::ShutdownHandle;
pub use stats::Summary;
