//! The `join` workload: a windowed stream–stream join with dead-lettering, under faults.
//!
//! The input is pairs: record `2k` is order `k`, record `2k + 1` its shipment, both keyed
//! by `k` on partition `k % partitions`, at event time `k × 10 ms`, so each order joins its
//! shipment and nothing else. One order in [`POISON_EVERY`] cannot be decoded: the
//! processor fails on it every time, and the error policy dead-letters it (after its
//! retries) to `<output>-dlq`; its shipment then finds no order. Exact when the output holds
//! one joined record per decodable order and the dead-letter topic one record per poison
//! order, nothing else.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_eos::operators::StreamJoin;
use kafka_eos::processor::ProcessError;
use kafka_eos::{InputRecord, OutputRecord, PipelineBuilder, ProcessorErrorPolicy};
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};

use crate::workloads::InputRecordSpec;

/// One order in this many is undecodable.
pub(crate) const POISON_EVERY: u64 = 500;
/// Orders and shipments at most this far apart in event time join.
const WINDOW: Duration = Duration::from_secs(60);
/// Replays of a failing record before it is dead-lettered: the chaos suite's deliberate
/// failures (one record in hundreds, at random) never fail one record this often in a row.
const RETRIES: u32 = 8;

/// Input record `i` of a topic with `partitions` partitions.
pub(crate) fn record(i: u64, partitions: i32) -> InputRecordSpec {
    let k = i / 2;
    let t = k * 10;
    let value = match i % 2 {
        0 if k % POISON_EVERY == POISON_EVERY / 2 => vec![0xff, b' ', b'0' + (k % 10) as u8],
        0 => format!("order {k} {t}").into_bytes(),
        _ => format!("shipment {k} {t}").into_bytes(),
    };
    (Some((k % partitions as u64) as i32), k.to_string().into_bytes(), value)
}

/// The join's pipeline on `builder` (input set): each pair out to `output` keyed by its
/// order, poison orders to `<output>-dlq`; `before` runs first on every record.
pub(crate) fn pipeline(
    mut builder: PipelineBuilder,
    output: &str,
    before: impl Fn(&InputRecord) -> Result<(), ProcessError> + Send + Sync + Clone + 'static,
) -> kafka_eos::Result<PipelineBuilder> {
    let join = StreamJoin::<u64, (), u64>::new(&mut builder, "orders-shipments", WINDOW)
        .map_err(|e| kafka_eos::Error::Config(format!("join: {e}")))?;
    let out = builder.output_topic(output);
    let policy = ProcessorErrorPolicy::retry(RETRIES).backoff(Duration::from_millis(10));
    Ok(builder.on_processor_error(policy.then_dead_letter(format!("{output}-dlq"))).processor(move |ctx, r| {
        before(r)?;
        let text = std::str::from_utf8(r.value.as_deref().unwrap_or_default())?;
        let update = match text.split(' ').collect::<Vec<_>>()[..] {
            ["order", k, t] => join.left(ctx, &k.parse()?, t.parse()?, ())?,
            ["shipment", k, t] => join.right(ctx, &k.parse()?, t.parse()?, k.parse()?)?,
            _ => return Err(format!("not an order or a shipment: {text:?}").into()),
        };
        if update.late {
            return Err(format!("late record {text:?}: the input is in event-time order").into());
        }
        for pair in update.joined {
            ctx.emit(OutputRecord::to(&out).key(pair.key.to_string()).value("joined").partition(r.partition));
        }
        Ok(())
    }))
}

/// What the check found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Found {
    pub lost: u64,
    pub duplicate: u64,
    pub other: u64,
    pub orders: u64,
    pub poison: u64,
    /// Input records read back.
    pub records: u64,
    pub notes: Vec<String>,
}

/// Compares the committed outputs and dead letters (keys with their counts) with the input
/// as written (`input`: key → (decodable order, poison order, shipment)).
pub(crate) fn compare(
    input: &BTreeMap<u64, (bool, bool, bool)>,
    joined: &BTreeMap<u64, u64>,
    dead: &BTreeMap<u64, u64>,
) -> Found {
    let mut f = Found::default();
    for (k, &(order, poison, shipment)) in input {
        let (want_joined, want_dead) = (u64::from(order && shipment), u64::from(poison));
        f.orders += u64::from(order);
        f.poison += want_dead;
        for (what, want, got) in
            [("joined", want_joined, joined.get(k).copied()), ("dead-lettered", want_dead, dead.get(k).copied())]
        {
            let got = got.unwrap_or(0);
            f.lost += want.saturating_sub(got);
            match want {
                0 => f.other += u64::from(got > 0),
                _ => f.duplicate += got.saturating_sub(want),
            }
            if got != want && f.notes.len() < 10 {
                f.notes.push(format!("key {k}: {what} {got} times, want {want}"));
            }
        }
    }
    for (what, m) in [("joined", joined), ("dead-lettered", dead)] {
        let strays = m.keys().filter(|k| !input.contains_key(*k)).count() as u64;
        f.other += strays;
        if strays > 0 {
            f.notes.push(format!("{strays} keys {what} that the input does not have"));
        }
    }
    f
}

/// Reads the input, the output and the dead-letter topic (read_committed) and compares.
pub(crate) fn check(vc: &VerifyConfig, input: &str, output: &str) -> Result<Found, String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let key = |m: &rdkafka::message::BorrowedMessage<'_>| {
        use rdkafka::Message;
        std::str::from_utf8(m.key().unwrap_or_default()).ok().and_then(|k| k.parse::<u64>().ok())
    };
    let mut records: BTreeMap<u64, (bool, bool, bool)> = BTreeMap::new();
    let (mut unreadable, mut read) = (0, 0);
    read_to_end(vc, input, deadline, |m| {
        use rdkafka::Message;
        read += 1;
        let Some(k) = key(m) else {
            unreadable += 1;
            return;
        };
        let e = records.entry(k).or_default();
        match m.payload().unwrap_or_default() {
            v if v.starts_with(b"order ") => e.0 = true,
            v if v.starts_with(b"shipment ") => e.2 = true,
            _ => e.1 = true,
        }
    })
    .map_err(|e| format!("reading {input}: {e}"))?;
    let mut counts = |topic: &str| -> Result<BTreeMap<u64, u64>, String> {
        let mut m = BTreeMap::new();
        read_to_end(vc, topic, deadline, |r| match key(r) {
            Some(k) => *m.entry(k).or_default() += 1,
            None => unreadable += 1,
        })
        .map_err(|e| format!("reading {topic}: {e}"))?;
        Ok(m)
    };
    let (joined, dead) = (counts(output)?, counts(&format!("{output}-dlq"))?);
    let mut found = compare(&records, &joined, &dead);
    found.other += unreadable;
    found.records = read;
    found.notes.insert(
        0,
        format!(
            "join: {} orders ({} undecodable) and their shipments; {} joined, {} dead-lettered",
            found.orders + found.poison,
            found.poison,
            joined.values().sum::<u64>(),
            dead.values().sum::<u64>()
        ),
    );
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_pair_up_on_one_partition_and_some_orders_are_poison() {
        for i in 0..2_000u64 {
            let (p, key, value) = record(i, 4);
            let (pair, _, _) = record(i ^ 1, 4);
            assert_eq!(p, pair, "record {i} and its partner on one partition");
            assert_eq!(key, (i / 2).to_string().into_bytes());
            let poison = std::str::from_utf8(&value).is_err();
            assert_eq!(poison, i % 2 == 0 && (i / 2) % POISON_EVERY == POISON_EVERY / 2, "record {i}");
        }
    }

    fn input() -> BTreeMap<u64, (bool, bool, bool)> {
        BTreeMap::from([(1, (true, false, true)), (2, (false, true, true)), (3, (true, false, false))])
    }

    #[test]
    fn exact_results_have_no_anomaly_and_empty_ones_lose_everything_expected() {
        let (joined, dead) = (BTreeMap::from([(1, 1)]), BTreeMap::from([(2, 1)]));
        let f = compare(&input(), &joined, &dead);
        assert_eq!((f.lost, f.duplicate, f.other, f.orders, f.poison), (0, 0, 0, 2, 1), "{f:?}");
        let f = compare(&input(), &BTreeMap::new(), &BTreeMap::new());
        assert_eq!((f.lost, f.duplicate, f.other), (2, 0, 0), "{f:?}");
        assert_eq!(compare(&BTreeMap::new(), &BTreeMap::new(), &BTreeMap::new()), Found::default());
    }

    #[test]
    fn repeats_are_duplicates_and_strays_are_other() {
        let (joined, dead) = (BTreeMap::from([(1, 3), (3, 1), (9, 1)]), BTreeMap::from([(2, 2), (1, 1)]));
        let f = compare(&input(), &joined, &dead);
        // key 1 joined twice more, key 2 dead-lettered once more; key 3 joined without a
        // shipment, key 1 dead-lettered though decodable, key 9 not in the input.
        assert_eq!((f.lost, f.duplicate, f.other), (0, 3, 3), "{f:?}");
    }
}
