//! Stateful operators built on [state stores](crate::state): deduplication, tumbling
//! event-time windows and keyed running aggregates.
//!
//! Each operator owns one store: declare it with
//! [`PipelineBuilder::store`](crate::PipelineBuilder::store)`(op.store())` and call the
//! operator from a [stateful processor](crate::PipelineBuilder::stateful_processor) with the
//! record's [`Context`](crate::state::Context). Operators compose by plain code — dedup,
//! then window, then whatever the processor returns:
//!
//! ```no_run
//! use std::time::Duration;
//! use kafka_eos::operators::{Dedup, TumblingWindows};
//! use kafka_eos::{codec::Json, OutputRecord, Pipeline};
//!
//! #[derive(serde::Deserialize, serde::Serialize)]
//! struct Payment { event_id: String, merchant: String, cents: i64, time_ms: i64 }
//!
//! let dedup = Dedup::<String>::new("seen-payments", Duration::from_secs(3600));
//! let daily = TumblingWindows::<String, i64>::new("daily-revenue", Duration::from_secs(86_400), "late-payments")
//!     .allowed_lateness(Duration::from_secs(600));
//! let pipeline = Pipeline::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .application_id("close")
//!     .input_topic("payments")
//!     .store(dedup.store())
//!     .store(daily.store())
//!     .stateful_processor(move |ctx, rec| {
//!         let p: Payment = rec.value_as::<Json, _>()?;
//!         if !dedup.first_seen(ctx, &p.event_id, p.time_ms)? {
//!             return Ok(vec![]);
//!         }
//!         let update = daily.add(ctx, rec, &p.merchant, p.time_ms, |total| *total += p.cents)?;
//!         let mut out: Vec<OutputRecord> = update.late.into_iter().collect();
//!         for w in update.closed {
//!             out.push(OutputRecord::to("revenue").key(format!("{}/{}", w.key, w.start_ms)).value(w.value.to_string()));
//!         }
//!         Ok(out)
//!     })
//!     .build();
//! ```
//!
//! Operators take event time from the caller, never from the wall clock: a replay after an
//! abort, or a restore after a crash, makes exactly the same decisions.

mod aggregate;
mod dedup;
mod window;

pub use aggregate::Aggregate;
pub use dedup::Dedup;
pub use window::{ClosedWindow, TumblingWindows, WindowUpdate, LATE_HEADER};
