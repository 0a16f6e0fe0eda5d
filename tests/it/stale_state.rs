//! A new owner must not go on from its own state once another transaction committed the
//! partition past what that state reflects. The other transaction is a zombie's: a member
//! the group expired unseen (stalled inside a revocation) that, resuming, reconciled its
//! unknown transaction with a fresh producer of the partition's transactional.id — fencing
//! the new owner — and committed its replay. Staged here by hand: the test commits as that
//! zombie would (a change to the store's changelog and the input offsets, marked as another
//! transaction's) after the new owner restored the partition and before its first record.
//! It commits under a transactional.id of its own, so that the new owner's producer stays
//! usable: with the shared id, which of the new owner's calls fails first decides whether
//! it gives its producer up (and restores afresh) or reconciles against the offset it read,
//! and only the second path showed the flaw. What is tested is the new owner's reaction to
//! the commit, whichever way it learns of it.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use kafka_eos::processor::{Context, ProcessError, Processor};
use kafka_eos::state::{changelog_topic, format::FORMAT, Store};
use kafka_eos::timers::{Timer, Timers};
use kafka_eos::{Guarantee, InputRecord, OutputRecord, Pipeline, PipelineBuilder, Topic};
use kafka_eos_testkit::admin::Client;
use kafka_eos_testkit::read::read_all;
use kafka_eos_testkit::write::Writer;

use crate::common::{bootstrap, spawn, unique};

const STORE: &str = "counts";
const KEY: &str = "k";

/// Counts records per key and emits the new count. Its timers (never set) make the runtime
/// restore a partition's state as soon as it is assigned, before any record.
#[derive(Clone)]
struct Count {
    counts: Store<String, u64>,
    out: Topic,
    _timers: Timers,
}

impl Processor for Count {
    async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(rec.key.as_deref().unwrap_or_default()).into_owned();
        let mut counts = ctx.store(&self.counts);
        let n = counts.get(&key)?.unwrap_or(0) + 1;
        counts.put(&key, &n)?;
        ctx.emit(OutputRecord::to(&self.out).key(key).value(n.to_string()));
        Ok(())
    }

    async fn on_timer(&mut self, _ctx: &mut Context<'_>, _timer: &Timer) -> Result<(), ProcessError> {
        Ok(())
    }
}

fn pipeline(bootstrap: &str, app: &str, input: &str, output: &str) -> PipelineBuilder {
    let mut b = Pipeline::builder()
        .bootstrap_servers(bootstrap)
        .application_id(app)
        .input_topic(input)
        .guarantee(Guarantee::ExactlyOncePerPartition)
        .commit_interval(Duration::from_millis(100))
        .handle_signals(false);
    let timers = Timers::new(&mut b, "count-timers");
    let counts = b.store(STORE);
    let out = b.output_topic(output);
    b.processor_impl(Count { counts, out, _timers: timers })
}

async fn produce(bootstrap: &str, topic: &str, n: usize) {
    let (b, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let w = Writer::new(&Client::new(&b))?;
        for i in 0..n {
            w.send(&OutputRecord::to(topic.as_str()).partition(0).key(KEY).value(i.to_string()))?;
        }
        w.flush_all_delivered(Duration::from_secs(30))
    })
    .await
    .unwrap()
    .expect("produce");
}

/// The zombie's transaction: the store's count of [`KEY`] set to `count` in its changelog
/// and the input's offset committed at `offset`, marked as no transaction of the pipeline's
/// (see the module docs for its transactional.id).
fn commit_as_zombie(bootstrap: &str, app: &str, input: &str, count: u64, offset: i64) {
    let timeout = Duration::from_secs(30);
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", format!("{app}:zombie"))
        .create()
        .expect("zombie producer");
    producer.init_transactions(timeout).expect("init_transactions");
    producer.begin_transaction().expect("begin");
    // The store's encoding: [FORMAT] ++ bincode(key), [FORMAT, schema 1] ++ bincode(value).
    let mut key = vec![FORMAT];
    key.extend_from_slice(&(KEY.len() as u64).to_le_bytes());
    key.extend_from_slice(KEY.as_bytes());
    let mut value = vec![FORMAT, 1];
    value.extend_from_slice(&count.to_le_bytes());
    let changelog = changelog_topic(app, STORE);
    producer
        .send(BaseRecord::to(&changelog).partition(0).key(&key).payload(&value))
        .map_err(|(e, _)| e)
        .expect("changelog record");
    let group: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("group.id", app).create().expect("group");
    let metadata = group.group_metadata().expect("group metadata");
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(input, 0, Offset::Offset(offset)).expect("offset");
    let mut marked = offsets.find_partition(input, 0).expect("partition");
    marked.set_metadata("zombie");
    producer.send_offsets_to_transaction(&offsets, &metadata, timeout).expect("send_offsets");
    producer.commit_transaction(timeout).expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_owner_fenced_by_a_zombies_commit_does_not_go_on_from_its_stale_state() {
    let b = bootstrap();
    let (input, output, app) = (unique("stale-in"), unique("stale-out"), unique("stale"));
    let (bb, i, o) = (b.clone(), input.clone(), output.clone());
    tokio::task::spawn_blocking(move || {
        kafka_eos_testkit::admin::create_topic(&bb, &i, 1, 1)?;
        kafka_eos_testkit::admin::create_topic(&bb, &o, 1, 1)
    })
    .await
    .unwrap()
    .expect("topics");
    let caught_up = |app: String| {
        let (b, t) = (b.clone(), vec![input.clone()]);
        async move {
            tokio::task::spawn_blocking(move || {
                kafka_eos_testkit::admin::wait_for_catch_up(&b, &app, &t, Duration::from_secs(90))
            })
            .await
            .unwrap()
            .expect("catch up")
        }
    };

    // The first owner counts 100 records and stops: the state (count 100) and offset 100 commit.
    produce(&b, &input, 100).await;
    let first = spawn(pipeline(&b, &app, &input, &output));
    caught_up(app.clone()).await;
    first.stop().await;

    // The new owner restores the partition at its assignment (count 100 at offset 100).
    let second = spawn(pipeline(&b, &app, &input, &output));
    let deadline = Instant::now() + Duration::from_secs(60);
    while second.handle.summary().restored_records == 0 {
        assert!(Instant::now() < deadline, "the new owner did not restore the partition");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The zombie's replay commits: it had the count at 1,000 by offset 105.
    let (bb, a, i) = (b.clone(), app.clone(), input.clone());
    tokio::task::spawn_blocking(move || commit_as_zombie(&bb, &a, &i, 1_000, 105)).await.unwrap();
    produce(&b, &input, 10).await;
    caught_up(app.clone()).await;
    let summary = second.stop().await;

    // Offsets 105..110 count on from the zombie's commit; nothing counts from the stale 100.
    let (bb, o) = (b.clone(), output.clone());
    let records = tokio::task::spawn_blocking(move || read_all(&Client::new(&bb), &o, Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("read outputs");
    let counts: Vec<u64> = records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).parse().unwrap())
        .collect();
    let first_owner: Vec<u64> = (1..=100).collect();
    assert_eq!(counts[..100.min(counts.len())], first_owner[..], "the first owner's counts");
    assert_eq!(counts[100..], [1_001, 1_002, 1_003, 1_004, 1_005], "after the zombie's commit ({summary:?})");
}
