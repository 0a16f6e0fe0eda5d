//! The financial close's generator and batch reconciliation, around its pipeline.
//!
//! The pipeline itself — payments → daily revenue per merchant: dedup, daily tumbling
//! windows, late payments routed — is in `cli/examples/financial_close/pipeline.rs`, beside the
//! example that runs it, and compiled here too (`#[path]`) so that the chaos suite and the
//! benchmarks run the very same code. This module adds what a test of it needs: an input
//! generator (payments with ~5 % redelivered, ~1 % two days late and ~0.2 % six days late,
//! and the merchant table) and [`reconcile`], which recomputes every business day of every
//! merchant in batch from the raw payments (each `event_id` once) and the merchant table,
//! and checks, to the cent, that the latest revision's total and fees plus the late
//! payments' equal it — and that each revision was emitted once, none missing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use kafka_eos::Result;
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};

#[path = "../../examples/financial_close/pipeline.rs"]
mod pipeline;
pub use pipeline::*;

/// 2026-03-25T00:00:00Z: the first simulated day. The period spans 2026-03-29, the 23-hour
/// business day in Europe/Berlin (clocks go forward).
const EPOCH_MS: i64 = 1_774_396_800_000;

/// The shape of the generated input.
#[derive(Debug, Clone)]
pub struct Generate {
    /// Distinct payments.
    pub payments: u64,
    /// Merchants.
    pub merchants: u32,
    /// Days the payments span.
    pub days: u32,
    /// Share of payments delivered twice.
    pub duplicate_ratio: f64,
    /// Share of payments whose event time is two days behind the stream: their day has
    /// closed, and is corrected.
    pub late_ratio: f64,
    /// Share of payments six days behind the stream: past the correction retention, they go
    /// to the late-payments topic.
    pub very_late_ratio: f64,
    /// Seed of the generator (same seed, same input).
    pub seed: u64,
}

impl Default for Generate {
    fn default() -> Self {
        Generate {
            payments: 50_000,
            merchants: 200,
            days: 10,
            duplicate_ratio: 0.05,
            late_ratio: 0.01,
            very_late_ratio: 0.002,
            seed: 42,
        }
    }
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Generated {
    /// Records written (payments, their duplicates and the ticks).
    pub records: u64,
    /// Redelivered copies among them.
    pub duplicates: u64,
}

/// Writes payments `range` of the sequence `g` describes (so a run can feed its input in
/// several parts), in event-time order with the duplicates and late events mixed in; with
/// `ticks`, ends with one heartbeat per partition two days after the last payment, which
/// closes every day. Partitioned by merchant.
pub fn generate(
    admin: &admin::Client,
    topic: &str,
    partitions: i32,
    g: &Generate,
    range: std::ops::Range<u64>,
    ticks: bool,
) -> Result<Generated> {
    let mut records = Vec::new();
    let mut stats = Generated::default();
    for i in range {
        let copies = payment_records(g, i, partitions);
        stats.duplicates += copies.len() as u64 - 1;
        records.extend(copies);
    }
    if ticks {
        records.extend(tick_records(g, partitions));
    }
    stats.records = records.len() as u64;
    admin.produce(topic, records)?;
    Ok(stats)
}

pub use super::InputRecordSpec;

/// Merchant `m`'s row of the merchant table: a fee of 1.00 % to 3.49 %.
pub fn merchant(m: u32) -> Merchant {
    Merchant { fee_bps: 100 + (m * 37) % 250 }
}

/// The merchant table of `g`'s merchants, keyed and partitioned like their payments.
pub fn merchant_records(g: &Generate, partitions: i32) -> Vec<InputRecordSpec> {
    (0..g.merchants)
        .map(|m| {
            let value = serde_json::to_vec(&merchant(m)).expect("json");
            (Some(m as i32 % partitions), m.to_string().into_bytes(), value)
        })
        .collect()
}

/// Writes the merchant table of `g` to `topic` (before the payments: each partition's table
/// is read to its end before its first payment, so every payment finds its merchant).
pub fn write_merchants(admin: &admin::Client, topic: &str, partitions: i32, g: &Generate) -> Result<()> {
    admin.produce(topic, merchant_records(g, partitions))
}

/// Payment `i` of the sequence `g` describes, as the one or two (redelivered) records that
/// carry it. Deterministic: the same `g` and `i` always give the same records.
pub fn payment_records(g: &Generate, i: u64, partitions: i32) -> Vec<InputRecordSpec> {
    let span_ms = g.days as i64 * DAY_MS;
    let mut h = super::splitmix(g.seed ^ i);
    let mut unit = || {
        h = super::splitmix(h);
        (h >> 11) as f64 / (1u64 << 53) as f64
    };
    let merchant = (unit() * g.merchants as f64) as u32;
    let mut time_ms = EPOCH_MS + (i as i64 * span_ms) / g.payments.max(1) as i64 + (unit() * 600_000.0) as i64;
    let lateness = unit();
    if lateness < g.very_late_ratio {
        time_ms -= 6 * DAY_MS;
    } else if lateness < g.very_late_ratio + g.late_ratio {
        time_ms -= 2 * DAY_MS;
    }
    let p = Payment { event_id: i, merchant, amount_cents: 100 + (unit() * 100_000.0) as i64, time_ms };
    let copies = if unit() < g.duplicate_ratio { 2 } else { 1 };
    let value = serde_json::to_vec(&Event::Payment(p)).expect("json");
    vec![(Some(merchant as i32 % partitions), merchant.to_string().into_bytes(), value); copies]
}

/// The end-of-period heartbeats, one per partition, two days after the last payment.
pub fn tick_records(g: &Generate, partitions: i32) -> Vec<InputRecordSpec> {
    let time_ms = EPOCH_MS + g.days as i64 * DAY_MS + 2 * DAY_MS;
    let value = serde_json::to_vec(&Event::Tick { time_ms }).expect("json");
    (0..partitions).map(|p| (Some(p), b"tick".to_vec(), value.clone())).collect()
}

/// The comparison of the streamed result with the batch recomputation.
#[derive(Debug, Clone, Default)]
pub struct Reconciliation {
    /// Merchant-days in the batch recomputation.
    pub merchant_days: usize,
    /// Merchant-days whose streamed total (or fees) plus late payments differs from the
    /// batch total, or that were emitted more than once, or emitted but absent from the
    /// input.
    pub mismatches: usize,
    /// Merchant-day revisions emitted more than once (each also counts as a mismatch).
    pub emitted_twice: usize,
    /// Merchant-days with payments in the window that were never emitted (not closed yet,
    /// or lost; each also counts as a mismatch).
    pub unclosed: usize,
    /// Merchant-days corrected after their close (emitted with a revision above 0).
    pub corrected: usize,
    /// Distinct payments in the input.
    pub payments: usize,
    /// Their total, in cents.
    pub total_cents: i64,
    /// Their fees at the merchant table's rates, in cents.
    pub fee_cents: i64,
    /// Redelivered copies in the input.
    pub input_duplicates: u64,
    /// Payments on the late topic.
    pub late_payments: usize,
    /// Each merchant's distinct payments, in cents: its running revenue at the end.
    pub merchant_cents: BTreeMap<u32, i64>,
    /// Up to 5 mismatches, described.
    pub examples: Vec<String>,
}

impl Reconciliation {
    /// Whether the streamed totals match the batch recomputation exactly.
    pub fn is_exact(&self) -> bool {
        self.mismatches == 0 && self.merchant_days > 0
    }
}

impl std::fmt::Display for Reconciliation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for e in &self.examples {
            writeln!(f, "  mismatch: {e}")?;
        }
        write!(
            f,
            "reconciled: {} merchant-days ({} corrected), {} mismatches",
            self.merchant_days, self.corrected, self.mismatches
        )?;
        if self.unclosed > 0 {
            write!(f, " ({} merchant-days never emitted)", self.unclosed)?;
        }
        Ok(())
    }
}

/// Reads the payments, the merchant table, the revenue and the late payments
/// (read_committed) and compares, per merchant-day, the batch total and fees of the
/// distinct payments with the emitted ones plus the late payments'.
pub fn reconcile(cfg: &VerifyConfig, topics: &Topics) -> Result<Reconciliation> {
    let deadline = Instant::now() + cfg.timeout;
    let days = business_days();
    let day_of = |p: &Payment| (p.merchant, days.label(days.window_of(p.time_ms).0));
    let mut rec = Reconciliation::default();
    let mut table: HashMap<u32, Merchant> = HashMap::new();
    read_to_end(cfg, &topics.merchants, deadline, |m| {
        use rdkafka::Message;
        let id = m.key().and_then(|k| std::str::from_utf8(k).ok()?.parse::<u32>().ok());
        if let (Some(id), Some(Ok(row))) = (id, decode::<Merchant>(m)) {
            table.insert(id, row);
        }
    })?;
    let amounts = |p: &Payment| (p.amount_cents, table.get(&p.merchant).map_or(0, |m| m.fee(p.amount_cents)));
    let mut batch: BTreeMap<(u32, String), (i64, i64)> = BTreeMap::new();
    let mut seen = HashSet::new();
    read_to_end(cfg, &topics.payments, deadline, |m| {
        if let Some(Ok(Event::Payment(p))) = decode::<Event>(m) {
            if seen.insert(p.event_id) {
                let e = batch.entry(day_of(&p)).or_default();
                let (cents, fee) = amounts(&p);
                e.0 += cents;
                e.1 += fee;
            } else {
                rec.input_duplicates += 1;
            }
        }
    })?;
    rec.payments = seen.len();
    for ((merchant, _), (cents, _)) in &batch {
        *rec.merchant_cents.entry(*merchant).or_default() += cents;
    }
    rec.total_cents = batch.values().map(|t| t.0).sum();
    rec.fee_cents = batch.values().map(|t| t.1).sum();
    // Every revision of every merchant-day: the latest is its figure.
    let mut streamed: HashMap<(u32, String), BTreeMap<u32, Vec<DailyRevenue>>> = HashMap::new();
    read_to_end(cfg, &topics.revenue, deadline, |m| {
        if let Some(Ok(r)) = decode::<DailyRevenue>(m) {
            streamed.entry((r.merchant, r.day.clone())).or_default().entry(r.revision).or_default().push(r);
        }
    })?;
    let mut late: HashMap<(u32, String), (i64, i64)> = HashMap::new();
    let mut late_ids = HashSet::new();
    read_to_end(cfg, &topics.late, deadline, |m| {
        if let Some(Ok(Event::Payment(p))) = decode::<Event>(m) {
            if late_ids.insert(p.event_id) {
                let e = late.entry(day_of(&p)).or_default();
                let (cents, fee) = amounts(&p);
                e.0 += cents;
                e.1 += fee;
            } else {
                rec.emitted_twice += 1; // a late payment forwarded twice
                rec.mismatches += 1;
            }
        }
    })?;
    rec.late_payments = late_ids.len();
    rec.merchant_days = batch.len();
    let mut keys: Vec<(u32, String)> = batch.keys().chain(streamed.keys()).chain(late.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let (want, want_fee) = batch.get(&k).copied().unwrap_or_default();
        let revisions = streamed.get(&k);
        // The revisions must be 0, 1, 2, ... each emitted once: a gap is a lost
        // correction, a repeat a revision committed twice.
        let twice = revisions.is_some_and(|r| r.values().any(|v| v.len() > 1));
        let gap = revisions.is_some_and(|r| r.keys().copied().ne(0..r.len() as u32));
        let latest = revisions.and_then(|r| r.values().next_back()).map(|v| &v[0]);
        let (cents, fee) = latest.map_or((0, 0), |r| (r.cents, r.fee_cents));
        let (late_cents, late_fee) = late.get(&k).copied().unwrap_or_default();
        if twice {
            rec.emitted_twice += 1;
        }
        if latest.is_none() && batch.contains_key(&k) && late_cents != want {
            rec.unclosed += 1;
        }
        if latest.is_some_and(|r| r.revision > 0) {
            rec.corrected += 1;
        }
        if twice || gap || cents + late_cents != want || fee + late_fee != want_fee {
            rec.mismatches += 1;
            if rec.examples.len() < 5 {
                let emitted: Vec<(u32, usize)> =
                    revisions.map(|r| r.iter().map(|(rev, v)| (*rev, v.len())).collect()).unwrap_or_default();
                rec.examples.push(format!(
                    "merchant {} day {}: batch {want} cents (fees {want_fee}), latest revision {cents} (fees {fee}; \
                     revisions emitted (revision, times) {emitted:?}) + late {late_cents} (fees {late_fee})",
                    k.0, k.1
                ));
            }
        }
    }
    Ok(rec)
}

fn decode<T: serde::de::DeserializeOwned>(
    m: &rdkafka::message::BorrowedMessage<'_>,
) -> Option<std::result::Result<T, serde_json::Error>> {
    use rdkafka::Message;
    m.payload().map(serde_json::from_slice)
}
