//! The card-velocity pipeline: an alert at a card's 6th payment within a 10-minute hopping
//! window (a threshold trigger), written to PostgreSQL exactly once beside the windows'
//! state (an outbox sink), and each merchant's running total, kept by merchant through a
//! repartition topic although the payments are keyed by card. `main.rs` runs it; the chaos
//! suite runs this same file (`kafka_eos_cli::workloads::card_velocity`).

use kafka_eos::codec::{Json, Raw};
use kafka_eos::operators::{HoppingWindows, Trigger, WindowError};
use kafka_eos::state::Store;
use kafka_eos::{OutputRecord, PipelineBuilder, Rebalancing};
use kafka_eos_postgres::{row, PostgresSink, TableSpec};

use super::{Alert, Payment, ADVANCE, ALERTS_TABLE, ALERT_AT, WINDOW};

/// The pipeline on `builder` (an application id set): payments in, running totals per
/// merchant out to `totals`, alerts to PostgreSQL at `postgres` (sink offsets group `group`).
pub fn pipeline(
    mut b: PipelineBuilder,
    (payments, totals, late): (&str, &str, &str),
    postgres: &str,
    group: &str,
) -> Result<PipelineBuilder, WindowError> {
    let per_card = HoppingWindows::<String, u64>::new(&mut b, "per-card", WINDOW, ADVANCE, late)?
        .trigger(Trigger::threshold(|n: &u64| *n >= ALERT_AT));
    let by_merchant = b.repartition("by-merchant");
    let merchant_totals: Store<String, i64> = b.store("merchant-totals");
    let totals = b.output_topic(totals);
    let (conn, group) = (postgres.to_string(), group.to_string());
    let alerts = b.outbox_sink(
        "alerts",
        move || {
            let (conn, group) = (conn.clone(), group.clone());
            async move {
                PostgresSink::connect(&conn, group, &TableSpec::new(ALERTS_TABLE, &["card", "window_start"])).await
            }
        },
        |a: Alert| row![a.card, a.window_start_ms, a.payments as i64],
    );
    Ok(b.input_topic(payments).rebalancing(Rebalancing::Eager).processor(move |ctx, rec| {
        if rec.topic == by_merchant {
            let merchant: String = rec.key_as(&Raw)?;
            let total = ctx.store(&merchant_totals).get(&merchant)?.unwrap_or(0) + rec.value_as::<i64>(&Json)?;
            ctx.store(&merchant_totals).put(&merchant, &total)?;
            ctx.emit(OutputRecord::to(&totals).key(merchant).encode_value(&Json, &total)?);
            return Ok(());
        }
        let p: Payment = rec.value_as(&Json)?;
        let update = per_card.add(ctx, rec, &p.card, p.time_ms, |n| *n += 1)?;
        for w in update.triggered {
            ctx.sink(&alerts, Alert { card: p.card.clone(), window_start_ms: w.start_ms, payments: w.value });
        }
        update.late.into_iter().for_each(|late| ctx.emit(late));
        ctx.emit(OutputRecord::to(&by_merchant).key(p.merchant).encode_value(&Json, &p.cents)?);
        Ok(())
    }))
}
