//! Repartition topics in the driver: records sent to one come back as input on the
//! partition of their new key, processed after the batch that sent them.

use std::collections::BTreeMap;

use kafka_eos::query::Partitioner;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder, Rebalancing};

use super::*;

const PARTITIONS: i32 = 4;

/// Payments keyed by card, the merchant in the value; per-merchant totals kept downstream of
/// a repartition topic keyed by merchant.
fn per_merchant_totals(guarantee: Guarantee) -> (PipelineBuilder, Store<String, u64>) {
    let mut b = Pipeline::builder()
        .application_id("velocity")
        .input_topic("payments")
        .guarantee(guarantee)
        .rebalancing(Rebalancing::Eager);
    let by_merchant = b.repartition("by-merchant");
    let totals = b.store::<String, u64>("merchant-totals");
    let handle = totals.clone();
    let b = b.processor(move |ctx, rec| {
        if rec.topic == by_merchant {
            let merchant = String::from_utf8(rec.key.clone().unwrap_or_default())?;
            let amount: u64 = String::from_utf8(rec.value.clone().unwrap_or_default())?.parse()?;
            let total = ctx.store(&totals).get(&merchant)?.unwrap_or(0) + amount;
            ctx.store(&totals).put(&merchant, &total)?;
        } else {
            let value = String::from_utf8(rec.value.clone().unwrap_or_default())?;
            let (merchant, amount) = value.split_once(':').ok_or("value is merchant:amount")?;
            ctx.emit(OutputRecord::to(&by_merchant).key(merchant).value(amount));
        }
        Ok(())
    });
    (b, handle)
}

/// 200 payments of 12 merchants from 30 cards over 4 partitions.
fn payments() -> Vec<(i32, String, String, u64)> {
    (0..200u64)
        .map(|i| {
            let card = format!("card-{}", i % 30);
            let partition = Partitioner::murmur2().partition(card.as_bytes(), PARTITIONS);
            (partition, card, format!("m{}", i % 12), i + 1)
        })
        .collect()
}

fn expected() -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for (_, _, merchant, amount) in payments() {
        *totals.entry(merchant).or_default() += amount;
    }
    totals
}

#[test]
fn a_repartitioned_stream_is_processed_by_its_new_key_on_that_keys_partition() -> Result<(), Box<dyn std::error::Error>>
{
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce] {
        let (builder, totals) = per_merchant_totals(guarantee);
        let mut driver = TestDriver::new(builder)?.partitions(PARTITIONS).batch_size(Some(7));
        assert_eq!(driver.config().input_topics, ["payments", "velocity-by-merchant-repartition"]);
        for (p, card, merchant, amount) in payments() {
            driver.pipe(TestInput::new().partition(p).key(card).value(format!("{merchant}:{amount}")))?;
        }
        driver.commit()?;
        let mut found = BTreeMap::new();
        for p in 0..PARTITIONS {
            for (merchant, total) in driver.store(&totals, p).entries()? {
                let home = Partitioner::murmur2().partition(merchant.as_bytes(), PARTITIONS);
                assert_eq!(p, home, "{guarantee:?}: merchant {merchant} kept on its own key's partition");
                assert!(found.insert(merchant, total).is_none(), "one partition per merchant");
            }
        }
        assert_eq!(found, expected(), "{guarantee:?}: every payment counted once");
        assert_eq!(driver.output("velocity-by-merchant-repartition").len(), 200);
    }
    Ok(())
}

#[test]
fn crashes_and_aborts_count_every_repartitioned_record_once() -> Result<(), Box<dyn std::error::Error>> {
    let (builder, totals) = per_merchant_totals(Guarantee::ExactlyOncePerPartition);
    let mut driver = TestDriver::new(builder)?.partitions(PARTITIONS).batch_size(Some(5));
    for (i, (p, card, merchant, amount)) in payments().into_iter().enumerate() {
        driver.pipe(TestInput::new().partition(p).key(card).value(format!("{merchant}:{amount}")))?;
        if i % 37 == 36 {
            driver.crash_and_restore()?;
        }
    }
    driver.commit()?;
    let mut found = BTreeMap::new();
    for p in 0..PARTITIONS {
        found.extend(driver.store(&totals, p).entries()?);
    }
    assert_eq!(found, expected());
    Ok(())
}

#[test]
fn the_processor_is_replay_safe_through_a_repartition_topic() -> Result<(), Box<dyn std::error::Error>> {
    let inputs: Vec<TestInput> = payments()
        .into_iter()
        .map(|(p, card, merchant, amount)| {
            TestInput::new().partition(p).key(card).value(format!("{merchant}:{amount}"))
        })
        .collect();
    let report = check_replay_safe(|| per_merchant_totals(Guarantee::ExactlyOncePerPartition).0, &inputs, 7)
        .map_err(|v| format!("{v:?}"))?;
    assert!(report.aborts > 0 && report.crashes > 0, "faults were injected: {report:?}");
    Ok(())
}
