//! Stream–table joins against a real broker: payments enriched from a co-partitioned,
//! compacted merchant table written by a transactional producer. The pipeline is stopped
//! and restarted between table versions (each start reads the table anew), the table
//! changes while it runs, an aborted table transaction must never be seen, and processor
//! failures replay batches: every payment is joined exactly once, with the merchant row it
//! must have seen.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_eos::codec::Json;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder, Summary};
use kafka_eos_testkit::admin;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use crate::common::{bootstrap, caught_up, committed_by_key, replaying, run_expecting_error, spawn, unique, FailOnce};

const PARTITIONS: i32 = 3;
const MERCHANTS: u32 = 30;

#[derive(serde::Serialize, serde::Deserialize)]
struct Merchant {
    country: String,
}

fn merchant(m: u32) -> String {
    format!("m{m:02}")
}

struct Join {
    bootstrap: String,
    payments: String,
    merchants: String,
    output: String,
    app: String,
    guarantee: Guarantee,
    /// Records that failed once already (an injected abort each).
    failed: FailOnce,
}

impl Join {
    async fn new(prefix: &str, guarantee: Guarantee) -> Join {
        let name = unique(prefix);
        let j = Join {
            bootstrap: bootstrap(),
            payments: format!("{name}-payments"),
            merchants: format!("{name}-merchants"),
            output: format!("{name}-out"),
            app: name,
            guarantee,
            failed: FailOnce::default(),
        };
        let (b, p, m, o) = (j.bootstrap.clone(), j.payments.clone(), j.merchants.clone(), j.output.clone());
        tokio::task::spawn_blocking(move || {
            admin::create_topic(&b, &p, PARTITIONS, 1)?;
            admin::create_topic(&b, &o, PARTITIONS, 1)?;
            kafka_eos::admin::create_topic_with(&b, &m, PARTITIONS, 1, &[("cleanup.policy", "compact")])
        })
        .await
        .unwrap()
        .expect("topics");
        j
    }

    /// Payment value `id`, keyed by its merchant: output `id` -> the merchant's country,
    /// or `none`. Every 97th record fails once (a replay).
    fn pipeline(&self) -> PipelineBuilder {
        let mut b = replaying(&self.bootstrap, &self.app, &self.payments, self.guarantee, 100);
        let merchants = b.table::<Merchant, _>(&self.merchants, Json);
        let out = b.output_topic(&self.output);
        let failed = self.failed.clone();
        b.processor(move |ctx, rec| {
            failed.check(rec, rec.offset % 97 == 13)?;
            let key = rec.key.clone().unwrap_or_default();
            let country = ctx.table(&merchants).get(&key)?.map_or("none".to_string(), |m| m.country.clone());
            let id = rec.value.clone().unwrap_or_default();
            ctx.emit(OutputRecord::to(&out).key(id).value(country));
            Ok(())
        })
    }

    /// Writes `rows` (merchant -> country, `None`: delete) to the table in one transaction,
    /// committed or aborted.
    async fn write_table(&self, rows: Vec<(u32, Option<String>)>, commit: bool) {
        let (b, topic, id) = (self.bootstrap.clone(), self.merchants.clone(), format!("{}-table-writer", self.app));
        tokio::task::spawn_blocking(move || {
            let p: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &b)
                .set("transactional.id", &id)
                .create()
                .expect("table producer");
            let t = Duration::from_secs(30);
            p.init_transactions(t).expect("init");
            p.begin_transaction().expect("begin");
            for (m, country) in rows {
                let key = merchant(m);
                let value = country.map(|c| serde_json::to_vec(&Merchant { country: c }).unwrap());
                let mut record = BaseRecord::<String, Vec<u8>>::to(&topic).key(&key);
                if let Some(v) = &value {
                    record = record.payload(v);
                }
                p.send(record).map_err(|(e, _)| e).expect("send");
            }
            if commit {
                p.commit_transaction(t).expect("commit");
            } else {
                p.flush(t).expect("flush");
                p.abort_transaction(t).expect("abort");
            }
        })
        .await
        .unwrap();
    }

    /// Payments `ids`, payment `i` to merchant `i % MERCHANTS` (keyed by it: the default
    /// partitioner puts it in the merchant row's partition).
    async fn pay(&self, ids: std::ops::Range<u32>, merchants: impl Fn(u32) -> u32) {
        let records: Vec<_> =
            ids.map(|i| (None, merchant(merchants(i)).into_bytes(), format!("p{i:05}").into_bytes())).collect();
        let (b, t) = (self.bootstrap.clone(), self.payments.clone());
        tokio::task::spawn_blocking(move || admin::produce(&b, &t, records)).await.unwrap().expect("produce");
    }

    async fn caught_up(&self) {
        caught_up(&self.bootstrap, &self.app, &self.payments).await
    }

    /// Every committed output: payment id -> countries it was joined with.
    async fn outputs(&self) -> BTreeMap<String, Vec<String>> {
        committed_by_key(&self.bootstrap, &self.payments, &self.output).await
    }
}

async fn joins_see_the_committed_table_across_restarts_updates_and_replays(guarantee: Guarantee) {
    let j = Join::new("table", guarantee).await;
    let v1 = |m: u32| Some(format!("v1-{}", merchant(m)));
    j.write_table((0..MERCHANTS).map(|m| (m, v1(m))).collect(), true).await;
    j.write_table((0..5).map(|m| (m, Some("aborted".to_string()))).collect(), false).await;
    let mut summaries: Vec<Summary> = Vec::new();

    // 1: the table as first written.
    let run = spawn(j.pipeline());
    j.pay(0..600, |i| i % MERCHANTS).await;
    j.caught_up().await;
    summaries.push(run.stop().await);

    // 2: a new version of m00..m09 and m29 deleted while stopped: the restart reads them.
    j.write_table((0..10).map(|m| (m, Some(format!("v2-{}", merchant(m))))).chain([(29, None)]).collect(), true).await;
    j.pay(600..1200, |i| i % MERCHANTS).await;
    let run = spawn(j.pipeline());
    j.caught_up().await;

    // 3: m10..m14 change while it runs; payments written well after the change see it.
    j.write_table((10..15).map(|m| (m, Some(format!("v3-{}", merchant(m))))).collect(), true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    j.pay(1200..1500, |i| 10 + i % 5).await;
    j.caught_up().await;
    summaries.push(run.stop().await);

    let want = |i: u32| -> String {
        let m = if i < 1200 { i % MERCHANTS } else { 10 + i % 5 };
        match (i, m) {
            (..600, _) => format!("v1-{}", merchant(m)),
            (600..1200, 0..10) => format!("v2-{}", merchant(m)),
            (600..1200, 29) => "none".to_string(),
            (600..1200, _) => format!("v1-{}", merchant(m)),
            _ => format!("v3-{}", merchant(m)),
        }
    };
    let outputs = j.outputs().await;
    let aborts: u64 = summaries.iter().map(|s| s.transactions_aborted).sum();
    println!("{guarantee:?}: {} payments joined, {aborts} aborted transactions", outputs.len());
    let twice: Vec<_> = outputs.iter().filter(|(_, v)| v.len() > 1).take(5).collect();
    assert!(twice.is_empty(), "payments joined more than once: {twice:?}");
    let wrong: Vec<_> = (0..1500)
        .filter_map(|i| {
            let id = format!("p{i:05}");
            let got = outputs.get(&id).map(|v| v[0].clone());
            (got.as_deref() != Some(want(i).as_str())).then(|| (id, got, want(i)))
        })
        .take(10)
        .collect();
    assert!(wrong.is_empty(), "wrong or missing joins (payment, got, want): {wrong:?}");
    assert_eq!(outputs.len(), 1500);
    assert!(!outputs.values().flatten().any(|c| c == "aborted"), "an aborted table row was seen");
    assert!(aborts > 0, "the injected failures must replay batches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_joins_per_partition_exactly_once() {
    joins_see_the_committed_table_across_restarts_updates_and_replays(Guarantee::ExactlyOncePerPartition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_joins_per_consumer_exactly_once() {
    joins_see_the_committed_table_across_restarts_updates_and_replays(Guarantee::ExactlyOncePerConsumer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_not_co_partitioned_with_the_input_is_refused_at_start() {
    let name = unique("table-layout");
    let (b, input, table) = (bootstrap(), format!("{name}-in"), format!("{name}-table"));
    let (b2, i2, t2) = (b.clone(), input.clone(), table.clone());
    tokio::task::spawn_blocking(move || {
        admin::create_topic(&b2, &i2, 3, 1)?;
        admin::create_topic(&b2, &t2, 2, 1)
    })
    .await
    .unwrap()
    .expect("topics");
    let mut builder = Pipeline::builder()
        .bootstrap_servers(&b)
        .application_id(&name)
        .input_topic(&input)
        .handle_signals(false)
        .startup_timeout(Duration::from_secs(10));
    let _ = builder.table::<Merchant, _>(&table, Json);
    let err = run_expecting_error(builder.processor(|_, _| Ok(()))).await.to_string();
    assert!(err.contains("co-partitioned") && err.contains("has 2 partitions"), "{err}");
}
