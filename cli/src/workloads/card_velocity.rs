//! The card-velocity app: payments keyed by card, an alert at a card's 6th payment within a
//! 10-minute hopping window written to PostgreSQL, and every merchant's running total kept
//! by merchant (a repartition topic). The pipeline is `examples/card_velocity/pipeline.rs`,
//! compiled here too (`#[path]`) for the chaos suite; this module adds the input generator
//! and the batch recomputation the streamed results must match.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_eos::query::Partitioner;
use kafka_eos::Result;
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};

#[path = "../../examples/card_velocity/pipeline.rs"]
mod pipeline;
pub use pipeline::*;

/// Payments of a card within one window that raise an alert.
pub const ALERT_AT: u64 = 6;
/// The windows' size.
pub const WINDOW: Duration = Duration::from_secs(600);
/// One window starts every `ADVANCE`.
pub const ADVANCE: Duration = Duration::from_secs(300);
/// The alerts' table: `card_alerts (card text, window_start bigint, payments bigint)`,
/// keyed by card and window start.
pub const ALERTS_TABLE: &str = "card_alerts";

/// A payment, keyed by card.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Payment {
    /// The card that paid (the key).
    pub card: String,
    /// The merchant paid.
    pub merchant: String,
    /// The amount.
    pub cents: i64,
    /// Event time, ms since the epoch.
    pub time_ms: i64,
}

/// An alert: a card's window that reached [`ALERT_AT`] payments.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Alert {
    /// The card.
    pub card: String,
    /// The window's start, ms since the epoch.
    pub window_start_ms: i64,
    /// Its payments when it fired.
    pub payments: u64,
}

/// 2026-03-25T00:00:00Z: the first payment's time.
const EPOCH_MS: i64 = 1_774_396_800_000;

/// The shape of the generated input: `payments` over `cards` cards (a tenth of the payments
/// from `hot_cards` of them, which pay often enough to raise alerts) and `merchants`
/// merchants, one payment every `every_ms` of event time.
#[derive(Debug, Clone)]
pub struct Generate {
    /// Payments.
    pub payments: u64,
    /// Ordinary cards.
    pub cards: u64,
    /// Cards that pay often (a tenth of the payments).
    pub hot_cards: u64,
    /// Merchants.
    pub merchants: u64,
    /// Event time between two payments.
    pub every_ms: i64,
}

impl Default for Generate {
    fn default() -> Self {
        Generate { payments: 20_000, cards: 400, hot_cards: 4, merchants: 50, every_ms: 2_000 }
    }
}

/// Payment `i` of the sequence `g` describes.
pub fn payment(g: &Generate, i: u64) -> Payment {
    let h = super::splitmix(i);
    let card = match h % 10 {
        0 => format!("hot-{}", (h >> 8) % g.hot_cards.max(1)),
        _ => format!("card-{}", (h >> 8) % g.cards.max(1)),
    };
    let merchant = format!("m{}", (h >> 32) % g.merchants.max(1));
    Payment { card, merchant, cents: 100 + (h >> 40) as i64 % 10_000, time_ms: EPOCH_MS + i as i64 * g.every_ms }
}

/// Payment `i` as a record of a `partitions`-partition topic: its card's partition (murmur2,
/// as the Java client places keys), the card as key, the payment as JSON.
pub fn payment_record(g: &Generate, i: u64, partitions: i32) -> super::InputRecordSpec {
    let p = payment(g, i);
    let value = serde_json::to_vec(&p).expect("a payment encodes");
    (Some(Partitioner::murmur2().partition(p.card.as_bytes(), partitions)), p.card.into_bytes(), value)
}

/// Writes payments `range` to `topic`, in event-time order, each on its card's partition.
pub fn generate(
    admin: &admin::Client,
    topic: &str,
    partitions: i32,
    g: &Generate,
    range: std::ops::Range<u64>,
) -> Result<()> {
    admin.produce(topic, range.map(|i| payment_record(g, i, partitions)).collect::<Vec<_>>())
}

/// What the first `payments` payments must give: every (card, window start) that reaches
/// [`ALERT_AT`] payments, and every merchant's total and payment count.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// (card, window start) of every alert.
    pub alerts: BTreeSet<(String, i64)>,
    /// Per merchant: total cents and payments.
    pub merchants: BTreeMap<String, (i64, u64)>,
}

/// The batch recomputation, from the generator alone.
pub fn expected(g: &Generate, payments: u64) -> Expected {
    expected_from((0..payments).map(|i| payment(g, i)))
}

/// The batch recomputation of `payments`, in any order.
pub fn expected_from(payments: impl IntoIterator<Item = Payment>) -> Expected {
    let (size, advance) = (WINDOW.as_millis() as i64, ADVANCE.as_millis() as i64);
    let mut counts: BTreeMap<(String, i64), u64> = BTreeMap::new();
    let mut e = Expected::default();
    for p in payments {
        let last = p.time_ms.div_euclid(advance) * advance;
        for start in (0..size / advance).map(|k| last - k * advance) {
            *counts.entry((p.card.clone(), start)).or_default() += 1;
        }
        let m = e.merchants.entry(p.merchant).or_default();
        *m = (m.0 + p.cents, m.1 + 1);
    }
    e.alerts = counts.into_iter().filter(|(_, n)| *n >= ALERT_AT).map(|(w, _)| w).collect();
    e
}

/// The streamed merchant totals: per merchant, the last total and the number of updates.
pub fn streamed_totals(cfg: &VerifyConfig, topic: &str) -> Result<BTreeMap<String, (i64, u64)>> {
    let mut totals: BTreeMap<String, (i64, u64)> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    read_to_end(cfg, topic, deadline, |m| {
        use rdkafka::Message;
        let merchant = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
        let total: i64 = serde_json::from_slice(m.payload().unwrap_or_default()).unwrap_or(i64::MIN);
        let t = totals.entry(merchant).or_default();
        *t = (total, t.1 + 1);
    })?;
    Ok(totals)
}
