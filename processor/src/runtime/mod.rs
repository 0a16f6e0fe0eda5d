//! The runtime: a consumer thread, partition tasks, and the glue between them and async code.
//!
//! ```text
//!   async caller ── Pipeline::run ──> [consumer thread] ── records, assign/revoke ──> [task thread] x N
//!        ^                                │   ^                                            │
//!        └──── Summary / Error ───────────┘   └──── control: commit offsets, fenced, fatal ┘
//! ```
//!
//! The [`consumer`] thread owns the librdkafka consumer; its loop and the rebalance callbacks
//! call into the task manager (`task_manager`: the tasks, the routes to them, their starts,
//! revocations and recovery). Each [`task`] runs the transaction cycle ([`crate::txn`]) on
//! its own OS thread, so blocking librdkafka calls never run on an async worker, and
//! reconciles unknown outcomes itself ([`reconcile`]); a busy task is [`interrupt`]ed on
//! revocation and shutdown. The messages
//! between the two sides are in [`protocol`]. Deadlock freedom: tasks never wait for the
//! consumer thread, so it may wait for them, always with a timeout.

pub(crate) mod consumer;
pub(crate) mod interrupt;
pub(crate) mod limits;
mod pipeline;
pub(crate) mod preflight;
pub(crate) mod protocol;
pub(crate) mod purge;
pub(crate) mod reconcile;
mod shared;
mod shutdown;
pub(crate) mod slots;
mod stats;
pub(crate) mod task;
mod task_manager;
mod wake;

pub use pipeline::Pipeline;
pub(crate) use shared::{Shared, Unread, POLL_INTERVAL};
pub use shutdown::ShutdownHandle;
pub use stats::Summary;
