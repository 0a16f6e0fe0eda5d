//! # kafka-eos-testkit: test support for kafka-eos pipelines
//!
//! - [`driver`]: **no broker, no Java** — a test driver that runs a pipeline's processor
//!   (the same builder, the runtime's own processing code) over piped records with simulated
//!   transactions, changelogs and crashes, and a one-call replay-safety check.
//! - [`broker`]: a real local Apache Kafka cluster (KRaft, jars fetched once from Maven
//!   Central with Maven and cached), started on free ports and stopped with the process;
//!   or your own cluster through `KAFKA_BOOTSTRAP`. Needs Java 17 and Maven. With
//!   `ClusterConfig::fault_proxy`, clients reach it through a [`broker::FaultProxy`] that
//!   delays, holds, cuts or resets the connections to one broker at run time.
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
pub mod driver;
#[cfg(unix)]
pub mod fetch;
#[cfg(unix)]
pub mod postgres;
#[cfg(unix)]
pub mod process;
pub mod read;
#[cfg(unix)]
pub mod redis;
#[cfg(unix)]
pub mod server;
pub mod verify;
pub mod write;
