//! Repartition topics on a real broker: payments keyed by card are re-keyed by merchant
//! through the pipeline's repartition topic, and per-merchant totals kept downstream count
//! every payment exactly once while instances join and leave.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_eos::state::Store;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder, Rebalancing};
use kafka_eos_testkit::admin::{self, Client};
use kafka_eos_testkit::write::Writer;

use crate::common::{bootstrap, caught_up, committed_by_key, spawn, unique};

const PARTITIONS: i32 = 4;
const MERCHANTS: u64 = 20;
const CARDS: u64 = 50;

/// Emits `merchant -> running total` downstream of the repartition topic.
fn per_merchant_totals(bootstrap: &str, app: &str, input: &str, output: &str, guarantee: Guarantee) -> PipelineBuilder {
    let mut b = Pipeline::builder()
        .bootstrap_servers(bootstrap)
        .application_id(app)
        .input_topic(input)
        .guarantee(guarantee)
        .rebalancing(Rebalancing::Eager)
        .commit_interval(Duration::from_millis(100))
        .purge_interval(Duration::from_millis(500))
        .handle_signals(false);
    let by_merchant = b.repartition("by-merchant");
    let totals: Store<String, u64> = b.store("merchant-totals");
    let out = b.output_topic(output);
    b.processor(move |ctx, r| {
        let text = |b: &Option<Vec<u8>>| String::from_utf8_lossy(b.as_deref().unwrap_or_default()).into_owned();
        if r.topic == by_merchant {
            let merchant = text(&r.key);
            let total = ctx.store(&totals).get(&merchant)?.unwrap_or(0) + text(&r.value).parse::<u64>()?;
            ctx.store(&totals).put(&merchant, &total)?;
            ctx.emit(OutputRecord::to(&out).key(merchant).value(total.to_string()));
        } else {
            let value = text(&r.value);
            let (merchant, amount) = value.split_once(':').ok_or("value is merchant:amount")?;
            ctx.emit(OutputRecord::to(&by_merchant).key(merchant).value(amount));
        }
        Ok(())
    })
}

/// Payments `from..to`: card `i % CARDS` pays merchant `i % MERCHANTS` the amount `i + 1`.
async fn produce(bootstrap: &str, topic: &str, from: u64, to: u64) {
    let (b, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let w = Writer::new(&Client::new(&b))?;
        for i in from..to {
            let value = format!("m{}:{}", i % MERCHANTS, i + 1);
            w.send(&OutputRecord::to(topic.as_str()).key(format!("card-{}", i % CARDS)).value(value))?;
        }
        w.flush_all_delivered(Duration::from_secs(30))
    })
    .await
    .unwrap()
    .expect("produce");
}

async fn repartitioned_totals_are_exact(name: &str, guarantee: Guarantee) {
    let (b, app) = (bootstrap(), unique(name));
    let (input, output) = (unique(&format!("{name}-in")), unique(&format!("{name}-out")));
    let (bb, i, o) = (b.clone(), input.clone(), output.clone());
    tokio::task::spawn_blocking(move || {
        admin::create_topic(&bb, &i, PARTITIONS, 1)?;
        admin::create_topic(&bb, &o, PARTITIONS, 1)
    })
    .await
    .unwrap()
    .expect("topics");
    let repartition = format!("{app}-by-merchant-repartition");
    let settled = || async {
        caught_up(&b, &app, &input).await;
        caught_up(&b, &app, &repartition).await;
    };

    let first = spawn(per_merchant_totals(&b, &app, &input, &output, guarantee));
    produce(&b, &input, 0, 1_000).await;
    settled().await;
    // A second instance joins (every partition moves under the range assignor), then the
    // first leaves: both topics' partitions change hands twice, with their state.
    let second = spawn(per_merchant_totals(&b, &app, &input, &output, guarantee));
    produce(&b, &input, 1_000, 2_000).await;
    settled().await;
    let s1 = first.stop().await;
    produce(&b, &input, 2_000, 3_000).await;
    settled().await;
    // Every record of the repartition topic was read and committed: each partition's log
    // now starts at its committed offset (nothing below it is kept, nothing past it lost).
    let purged = purged_to_committed(&b, &app, &repartition, Duration::from_secs(30)).await;
    assert!(purged.iter().all(|(low, committed)| low == committed && *committed > 0), "{guarantee:?}: {purged:?}");
    let s2 = second.stop().await;
    assert!(s1.restored_records + s2.restored_records > 0, "state moved with the partitions: {s1:?} {s2:?}");

    // Creating it again with the input's partition count succeeds only if it has that count.
    tokio::task::spawn_blocking({
        let (b, r) = (b.clone(), repartition.clone());
        move || admin::create_topic(&b, &r, PARTITIONS, 1)
    })
    .await
    .unwrap()
    .expect("the repartition topic has the input's partition count");

    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..3_000 {
        let merchant = format!("m{}", i % MERCHANTS);
        let total = totals.entry(merchant.clone()).or_default();
        *total += i + 1;
        want.entry(merchant).or_default().push(total.to_string());
    }
    let got = committed_by_key(&b, &repartition, &output).await;
    for (merchant, totals) in &want {
        let seen = got.get(merchant).cloned().unwrap_or_default();
        assert_eq!(seen.len(), totals.len(), "{guarantee:?}: merchant {merchant}: one update per payment");
        assert_eq!(seen.last(), totals.last(), "{guarantee:?}: merchant {merchant}'s final total");
    }
    assert_eq!(got.len(), want.len());
}

/// Per partition of `topic`: where its log starts and `group`'s committed offset, once they
/// are equal everywhere or `timeout` has passed.
async fn purged_to_committed(bootstrap: &str, group: &str, topic: &str, timeout: Duration) -> Vec<(i64, i64)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let (b, g, t) = (bootstrap.to_string(), group.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let reader: BaseConsumer =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &b).set("group.id", &g).create().expect("reader");
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let mut wanted = rdkafka::TopicPartitionList::new();
            for p in 0..PARTITIONS {
                wanted.add_partition(&t, p);
            }
            let committed = reader.committed_offsets(wanted, Duration::from_secs(10)).expect("committed offsets");
            let now: Vec<(i64, i64)> = (0..PARTITIONS)
                .map(|p| {
                    let low = reader.fetch_watermarks(&t, p, Duration::from_secs(10)).expect("watermarks").0;
                    let at = committed.find_partition(&t, p).and_then(|e| e.offset().to_raw()).unwrap_or(-1);
                    (low, at)
                })
                .collect();
            if now.iter().all(|(low, at)| low == at) || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repartitioned_totals_are_exact_per_partition() {
    repartitioned_totals_are_exact("repart-pp", Guarantee::ExactlyOncePerPartition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repartitioned_totals_are_exact_per_consumer() {
    repartitioned_totals_are_exact("repart-pc", Guarantee::ExactlyOncePerConsumer).await;
}
