//! Integration tests against a real Apache Kafka broker: one binary, one broker.
//!
//! The broker is started once for the whole binary (a 1-node KRaft cluster from Maven
//! Central jars, see `kafka_eos_testkit::broker`), or taken from `KAFKA_BOOTSTRAP` when set. Each
//! test uses its own topics and application id, so tests run in parallel.

mod aborts;
mod acls;
mod cli;
mod common;
mod diskstate;
mod eos;
mod equivalence;
mod failures;
mod fencing;
mod global_tables;
mod interrupt;
mod joins;
mod ops;
mod query;
mod rebalance;
mod repartition;
mod restore;
mod scale;
mod security;
mod sinks;
mod stale_state;
mod standby;
mod startup;
mod state;
mod tables;
mod timers;
mod unknown_outcome;
mod versions;
mod windows;
