//! # kafka-eos-cli: the tooling around kafka-eos
//!
//! The library half of the `kafka-eos` command line, shared with the benchmarks
//! (`benches/`) and the integration tests (`tests/it`):
//!
//! - [`bench`](mod@bench): what each guarantee costs (`kafka-eos bench`, `cargo bench`);
//! - [`chaos`]: exactly-once under injected faults (`kafka-eos chaos`);
//! - [`scale`]: what scaling out and in costs: partitions pausing, threads, memory;
//! - [`workloads`]: the financial-close workload shared by the chaos suite and the tests;
//! - [`client_config`]: `client.properties` files (`--client-config`);
//! - [`java`]: the apps written with Kafka's own Java clients (benchmark peers, chaos subjects).
//!
//! It runs processes and sends them POSIX signals: it builds on Unix only.
#![warn(missing_docs)]

pub mod bench;
pub mod chaos;
pub mod client_config;
pub mod java;
pub mod scale;
pub mod workloads;
