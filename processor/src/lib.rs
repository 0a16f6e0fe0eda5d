//! # kafka-eos: exactly-once stream processing on Apache Kafka
//!
//! You write a processor — code from an input record to output records and state
//! changes — and kafka-eos runs it as a consumer group, wrapping every batch in a Kafka
//! transaction:
//!
//! ```text
//! begin -> process -> produce outputs -> await acks -> send_offsets_to_transaction -> commit
//! ```
//!
//! with one `transactional.id` per input partition (`<application-id>:<topic>:<partition>`),
//! initialised when the partition is assigned, which fences its previous owner. The effect
//! of every input record lands in the output topics exactly once, across crashes, restarts
//! and rebalances, for readers with `isolation.level=read_committed`.
//!
//! ```no_run
//! use kafka_eos::{codec::Json, OutputRecord, Pipeline};
//!
//! #[derive(serde::Deserialize, serde::Serialize)]
//! struct Payment { merchant: String, cents: i64 }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), kafka_eos::Error> {
//!     let mut builder = Pipeline::builder()
//!         .bootstrap_servers("127.0.0.1:9092")
//!         .application_id("fees")
//!         .input_topic("payments");
//!     let fees = builder.output_topic("fees"); // declared once, listed in the config
//!     let summary = builder
//!         .processor(move |ctx, rec| {
//!             let p: Payment = rec.value_as(&Json)?;
//!             let fee = Payment { merchant: p.merchant.clone(), cents: p.cents / 100 };
//!             ctx.emit(OutputRecord::to(&fees).key(&p.merchant).encode_value(&Json, &fee)?);
//!             Ok(())
//!         })
//!         .handle_signals(true) // SIGINT/SIGTERM stop it gracefully (off by default)
//!         .build()?
//!         .run() // until a signal, the shutdown handle, or the future is dropped
//!         .await?;
//!     println!("{} records in, {} out", summary.records_in, summary.records_out);
//!     Ok(())
//! }
//! ```
//!
//! One [`Processor`](processor::Processor) shape covers sync, async and stateful code, with per-partition
//! `init`/`close` hooks ([`processor`]); stores are declared once with their types
//! ([`state`]); codecs are values ([`codec`]).
//!
//! ## Where things are
//! | module | concept |
//! |---|---|
//! | [`PipelineBuilder`], [`config`] | the pipeline builder, every option's default and trade-off, validation; librdkafka properties |
//! | [`processor`] | the processor trait, its context and closures |
//! | [`InputRecord`], [`OutputRecord`], [`Topic`], [`record`] | records and topics; the headers the runtime writes |
//! | [`codec`] | codecs |
//! | `txn` (private) | the transaction cycle, top to bottom, and its hazards |
//! | `runtime` (private) | the consumer thread, rebalance callbacks, partition tasks |
//! | [`state`] | state stores with changelog topics, restored on assignment |
//! | [`query`] | queryable state: a store's committed value by key from outside the processor, the owner of a key, `/state` over HTTP |
//! | [`table`] | a compacted topic read beside the stream, for stream–table joins |
//! | [`sink`] | sinks outside Kafka (PostgreSQL, Redis): the trait, its guarantees, where the cycle writes them |
//! | [`timers`] | callbacks at an event time or a wall-clock time, per partition, exactly once |
//! | [`operators`] | dedup, event-time windows (tumbling, hopping, sliding, session), windowed stream–stream joins, keyed aggregates, built on stores |
//! | [`observe`] | a hook called after every transaction, with its timings and outcome |
//! | [`health`] | per-partition health (what `/health` serves) |
//! | [`ops`] | Prometheus `/metrics` and `/health` (feature `ops-server`), tracing set-up (feature `logging`) |
//! | [`Error`], [`ErrorClass`], [`KafkaError`] | typed errors and their classification (retriable / abortable / fenced / not authorized / fatal) |
//! | [`acl`] | the ACLs a pipeline needs on a cluster with an authorizer |
//! | [`admin`] | topic creation and topic configuration |
//!
//! The local broker harness, the verifier and test-data helpers are in the
//! `kafka-eos-testkit` crate; the `kafka-eos` command line, the benchmarks and the chaos
//! suite in `kafka-eos-cli`.
//!
//! ## Features
//! | feature | default | brings |
//! |---|---|---|
//! | `json` | on | `codec::Json` (`serde_json`) |
//! | `ops-server` | off | `PipelineBuilder::ops_address`: Prometheus `/metrics` and `/health` over HTTP (`axum`, `metrics-exporter-prometheus`); `PipelineBuilder::serve_store`: `/state/<store>/<key>` |
//! | `logging` | off | `ops::init_tracing`: a `tracing-subscriber` set-up, text or JSON lines |
//! | `ssl` | off | TLS listeners and SASL/SCRAM (librdkafka built with OpenSSL) |
//! | `cmake-build` | off | builds librdkafka with CMake (needed for Windows targets) |
//! | `time-zones` | off | `WindowAlign::days_in`: calendar-day windows in an IANA time zone (`jiff`) |
//! | `test-hooks` | off | outside semver, for `kafka-eos-testkit` and `kafka-eos-cli` only: the test driver's engine, fault injection, benchmark helpers, bridges to rdkafka's types |
//!
//! The library has no global side effects unless asked: no metrics recorder, no HTTP
//! server, no signal handler, and it never exits the process.
//!
//! The guarantees and their costs are in `docs/semantics.md`.
#![warn(missing_docs)]
// The test driver's engine (`testing`, feature `test-hooks`) is the only caller of a few
// crate functions: without the feature they are unused. Workspace builds enable it, so
// their lints still catch dead code.
#![cfg_attr(not(feature = "test-hooks"), allow(dead_code))]

pub mod acl;
pub mod admin;
pub mod codec;
pub mod config;
mod counters;
mod error;
pub mod health;
mod metrics;
pub mod observe;
pub mod operators;
pub mod ops;
mod partition;
mod processing;
pub mod processor;
pub mod query;
pub mod record;
mod runtime;
pub mod sink;
pub mod state;
pub mod table;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod testing;
pub mod timers;
mod txn;

// Every public item has one path. The types every pipeline names are here; a module holds
// the rest of its topic (the processor's items are in `processor`).
pub use config::builder::PipelineBuilder;
pub use config::error_policy::{Exhausted, ProcessorErrorPolicy};
pub use config::group::Rebalancing;
pub use config::guarantee::Guarantee;
pub use config::pipeline::PipelineConfig;
pub use error::{BoxError, Error, ErrorClass, KafkaError, NotAuthorized, Result};
pub(crate) use processor::Context;
pub use record::input::InputRecord;
pub use record::output::OutputRecord;
pub use record::topic::Topic;
pub use runtime::{Pipeline, ShutdownHandle, Summary};
