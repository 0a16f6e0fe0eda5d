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
//! - A **[`Trigger`]** (`.trigger(..)` on any kind) decides what a window reports before its
//!   close, in [`WindowUpdate::triggered`]: nothing ([`Trigger::at_close`], the default),
//!   every update ([`Trigger::every_update`]), or one report the first time a predicate on
//!   the aggregate holds ([`Trigger::threshold`]; the "has fired" flag is stored in the
//!   window's state, so replays and restores neither repeat nor lose it). Results at close
//!   and corrections come in [`WindowUpdate::closed`] under every trigger.
//! - `add_with_window` (tumbling, hopping, session) is `add` with the fold told the
//!   [`Window`] it folds into. Sliding windows fold once per record, into a contribution
//!   merged into every window covering it, so their fold has no single window to be told:
//!   [`Trigger::every_update`] lists those windows.
//!
//! ## Order of updates
//!
//! One `add` call does, in this order:
//! 1. **The folds.** The record is folded into the windows it updates, one after the
//!    other; right after each fold the trigger decides whether that window joins
//!    `triggered`, and a window that had already closed (within its retention) joins
//!    `closed` as a correction. So both lists are in fold order, which per kind is:
//!    - tumbling: the record's one window;
//!    - hopping: its `size / advance` windows by start, earliest first (those past their
//!      retention are skipped, and the record is also in `late`);
//!    - sliding: the window ending at the record's time, then every later window of its key
//!      that covers it, by end;
//!    - session: the one session it joins, after merging the sessions it bridges (reported
//!      under the merged start; the starts merged away are in `retracted`).
//! 2. **The close.** The watermark advances to the record's time (less the lateness); the
//!    windows that closes are appended to `closed`, revision 0, by end then start.
//!
//! So `closed` holds this record's corrections first, then the windows its watermark
//! closed. A window the record updated and its advance then closed is in `triggered`
//! (with the record) and then in `closed`: emit `triggered` before `closed` and a reader
//! sees each window's updates, then its result. `advance` only closes: it folds nothing,
//! so it never triggers.
//!
//! Under [`Trigger::threshold`] a session merged from several has fired if any of them
//! had: the merged session is reported only if none had, and the predicate holds on the
//! merged aggregate with the record folded in. A late record that creates a sliding window
//! (the one ending at its time) reports it like any other update.

mod aggregate;
mod dedup;
mod join;
mod window;

pub use aggregate::Aggregate;
pub use dedup::Dedup;
pub use join::{JoinUpdate, Joined, StreamJoin};
pub use window::{
    ClosedWindow, HoppingWindows, RetractedWindow, SessionWindows, SlidingWindows, Trigger, TriggeredWindow,
    TumblingWindows, Window, WindowAlign, WindowError, WindowUpdate, LATE_HEADER,
};
