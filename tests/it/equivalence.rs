//! The test driver runs the runtime's code: for every example pipeline, the driver and the
//! real runtime on a real broker produce identical outputs and identical final state from
//! the same input.
//!
//! Each case writes its input to the broker, runs the example's own `pipeline()` with the
//! runtime until the group has caught up, then reads the input back (offsets and timestamps
//! as the broker assigned them) and pipes exactly those records into a `TestDriver` built
//! from the same `pipeline()`. Compared: every committed output per topic — key, value and
//! headers (the origin header included), as a multiset, since outputs of one input may land
//! on several partitions; and every store, the broker's side folded from its changelog
//! topic (`read_committed`, latest per key) against the driver's committed state, byte for
//! byte. Not compared: output partitions and producer timestamps, which Kafka assigns.

#[allow(dead_code)]
#[path = "../../examples/cdc_upsert.rs"]
mod cdc_upsert;
#[allow(dead_code)]
#[path = "../../cli/examples/page_views.rs"]
mod page_views;
#[allow(dead_code)]
#[path = "../../examples/quickstart.rs"]
mod quickstart;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_eos::state::changelog_topic;
use kafka_eos::{InputRecord, Pipeline, PipelineBuilder};
use kafka_eos_cli::workloads::financial_close::{self, merchant_records, payment_records, tick_records, Generate};
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::driver::{TestDriver, TestInput};
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};
use rdkafka::Message;

use crate::common::{bootstrap, spawn, unique};

const PARTITIONS: i32 = 4;

/// An input record to write: (partition, key, value).
type Spec = (Option<i32>, Vec<u8>, Vec<u8>);
/// Committed outputs of one topic: (key, value, headers), sorted.
type Outputs = Vec<(Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Option<Vec<u8>>)>)>;
/// Committed state: (store, partition) -> key -> value.
type State = BTreeMap<(String, i32), BTreeMap<Vec<u8>, Vec<u8>>>;

/// The rows of the pipeline's tables, written before the input: (table topic, records).
type Tables = Vec<(String, Vec<Spec>)>;

/// Runs `build`'s pipeline over `records` (after its `tables`) on the broker and in the
/// driver, and compares.
async fn equivalent(
    name: &str,
    input: &str,
    outputs: &[&str],
    tables: Tables,
    records: Vec<Spec>,
    build: impl Fn(PipelineBuilder) -> PipelineBuilder,
) {
    let b = bootstrap();
    let (b2, i, o, n) =
        (b.clone(), input.to_string(), outputs.iter().map(|s| s.to_string()).collect::<Vec<_>>(), records.len());
    let rows = tables.clone();
    tokio::task::spawn_blocking(move || {
        let client = admin::Client::new(&b2);
        for t in std::iter::once(&i).chain(&o) {
            client.create_topic(t, PARTITIONS, 1)?;
        }
        for (topic, records) in rows {
            client.create_topic_with(&topic, PARTITIONS, 1, &[("cleanup.policy", "compact")])?;
            client.produce(&topic, records)?;
        }
        client.produce(&i, records)
    })
    .await
    .unwrap()
    .expect("topics and input");

    let app = unique(name);
    let builder = Pipeline::builder()
        .bootstrap_servers(&b)
        .application_id(&app)
        .handle_signals(false)
        .startup_timeout(Duration::from_secs(20));
    let running = spawn(build(builder));
    let (b2, g, t) = (b.clone(), app.clone(), vec![input.to_string()]);
    tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b2, &g, &t, Duration::from_secs(120)))
        .await
        .unwrap()
        .expect("caught up");
    let summary = running.stop().await;
    assert_eq!(summary.records_in, n as u64, "{name}: every input committed once");

    // The same records, as the broker stored them, into the driver.
    let mut driver = TestDriver::new(build(Pipeline::builder().application_id(&app))).unwrap().batch_size(Some(50));
    for (topic, rows) in tables {
        for (p, key, value) in rows {
            driver.pipe_table(&topic, TestInput::new().partition(p.unwrap_or(0)).key(key).value(value)).unwrap();
        }
    }
    let inputs = read(&b, input, |m| Some(InputRecord::from_message(m))).await;
    let mut by_partition: BTreeMap<i32, Vec<InputRecord>> = BTreeMap::new();
    for r in inputs {
        by_partition.entry(r.partition).or_default().push(r);
    }
    let started = Instant::now();
    for (p, mut records) in by_partition {
        records.sort_by_key(|r| r.offset);
        for (expected, r) in records.into_iter().enumerate() {
            assert_eq!(r.offset, expected as i64, "{name}: contiguous offsets in partition {p}");
            let mut t = TestInput::new().partition(p).timestamp(r.timestamp.unwrap_or(0));
            t = if let Some(k) = r.key { t.key(k) } else { t };
            t = if let Some(v) = r.value { t.value(v) } else { t };
            driver.pipe(t).unwrap();
        }
    }
    driver.commit().unwrap();
    let driver_ms = started.elapsed().as_millis();

    for topic in outputs {
        let broker: Outputs = sorted(
            read(&b, topic, |m| Some(InputRecord::from_message(m)))
                .await
                .into_iter()
                .map(|r| (r.key, r.value, r.headers)),
        );
        let simulated: Outputs =
            sorted(driver.output(topic).iter().map(|r| (r.key.clone(), r.value.clone(), r.headers.clone())));
        assert_eq!(broker.len(), simulated.len(), "{name}: committed records of {topic}");
        assert!(broker == simulated, "{name}: the outputs on {topic} differ between the broker and the driver");
    }
    let mut broker_state = State::new();
    for spec in &driver.config().stores {
        let store = spec.name().to_string();
        let changelog = changelog_topic(&app, &store);
        for (p, key, value) in
            read(&b, &changelog, |m| Some((m.partition(), m.key()?.to_vec(), m.payload().map(<[u8]>::to_vec)))).await
        {
            let entries = broker_state.entry((store.clone(), p)).or_default();
            match value {
                Some(v) => entries.insert(key, v),
                None => entries.remove(&key),
            };
        }
    }
    broker_state.retain(|_, e| !e.is_empty());
    let mut simulated_state: State =
        driver.state_snapshot().unwrap().into_iter().map(|(k, e)| (k, e.into_iter().collect())).collect();
    simulated_state.retain(|_, e| !e.is_empty());
    assert_eq!(broker_state.len(), simulated_state.len(), "{name}: (store, partition) pairs with state");
    assert!(broker_state == simulated_state, "{name}: the final state differs between the broker and the driver");
    let outputs: usize = outputs.iter().map(|t| driver.output(t).len()).sum();
    assert!(outputs > 0, "{name}: a comparison of nothing proves nothing");
    eprintln!(
        "{name}: {n} inputs, {outputs} outputs, {} state entries identical (driver: {driver_ms} ms)",
        simulated_state.values().map(BTreeMap::len).sum::<usize>()
    );
}

/// `topic` read to its end, `read_committed`, through `f`.
async fn read<T: Send + 'static>(
    bootstrap: &str,
    topic: &str,
    f: impl Fn(&rdkafka::message::BorrowedMessage<'_>) -> Option<T> + Send + 'static,
) -> Vec<T> {
    let cfg = VerifyConfig::new(bootstrap, topic, topic);
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        read_to_end(&cfg, &topic, Instant::now() + Duration::from_secs(60), |m| out.extend(f(m))).map(|()| out)
    })
    .await
    .unwrap()
    .expect("read")
}

fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn quickstart_driver_and_broker_agree() {
    let (input, output) = (unique("eq-orders"), unique("eq-invoices"));
    let records = (0..400u64)
        .map(|id| {
            let o = quickstart::order(id);
            (Some((id % 4) as i32), o.customer.clone().into_bytes(), serde_json::to_vec(&o).unwrap())
        })
        .collect();
    equivalent("quickstart", &input, &[&output], Vec::new(), records, |b| quickstart::pipeline(b, &input, &output))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn financial_close_driver_and_broker_agree() {
    let topics = financial_close::Topics::with_suffix(&unique("eq"));
    let g = Generate { payments: 2_000, merchants: 40, days: 4, ..Generate::default() };
    let mut records: Vec<Spec> = (0..g.payments).flat_map(|i| payment_records(&g, i, PARTITIONS)).collect();
    records.extend(tick_records(&g, PARTITIONS));
    let tables = vec![(topics.merchants.clone(), merchant_records(&g, PARTITIONS))];
    let t = topics.clone();
    equivalent("financial_close", &topics.payments, &[&topics.revenue, &topics.late], tables, records, move |b| {
        financial_close::pipeline(b, &t)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn page_views_driver_and_broker_agree() {
    let (input, output) = (unique("eq-views"), unique("eq-counts"));
    let records = (0..1_000u64)
        .map(|i| {
            let v = page_views::view(i, 1_000);
            (None, v.page.clone().into_bytes(), serde_json::to_vec(&v).unwrap())
        })
        .collect();
    equivalent("page_views", &input, &[&output], Vec::new(), records, |b| page_views::pipeline(b, &input, &output))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cdc_upsert_driver_and_broker_agree() {
    let (input, output) = (unique("eq-cdc"), unique("eq-customers"));
    let records = cdc_upsert::changes(1_000)
        .into_iter()
        .map(|(id, c)| (None, id.to_be_bytes().to_vec(), serde_json::to_vec(&c).unwrap()))
        .collect();
    equivalent("cdc_upsert", &input, &[&output], Vec::new(), records, |b| cdc_upsert::pipeline(b, &input, &output))
        .await;
}
