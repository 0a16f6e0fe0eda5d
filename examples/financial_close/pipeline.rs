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
//! 2. folds each payment into its merchant's day with daily [`TumblingWindows`] (one hour
//!    of allowed lateness); a day's total is emitted once, when the partition's watermark
//!    passes the day's end, keyed by `(merchant, day)` so a downstream upsert is idempotent;
//! 3. routes payments for a day already closed to the late-payments topic, unchanged.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use kafka_eos::codec::Json;
use kafka_eos::operators::{Dedup, TumblingWindows};
use kafka_eos::record::OutputRecord;
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
}

impl Topics {
    /// `payments-<suffix>`, `revenue-<suffix>`, `late-payments-<suffix>`.
    pub fn with_suffix(suffix: &str) -> Topics {
        Topics {
            payments: format!("payments-{suffix}"),
            revenue: format!("revenue-{suffix}"),
            late: format!("late-payments-{suffix}"),
        }
    }

    /// Creates the three topics with `partitions` partitions each.
    pub fn create(&self, admin: &admin::Client, partitions: i32, replication: i32) -> Result<()> {
        for t in [&self.payments, &self.revenue, &self.late] {
            admin.create_topic(t, partitions, replication)?;
        }
        Ok(())
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

/// One merchant's revenue for one UTC day: the output record's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DailyRevenue {
    /// The merchant.
    pub merchant: u32,
    /// Days since 1970-01-01 (UTC).
    pub day: i64,
    /// Total, in cents.
    pub cents: i64,
    /// Payments counted.
    pub payments: u64,
}

/// The running total of one merchant-day inside its window.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct DayTotal {
    /// Cents so far.
    pub cents: i64,
    /// Payments so far.
    pub payments: u64,
}

/// The output key of a merchant-day.
pub fn revenue_key(merchant: u32, day: i64) -> String {
    format!("{merchant}/{day}")
}

/// The store names, the dedup TTL and the window lateness.
pub const DEDUP_STORE: &str = "payment-ids";
/// The store of the open daily windows.
pub const WINDOW_STORE: &str = "daily-revenue";

/// Adds the financial-close input, stores and stateful processor to `builder`.
pub fn pipeline(builder: PipelineBuilder, topics: &Topics) -> PipelineBuilder {
    let mut builder = builder.input_topic(&topics.payments);
    // The TTL outlasts the latest a redelivery can come (late payments are two days behind).
    let dedup = Dedup::<u64>::new(&mut builder, DEDUP_STORE, Duration::from_secs(3 * 86_400));
    let daily = TumblingWindows::<u32, DayTotal>::new(
        &mut builder,
        WINDOW_STORE,
        Duration::from_millis(DAY_MS as u64),
        &topics.late,
    )
    .allowed_lateness(Duration::from_secs(3600));
    let revenue = builder.output_topic(&topics.revenue);
    builder.processor(move |ctx, rec| {
        let closed = match rec.value_as::<Event>(&Json)? {
            Event::Tick { time_ms } => daily.advance(ctx, time_ms)?,
            Event::Payment(p) => {
                if !dedup.first_seen(ctx, &p.event_id, p.time_ms)? {
                    return Ok(());
                }
                let update = daily.add(ctx, rec, &p.merchant, p.time_ms, |t| {
                    t.cents += p.amount_cents;
                    t.payments += 1;
                })?;
                if let Some(late) = update.late {
                    ctx.emit(late);
                    return Ok(());
                }
                update.closed
            }
        };
        for w in closed {
            let day = w.start_ms / DAY_MS;
            let value = DailyRevenue { merchant: w.key, day, cents: w.value.cents, payments: w.value.payments };
            ctx.emit(OutputRecord::to(&revenue).key(revenue_key(w.key, day)).encode_value(&Json, &value)?);
        }
        Ok(())
    })
}
