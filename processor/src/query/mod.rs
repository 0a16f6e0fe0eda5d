//! Queryable state: the committed state of a running pipeline's stores, read by key (or
//! scanned) from outside the processor, and the metadata that finds which instance owns a
//! key.
//!
//! ```no_run
//! use kafka_eos::query::QueryAnswer;
//! use kafka_eos::Pipeline;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut builder = Pipeline::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .application_id("close")
//!     .input_topic("payments") // keyed by merchant id, murmur2 (the Java client's default)
//!     .advertised_endpoint("close-0.close:9100"); // where the others reach this instance
//! let revenue = builder.store::<String, i64>("revenue");
//! let totals = revenue.clone(); // the processor's copy of the handle
//! let pipeline = builder
//!     .processor(move |ctx, rec| {
//!         let merchant = String::from_utf8(rec.key.clone().unwrap_or_default())?;
//!         let cents: i64 = std::str::from_utf8(rec.value.as_deref().unwrap_or_default())?.parse()?;
//!         let mut store = ctx.store(&totals);
//!         let total = store.get(&merchant)?.unwrap_or(0) + cents;
//!         store.put(&merchant, &total)?;
//!         Ok(())
//!     })
//!     .build()?;
//! let query = pipeline.state_query();
//! tokio::spawn(pipeline.run());
//! // later, from any thread:
//! match query.get(&revenue, &"m-42".to_string())? {
//!     QueryAnswer::Found(cents) => println!("m-42: {cents} cents so far"),
//!     QueryAnswer::Absent => println!("m-42: no payment committed yet"),
//!     QueryAnswer::NotOwnedHere { owner, .. } => println!("ask {owner:?}"),
//!     QueryAnswer::NotReady { .. } => println!("restoring: ask again shortly"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```
//!
//! # What a query sees: the last committed transaction
//! A store's changes sit in the open transaction's overlay until the Kafka commit, and only
//! then are merged into the committed backend ([`crate::state`]). A query reads the
//! backend alone, through its [`CommittedReader`](crate::state::backend::CommittedReader),
//! so it sees each key as the last committed transaction of its partition left it: never
//! an open batch's changes, never an aborted one's. The in-memory backend shares its map
//! with its readers behind a read-write lock that the partition task takes for writing only
//! while it merges a committed transaction, all of its changes under one lock: a query sees
//! a transaction whole or not at all. (A lock rather than copy-on-write versions, as the
//! [global tables](crate::table) keep: a version per commit would copy a shard per
//! transaction of every partition, for reads that are rare next to the writes.) A query is
//! served only for a partition that the group assigned to this instance *and* whose stores
//! the instance has restored: during a restore the answer is
//! [`NotReady`](QueryAnswer::NotReady), after a revocation
//! [`NotOwnedHere`](QueryAnswer::NotOwnedHere). Two reads may straddle a commit, and
//! partitions commit independently: a scan is not a snapshot of the store.
//!
//! A pipeline whose state is queried (an advertised endpoint, a store served over HTTP, or
//! a [`StateQuery`] taken with [`Pipeline::state_query`](crate::Pipeline::state_query))
//! restores a partition's stores as soon as the partition is assigned, not at its first
//! record, so that a partition without new input answers too.
//!
//! # Which instance owns a key
//! The key's input partition is found with the [`Partitioner`] the input's producers use
//! ([`PipelineBuilder::input_partitioner`](crate::PipelineBuilder::input_partitioner);
//! default murmur2, as the Java client: librdkafka producers must set
//! `partitioner=murmur2_random`), and the partition's owner from the **endpoints topic**
//! `<application-id>-endpoints`: each instance that
//! [advertises an endpoint](crate::PipelineBuilder::advertised_endpoint) publishes its
//! assignment there whenever it changes, and reads everyone's (`query/endpoints.rs`; the rule that
//! resolves stale adverts is in `query/adverts.rs`). Why a topic, and not the group itself:
//! - the group's member metadata (Kafka Streams puts `application.server` in its
//!   assignor's user data) needs a custom assignor, which rust-rdkafka does not expose,
//!   and does not exist under the KIP-848 consumer protocol, where the broker assigns;
//! - reading the assignment from the group's description (DescribeGroups, with the
//!   endpoint in `client.id`) decodes the classic protocols' assignment bytes, which
//!   KIP-848 groups do not have (they answer ConsumerGroupDescribe, which librdkafka's
//!   admin API does not offer through rust-rdkafka), and takes the application's
//!   `client.id`;
//! - a compacted topic works the same under every rebalance protocol (cooperative-sticky,
//!   eager, KIP-848), costs one small record per instance per rebalance, and is read by
//!   each instance from its start (one partition, so in one order everywhere).
//!
//! The price is a lag: an owner is known once its advert is read back (about 100 ms after
//! its assignment, more while the broker is slow), and until then the answer has no
//! owner. An instance that crashed keeps its last advert until its partitions' next owner
//! advertises them; one that stops withdraws it. An instance the group has already
//! replaced but that has not learnt it yet (a zombie, before its session times out)
//! still answers for its partitions: with committed values, possibly older than the new
//! owner's.
//!
//! # Over HTTP
//! With the feature `ops-server`, the ops server also answers `GET /state/<store>/<key>`
//! for the stores declared with `PipelineBuilder::serve_store`: the value as JSON
//! from the owner, or a `307` redirect to the owner's endpoint (`query/http.rs` has every
//! answer, and why a redirect and not a forward).

mod adverts;
mod answer;
pub(crate) mod endpoints;
mod error;
mod handle;
#[cfg(feature = "ops-server")]
pub(crate) mod http;
mod partitioner;
pub(crate) mod registry;
#[cfg(feature = "ops-server")]
pub(crate) mod served;

pub use adverts::Instance;
pub use answer::{KeyMetadata, LocalScan, QueryAnswer};
pub use error::QueryError;
pub use handle::StateQuery;
pub use partitioner::{murmur2, PartitionKey, Partitioner};
pub(crate) use registry::Registry;
