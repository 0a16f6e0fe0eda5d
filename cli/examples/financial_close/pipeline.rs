//! The financial close's pipeline: payment events → daily revenue per merchant, exactly
//! once. `main.rs` runs it on a broker; the chaos suite and the benchmarks run this same
//! file (`kafka_eos_cli::workloads::financial_close`).
//!
//! Payments (`event_id`, `merchant`, `amount_cents` as an integer, event time) arrive keyed
//! by merchant, with some events delivered twice (an upstream retry) and some arriving days
//! late. The pipeline ([`pipeline`]):
//!
//! 1. drops repeated `event_id`s with [`Dedup`] (defence in depth: exactly-once processing
//!    does not remove duplicates that are already in the input);
//! 2. folds each payment into its merchant's **business day in Europe/Berlin** (calendar
//!    days from local midnight: 23 hours on the day clocks go forward, 25 on the day they go
//!    back) with [`TumblingWindows`] on [`business_days`] (one hour of allowed lateness); a
//!    day's total is emitted when the partition's watermark passes the day's end, keyed by
//!    `merchant/date` so a downstream upsert is idempotent;
//! 3. **corrects** a closed day when a payment for it comes late but within
//!    [`CORRECTION_RETENTION`]: the day is emitted again with the new total and its
//!    revision + 1 (a reader of the compacted revenue topic always holds the right figure);
//!    a payment later than that goes to the late-payments topic, unchanged;
//! 4. closes each day by an event-time [timer](kafka_eos::timers) at its end plus the
//!    lateness: the payments of later days fire it, and on a partition that receives no
//!    more payments the idle advance does ([`IDLE_CLOSE`] after its last one) — so the
//!    period's last day closes without heartbeat records. (A `Tick` heartbeat still
//!    advances the stream time, for sources that send one.)
//! 5. enriches each payment from the merchant table (a compacted topic keyed and
//!    partitioned like the payments, joined with [`kafka_eos::table`]): the day's total
//!    carries the processing fees at each merchant's rate. A payment of a merchant without
//!    a row is charged no fee (the reconciliation would count it as a mismatch);
//! 6. keeps each merchant's **running revenue** (every distinct payment, day closed or not)
//!    in a store ([`RUNNING_STORE`]) that `main.rs` serves over HTTP while the pipeline runs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use kafka_eos::codec::Json;
use kafka_eos::operators::{ClosedWindow, Dedup, TumblingWindows, WindowAlign};
use kafka_eos::processor::{Context, ProcessError, Processor};
use kafka_eos::state::Store;
use kafka_eos::table::Table;
use kafka_eos::timers::{StreamTime, Timer, TimerSpec, Timers};
use kafka_eos::{InputRecord, OutputRecord, Topic};
use kafka_eos::{PipelineBuilder, Result};
use kafka_eos_testkit::admin;

/// A UTC day, in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// The workload's topics.
#[derive(Debug, Clone)]
pub struct Topics {
    /// Input: [`Event`]s, JSON, keyed by merchant.
    pub payments: String,
    /// Output: [`DailyRevenue`], JSON, keyed `merchant/day`.
    pub revenue: String,
    /// Output: late payments, copied unchanged.
    pub late: String,
    /// Table: [`Merchant`]s, JSON, keyed and partitioned like the payments; compacted.
    pub merchants: String,
}

impl Topics {
    /// `payments-<suffix>`, `revenue-<suffix>`, `late-payments-<suffix>`, `merchants-<suffix>`.
    pub fn with_suffix(suffix: &str) -> Topics {
        Topics {
            payments: format!("payments-{suffix}"),
            revenue: format!("revenue-{suffix}"),
            late: format!("late-payments-{suffix}"),
            merchants: format!("merchants-{suffix}"),
        }
    }

    /// Creates the four topics with `partitions` partitions each (the merchant table
    /// compacted), with `configs` on each.
    pub fn create(
        &self,
        admin: &admin::Client,
        partitions: i32,
        replication: i32,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        for t in [&self.payments, &self.revenue, &self.late] {
            admin.create_topic_with(t, partitions, replication, configs)?;
        }
        let table: Vec<(&str, &str)> = configs.iter().copied().chain([("cleanup.policy", "compact")]).collect();
        admin.create_topic_with(&self.merchants, partitions, replication, &table)
    }
}

/// One input record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A payment.
    Payment(Payment),
    /// A heartbeat carrying only event time (a source's end-of-period marker): it advances
    /// the partition's watermark so the last days close without waiting for more payments.
    Tick {
        /// Event time, ms since the epoch.
        time_ms: i64,
    },
}

/// A payment event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    /// Unique per payment; a redelivered payment repeats it.
    pub event_id: u64,
    /// The merchant paid.
    pub merchant: u32,
    /// Amount in integer cents (never floating point for money).
    pub amount_cents: i64,
    /// Event time, ms since the epoch.
    pub time_ms: i64,
}

/// A merchant-table row: the merchant's processing fee.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merchant {
    /// Fee in basis points (1/100 of a percent) of each payment.
    pub fee_bps: u32,
}

impl Merchant {
    /// The fee of a payment of `cents`, rounded down to the cent.
    pub fn fee(&self, cents: i64) -> i64 {
        cents * self.fee_bps as i64 / 10_000
    }
}

/// One merchant's revenue for one business day: the output record's value. A corrected
/// day is emitted again with a higher `revision`; the latest revision is the day's figure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DailyRevenue {
    /// The merchant.
    pub merchant: u32,
    /// The business day: its local date in [`BUSINESS_TIME_ZONE`] (`2026-03-29`).
    pub day: String,
    /// 0 when the day closed; 1, 2, ... for each correction by a late payment.
    pub revision: u32,
    /// Total, in cents.
    pub cents: i64,
    /// Processing fees of those payments at the merchant's rate, in cents.
    pub fee_cents: i64,
    /// Payments counted.
    pub payments: u64,
}

/// The running total of one merchant-day inside its window.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct DayTotal {
    /// Cents so far.
    pub cents: i64,
    /// Fees so far, in cents.
    pub fee_cents: i64,
    /// Payments so far.
    pub payments: u64,
}

/// The output key of a merchant-day (`day`: the local date).
pub fn revenue_key(merchant: u32, day: &str) -> String {
    format!("{merchant}/{day}")
}

/// The time zone of the business days.
pub const BUSINESS_TIME_ZONE: &str = "Europe/Berlin";

/// The business days: calendar days in [`BUSINESS_TIME_ZONE`].
pub fn business_days() -> WindowAlign {
    WindowAlign::days_in(BUSINESS_TIME_ZONE).expect("the time-zone database is compiled in")
}

/// How long (event time) after its close a day still takes late payments, as corrections.
pub const CORRECTION_RETENTION: Duration = Duration::from_secs(3 * 86_400);

/// The store names, the dedup TTL and the window lateness.
pub const DEDUP_STORE: &str = "payment-ids";
/// The store of the open daily windows.
pub const WINDOW_STORE: &str = "daily-revenue";
/// The store of the day-closing timers.
pub const TIMER_STORE: &str = "day-close";
/// The store of each merchant's running revenue: every distinct payment's cents, closed day
/// or not, late or not (what a dashboard asks while the day is open).
pub const RUNNING_STORE: &str = "running-revenue";
/// How long a partition waits without a payment before its stream time follows the wall
/// clock, closing the days it still holds open (the last day of the period, with no
/// heartbeat record).
pub const IDLE_CLOSE: Duration = Duration::from_secs(5);
/// How late (event time) a payment may be and still count in its day.
const LATENESS_MS: i64 = 3_600_000;

/// Adds the financial-close input, stores and stateful processor to `builder`.
pub fn pipeline(builder: PipelineBuilder, topics: &Topics) -> PipelineBuilder {
    pipeline_with_running_revenue(builder, topics).0
}

/// [`pipeline`], and the handle of the merchants' running revenue ([`RUNNING_STORE`]), to
/// query or serve.
pub fn pipeline_with_running_revenue(builder: PipelineBuilder, topics: &Topics) -> (PipelineBuilder, Store<u32, i64>) {
    let mut builder = builder.input_topic(&topics.payments);
    let running = builder.store::<u32, i64>(RUNNING_STORE);
    // The TTL (event time, against the partition's latest payment) outlasts the latest a
    // payment, or its redelivered copy, can come: six days behind.
    let dedup = Dedup::<u64>::new(&mut builder, DEDUP_STORE, Duration::from_secs(8 * 86_400));
    let days = business_days();
    let daily = TumblingWindows::<u32, DayTotal>::aligned(&mut builder, WINDOW_STORE, days.clone(), &topics.late)
        .allowed_lateness(Duration::from_millis(LATENESS_MS as u64))
        .retention(CORRECTION_RETENTION);
    // The event time is the payment's, in the payload: the record timestamps (produce
    // times) must not move the stream time.
    let spec = TimerSpec::new(TIMER_STORE).stream_time(StreamTime::Advanced).idle_advance(IDLE_CLOSE);
    let timers = Timers::with(&mut builder, spec);
    let merchants = builder.table::<Merchant, _>(&topics.merchants, Json);
    let revenue = builder.output_topic(&topics.revenue);
    let close = Close { dedup, daily, days, timers, merchants, revenue, running: running.clone() };
    (builder.processor_impl(close), running)
}

/// The processor: dedup → merchant fee (table join) → daily window, each day closed by the
/// payments that pass its end or, on a partition that stays idle, by its timer.
#[derive(Clone)]
struct Close {
    dedup: Dedup<u64>,
    daily: TumblingWindows<u32, DayTotal>,
    days: WindowAlign,
    timers: Timers,
    merchants: Table<Merchant>,
    revenue: Topic,
    running: Store<u32, i64>,
}

impl Close {
    fn emit(&self, ctx: &mut Context<'_>, closed: Vec<ClosedWindow<u32, DayTotal>>) -> Result<(), ProcessError> {
        for w in closed {
            let day = self.days.label(w.start_ms);
            let key = revenue_key(w.key, &day);
            let t = w.value;
            let (cents, fee_cents, payments) = (t.cents, t.fee_cents, t.payments);
            let value = DailyRevenue { merchant: w.key, day, revision: w.revision, cents, fee_cents, payments };
            ctx.emit(OutputRecord::to(&self.revenue).key(key).encode_value(&Json, &value)?);
        }
        Ok(())
    }
}

impl Processor for Close {
    async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
        let closed = match rec.value_as::<Event>(&Json)? {
            Event::Tick { time_ms } => {
                self.timers.advance_stream_time(ctx, time_ms)?;
                self.daily.advance(ctx, time_ms)?
            }
            Event::Payment(p) => {
                if !self.dedup.first_seen(ctx, &p.event_id, p.time_ms)? {
                    return Ok(());
                }
                // The table is keyed like the payments: by the merchant id, as text.
                let mut running = ctx.store(&self.running);
                let so_far = running.get(&p.merchant)?.unwrap_or(0) + p.amount_cents;
                running.put(&p.merchant, &so_far)?;
                let fee = ctx.table(&self.merchants).get(p.merchant.to_string())?.map_or(0, |m| m.fee(p.amount_cents));
                let update = self.daily.add(ctx, rec, &p.merchant, p.time_ms, |t| {
                    t.cents += p.amount_cents;
                    t.fee_cents += fee;
                    t.payments += 1;
                })?;
                if let Some(late) = update.late {
                    ctx.emit(late);
                    return Ok(());
                }
                // The day closes when the stream time passes its end plus the lateness:
                // one timer per day (scheduling it again is a no-op). Not for a
                // correction (the update re-emits the payment's own day): it has closed.
                // Whatever the stream time: an idle advance may have moved it past the day
                // already (to the wall clock, months ahead of a replay's payments), and a
                // day opened then still needs its timer, which then fires right after this
                // payment and closes it; without one it would stay open for good.
                let (start, end) = self.days.window_of(p.time_ms);
                if !update.closed.iter().any(|w| w.key == p.merchant && w.start_ms == start) {
                    let close_at = end + LATENESS_MS;
                    self.timers.at_event_time(ctx, close_at, close_at as u64)?;
                }
                self.timers.advance_stream_time(ctx, p.time_ms)?;
                update.closed
            }
        };
        self.emit(ctx, closed)
    }

    async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        let closed = self.daily.advance(ctx, timer.at_ms)?;
        self.emit(ctx, closed)
    }
}
