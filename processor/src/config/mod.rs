//! Pipeline configuration: the builder, every option's default and the trade-off behind it,
//! and the validation that rejects unsafe combinations before anything connects.
//!
//! ```no_run
//! use std::time::Duration;
//! use kafka_eos::{Guarantee, OutputRecord, Pipeline, ProcessorErrorPolicy};
//! # async fn demo() -> Result<(), kafka_eos::Error> {
//! let mut builder = Pipeline::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .application_id("uppercase")
//!     .input_topic("words")
//!     .guarantee(Guarantee::ExactlyOncePerPartition)
//!     .commit_interval(Duration::from_millis(100))
//!     .on_processor_error(ProcessorErrorPolicy::retry(2).then_dead_letter("words-dlq"));
//! let upper = builder.output_topic("words-upper");
//! let pipeline = builder
//!     .processor(move |ctx, rec| {
//!         let value = rec.value.as_deref().unwrap_or_default().to_ascii_uppercase();
//!         ctx.emit(OutputRecord::to(&upper).value(value));
//!         Ok(())
//!     })
//!     .build()?;
//! assert_eq!(pipeline.config().output_topics, ["words-upper"]);
//! let summary = pipeline.run().await?;
//! println!("{summary:?}");
//! # Ok(()) }
//! ```

pub(crate) mod acls;
pub(crate) mod builder;
mod describe;
pub(crate) mod error_policy;
mod fault;
pub(crate) mod group;
pub(crate) mod guarantee;
pub(crate) mod pipeline;
mod properties;

// The builder and its options are exported at the crate root, their one public path.
pub use describe::TopologyDescription;
pub(crate) use error_policy::{Exhausted, ProcessorErrorPolicy};
pub(crate) use fault::FaultInjection;
#[cfg(not(feature = "test-hooks"))]
pub(crate) use fault::UnknownOutcome;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use fault::UnknownOutcome;
pub(crate) use group::{GroupSettings, Rebalancing};
pub(crate) use guarantee::Guarantee;
pub(crate) use pipeline::PipelineConfig;
pub(crate) use pipeline::DEFAULT_MAX_CONCURRENT_TRANSACTIONS;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use properties::client_error;
#[cfg(not(feature = "test-hooks"))]
pub(crate) use properties::client_error;
pub use properties::{is_sensitive, Properties};
