//! Global tables against a real broker: card payments (4 partitions, keyed by card)
//! enriched from a merchant table (3 partitions, rows placed by merchant) that is not
//! co-partitioned with them, on two instances of one group. Every instance must read every
//! table partition before its first record, follow the updates committed while it runs, and
//! never see an aborted table transaction; replays (injected processor failures) must not
//! duplicate a payment.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_eos::codec::Json;
use kafka_eos::{Guarantee, OutputRecord, PipelineBuilder, Summary};
use kafka_eos_testkit::admin;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use crate::common::{bootstrap, caught_up, committed_by_key, replaying, spawn, unique, FailOnce};

const CARD_PARTITIONS: i32 = 4;
const TABLE_PARTITIONS: i32 = 3;
const MERCHANTS: u32 = 30;
const CARDS: u32 = 37;

#[derive(serde::Serialize, serde::Deserialize)]
struct Merchant {
    country: String,
}

fn merchant(m: u32) -> String {
    format!("m{m:02}")
}

struct Enrich {
    bootstrap: String,
    payments: String,
    merchants: String,
    output: String,
    app: String,
    failed: FailOnce,
}

impl Enrich {
    async fn new() -> Enrich {
        let name = unique("global-table");
        let e = Enrich {
            bootstrap: bootstrap(),
            payments: format!("{name}-payments"),
            merchants: format!("{name}-merchants"),
            output: format!("{name}-out"),
            app: name,
            failed: FailOnce::default(),
        };
        let (b, p, m, o) = (e.bootstrap.clone(), e.payments.clone(), e.merchants.clone(), e.output.clone());
        tokio::task::spawn_blocking(move || {
            admin::create_topic(&b, &p, CARD_PARTITIONS, 1)?;
            admin::create_topic(&b, &o, CARD_PARTITIONS, 1)?;
            kafka_eos::admin::create_topic_with(&b, &m, TABLE_PARTITIONS, 1, &[("cleanup.policy", "compact")])
        })
        .await
        .unwrap()
        .expect("topics");
        e
    }

    /// Payment value `<id>:<merchant>`, keyed by card: output `id` -> the merchant's
    /// country, or `none`. Every 97th record fails once (a replay).
    fn pipeline(&self) -> PipelineBuilder {
        let mut b = replaying(&self.bootstrap, &self.app, &self.payments, Guarantee::ExactlyOncePerPartition, 50);
        let merchants = b.global_table::<Merchant, _>(&self.merchants, Json);
        let out = b.output_topic(&self.output);
        let failed = self.failed.clone();
        b.processor(move |ctx, rec| {
            failed.check(rec, rec.offset % 97 == 13)?;
            let value = String::from_utf8_lossy(rec.value.as_deref().unwrap_or_default()).into_owned();
            let (id, m) = value.split_once(':').ok_or("payment without a merchant")?;
            let country = ctx.table(&merchants).get(m)?.map_or("none".to_string(), |m| m.country.clone());
            ctx.emit(OutputRecord::to(&out).key(id).value(country));
            Ok(())
        })
    }

    /// Writes `rows` (merchant -> country, `None`: delete) to the table in one transaction,
    /// committed or aborted; merchant `m`'s row goes to table partition `m % 3`.
    async fn write_table(&self, rows: Vec<(u32, Option<String>)>, commit: bool) {
        let (b, topic, id) = (self.bootstrap.clone(), self.merchants.clone(), format!("{}-table-writer", self.app));
        tokio::task::spawn_blocking(move || {
            let p: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", &b)
                .set("transactional.id", &id)
                .create()
                .expect("producer");
            let t = Duration::from_secs(30);
            p.init_transactions(t).expect("init");
            p.begin_transaction().expect("begin");
            for (m, country) in rows {
                let key = merchant(m);
                let value = country.map(|c| serde_json::to_vec(&Merchant { country: c }).unwrap());
                let mut record =
                    BaseRecord::<String, Vec<u8>>::to(&topic).key(&key).partition((m as i32) % TABLE_PARTITIONS);
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

    /// Payments `ids`, payment `i` by card `i % 37` (its key: the stream's partitioning) to
    /// merchant `merchants(i)`.
    async fn pay(&self, ids: std::ops::Range<u32>, merchants: impl Fn(u32) -> u32) {
        let records: Vec<_> = ids
            .map(|i| {
                let card = format!("card{:02}", i % CARDS).into_bytes();
                (None, card, format!("p{i:05}:{}", merchant(merchants(i))).into_bytes())
            })
            .collect();
        let (b, t) = (self.bootstrap.clone(), self.payments.clone());
        tokio::task::spawn_blocking(move || admin::produce(&b, &t, records)).await.unwrap().expect("produce");
    }

    async fn caught_up(&self) {
        caught_up(&self.bootstrap, &self.app, &self.payments).await
    }

    /// Every committed output: payment id -> countries it was enriched with.
    async fn outputs(&self) -> BTreeMap<String, Vec<String>> {
        committed_by_key(&self.bootstrap, &self.payments, &self.output).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_table_enriches_by_a_key_the_stream_is_not_partitioned_by() {
    let e = Enrich::new().await;
    let v1 = |m: u32| Some(format!("v1-{}", merchant(m)));
    e.write_table((0..MERCHANTS).map(|m| (m, v1(m))).collect(), true).await;
    e.write_table((0..MERCHANTS).map(|m| (m, Some("aborted".to_string()))).collect(), false).await;

    // Two instances of the group: each holds some card partitions and the whole table.
    let runs = [spawn(e.pipeline()), spawn(e.pipeline())];
    e.pay(0..600, |i| i % MERCHANTS).await;
    e.caught_up().await;

    // m10..m14 change and m29 is deleted while they run; payments written well after the
    // change see it.
    e.write_table((10..15).map(|m| (m, Some(format!("v2-{}", merchant(m))))).chain([(29, None)]).collect(), true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    e.pay(600..900, |i| if i % 6 == 5 { 29 } else { 10 + i % 5 }).await;
    e.caught_up().await;
    let mut summaries: Vec<Summary> = Vec::new();
    for run in runs {
        summaries.push(run.stop().await);
    }

    let want = |i: u32| -> String {
        match i {
            ..600 => format!("v1-{}", merchant(i % MERCHANTS)),
            _ if i % 6 == 5 => "none".to_string(),
            _ => format!("v2-{}", merchant(10 + i % 5)),
        }
    };
    let outputs = e.outputs().await;
    let aborts: u64 = summaries.iter().map(|s| s.transactions_aborted).sum();
    let per_instance: Vec<u64> = summaries.iter().map(|s| s.records_in).collect();
    println!(
        "{} payments enriched, {aborts} aborted transactions, records per instance {per_instance:?}",
        outputs.len()
    );
    let twice: Vec<_> = outputs.iter().filter(|(_, v)| v.len() > 1).take(5).collect();
    assert!(twice.is_empty(), "payments enriched more than once: {twice:?}");
    let wrong: Vec<_> = (0..900)
        .filter_map(|i| {
            let id = format!("p{i:05}");
            let got = outputs.get(&id).map(|v| v[0].clone());
            (got.as_deref() != Some(want(i).as_str())).then(|| (id, got, want(i)))
        })
        .take(10)
        .collect();
    assert!(wrong.is_empty(), "wrong or missing enrichments (payment, got, want): {wrong:?}");
    assert_eq!(outputs.len(), 900);
    assert!(!outputs.values().flatten().any(|c| c == "aborted"), "an aborted table row was seen");
    assert!(aborts > 0, "the injected failures must replay batches");
    assert!(per_instance.iter().all(|n| *n > 0), "both instances must process payments: {per_instance:?}");
}
