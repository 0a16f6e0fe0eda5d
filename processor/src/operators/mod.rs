//! Stateful operators built on [state stores](crate::state): deduplication, event-time
//! windows (tumbling, hopping, sliding, session; see [their rules](#windows)), keyed running
//! aggregates and a windowed stream–stream join ([`StreamJoin`]).
//!
//! Each operator owns one store, declared on the builder by the operator's constructor
//! (`Dedup::new(&mut builder, "seen-payments", ttl)`), and is called from the processor
//! with the record's [`Context`](crate::Context). Operators are cheap to clone (handles),
//! so a processor closure captures them. They compose by plain code — dedup, then window,
//! then whatever the processor emits:
//!
//! ```no_run
//! use std::time::Duration;
//! use kafka_eos::operators::{Dedup, TumblingWindows};
//! use kafka_eos::{codec::Json, OutputRecord, Pipeline};
//!
//! #[derive(serde::Deserialize, serde::Serialize)]
//! struct Payment { event_id: String, merchant: String, cents: i64, time_ms: i64 }
//!
//! let mut builder = Pipeline::builder().bootstrap_servers("127.0.0.1:9092").application_id("close").input_topic("payments");
//! let dedup = Dedup::<String>::new(&mut builder, "seen-payments", Duration::from_secs(3600));
//! let daily = TumblingWindows::<String, i64>::new(&mut builder, "daily-revenue", Duration::from_secs(86_400), "late-payments")
//!     .allowed_lateness(Duration::from_secs(600));
//! let revenue = builder.output_topic("revenue");
//! let pipeline = builder
//!     .processor(move |ctx, rec| {
//!         let p: Payment = rec.value_as(&Json)?;
//!         if !dedup.first_seen(ctx, &p.event_id, p.time_ms)? {
//!             return Ok(());
//!         }
//!         let update = daily.add(ctx, rec, &p.merchant, p.time_ms, |total| *total += p.cents)?;
//!         if let Some(late) = update.late {
//!             ctx.emit(late);
//!         }
//!         for w in update.closed {
//!             ctx.emit(OutputRecord::to(&revenue).key(format!("{}/{}", w.key, w.start_ms)).value(w.value.to_string()));
//!         }
//!         Ok(())
//!     })
//!     .build();
//! ```
//!
//! Operators take event time from the caller, never from the wall clock: a replay after an
//! abort, or a restore after a crash, makes exactly the same decisions.
//!
//! # Windows
//!
//! Event-time windows with a per-partition watermark: [`TumblingWindows`],
//! [`HoppingWindows`] (both cut on a grid, [`WindowAlign`]: fixed, offset, calendar days in
//! a time zone), [`SlidingWindows`] and [`SessionWindows`] (cut by the records themselves).
//!
//! Shared by every kind:
//! - **Watermark**, per input partition: the largest event time seen minus the allowed
//!   lateness (default zero). It only moves forward (with records, or with
//!   [`advance`](TumblingWindows::advance), which a timer or heartbeat can call) and lives in
//!   the window's store, so it survives restarts.
//! - A window **closes** once the watermark reaches its end (a session: its last record +
//!   gap; a sliding window: just past the record it ends at): its result is returned once,
//!   with revision 0, in [`WindowUpdate::closed`] — in the transaction that closed it.
//!   Closing sweeps the store; sliding and session windows, which close at any time, sweep
//!   at most once per quarter size or gap of watermark progress, so their results may come
//!   that much after their close.
//! - **Retention** (default zero): how long, in event time past its close, a closed window
//!   keeps its aggregate. A late record whose window closed less than the retention ago is
//!   folded in and the window is emitted again as a **correction** (revision + 1). Past the
//!   retention — always, with the default — the record goes to the late-records topic with
//!   [`LATE_HEADER`].

mod aggregate;
mod dedup;
mod join;
mod window;

pub use aggregate::Aggregate;
pub use dedup::Dedup;
pub use join::{JoinUpdate, Joined, StreamJoin};
pub use window::{
    ClosedWindow, HoppingWindows, RetractedWindow, SessionWindows, SlidingWindows, TumblingWindows, WindowAlign,
    WindowError, WindowUpdate, LATE_HEADER,
};
