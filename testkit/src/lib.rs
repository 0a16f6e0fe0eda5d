//! # kafka-eos-testkit: test support for kafka-eos pipelines
//!
//! - [`broker`]: a real local Apache Kafka cluster (KRaft, jars fetched once from Maven
//!   Central with Maven and cached), started on free ports and stopped with the process;
//!   or your own cluster through `KAFKA_BOOTSTRAP`. Needs Java 17 and Maven.
//! - [`verify`]: reads an input and an output topic `read_committed` and proves
//!   exactly-once: every input has exactly its outputs, none twice, in order.
//! - [`admin`]: topics, writing test data, waiting until a group has caught up.
//! - [`write::Writer`]: a producer for test data kept open across calls (keys, values,
//!   tombstones, headers); [`read`]: a topic's committed records read back.
//! - [`postgres`], [`redis`]: real local PostgreSQL and Redis servers (Debian's packages)
//!   on free ports in temporary directories, for the sinks' tests; they die with the
//!   process that started them, like the broker.
//!
//! The broker and server harnesses control processes through POSIX signals: they build on
//! Unix only.
#![warn(missing_docs)]

pub mod admin;
#[cfg(unix)]
pub mod broker;
#[cfg(unix)]
pub mod postgres;
// The broker's process plumbing (spawner thread with PDEATHSIG, exit hook), shared by the
// server harnesses. `broker` keeps its own copy private; this second compilation of the same
// file has its own spawner thread and exit hook, which is harmless. Once the broker module
// exposes it, this becomes a plain `use`.
#[cfg(unix)]
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "broker/process.rs"]
mod process;
pub mod read;
#[cfg(unix)]
pub mod redis;
#[cfg(unix)]
pub mod server;
pub mod verify;
pub mod write;
