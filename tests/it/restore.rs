//! Where a restore ends: a changelog transaction that never committed (an instance that
//! crashed after writing its state changes, before sending its offsets) keeps the
//! changelog's last stable offset (LSO) below changes committed after it. A read_committed
//! read to the LSO misses them, while the input resumes past them: the state goes back in
//! time. A restore reads to the high watermark it saw at its start instead, waiting for such
//! a transaction to end (it is aborted at its transaction timeout).

use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use kafka_eos::state::{changelog_topic, Store};
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder};
use kafka_eos_testkit::admin::{self, Client};
use kafka_eos_testkit::read::read_all;
use kafka_eos_testkit::write::Writer;

use crate::common::{bootstrap, spawn, unique};

/// How long the open changelog transaction lives before the coordinator aborts it.
const OPEN_FOR: Duration = Duration::from_secs(15);

struct Setup {
    bootstrap: String,
    input: String,
    output: String,
    app: String,
    guarantee: Guarantee,
}

impl Setup {
    /// A pipeline counting records per key and emitting `key -> count` for each (per
    /// consumer, the transactional.id is the instance's).
    fn pipeline(&self, instance: &str) -> PipelineBuilder {
        let mut b = Pipeline::builder()
            .bootstrap_servers(&self.bootstrap)
            .application_id(&self.app)
            .input_topic(&self.input)
            .guarantee(self.guarantee)
            .instance_id(instance)
            .handle_signals(false);
        let counts: Store<Vec<u8>, u64> = b.store("counts");
        let out = b.output_topic(&self.output);
        b.processor(move |ctx, r| {
            let key = r.key.clone().unwrap_or_default();
            let mut store = ctx.store(&counts);
            let n = store.get(&key)?.unwrap_or(0) + 1;
            store.put(&key, &n)?;
            ctx.emit(OutputRecord::to(&out).key(key).value(n.to_string()));
            Ok(())
        })
    }

    async fn create_topics(&self) {
        let (b, i, o) = (self.bootstrap.clone(), self.input.clone(), self.output.clone());
        tokio::task::spawn_blocking(move || {
            admin::create_topic(&b, &i, 1, 1)?;
            admin::create_topic(&b, &o, 1, 1)
        })
        .await
        .unwrap()
        .expect("topics");
    }

    async fn produce(&self, n: usize) {
        let (b, topic) = (self.bootstrap.clone(), self.input.clone());
        tokio::task::spawn_blocking(move || {
            let w = Writer::new(&Client::new(&b))?;
            for _ in 0..n {
                w.send(&OutputRecord::to(topic.as_str()).partition(0).key("k").value("x"))?;
            }
            w.flush_all_delivered(Duration::from_secs(30))
        })
        .await
        .unwrap()
        .expect("produce");
    }

    /// The committed counts emitted so far, in order.
    async fn counts(&self) -> Vec<String> {
        let (b, topic) = (self.bootstrap.clone(), self.output.clone());
        let records = tokio::task::spawn_blocking(move || read_all(&Client::new(&b), &topic, Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("read outputs");
        records.iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()).collect()
    }

    /// Runs instance `instance` over `n` new records and stops it once their counts are out.
    async fn run(&self, instance: &str, n: usize, outputs_after: usize) -> Vec<String> {
        let run = spawn(self.pipeline(instance));
        self.produce(n).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut out = self.counts().await;
        while out.len() < outputs_after && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(300)).await;
            out = self.counts().await;
        }
        run.stop().await;
        out
    }
}

/// Instance a counts 3 records. A transaction of another producer is left open in the
/// changelog (as one of a crashed instance). Instance b counts 2 more, instance c 1 more:
/// the counts must run on, 1 to 6 — with a restore that stops at the LSO, c restores only
/// a's state and emits 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_reads_past_a_transaction_left_open_in_the_changelog() {
    let s = Setup {
        bootstrap: bootstrap(),
        input: unique("restore-in"),
        output: unique("restore-out"),
        app: unique("restore"),
        guarantee: Guarantee::ExactlyOncePerConsumer,
    };
    s.create_topics().await;

    assert_eq!(s.run("a", 3, 3).await, ["1", "2", "3"]);

    // A transaction left open on the changelog: a change written, no offsets, no commit.
    let changelog = changelog_topic(&s.app, "counts");
    let (b, id) = (s.bootstrap.clone(), unique("crashed"));
    let open = tokio::task::spawn_blocking(move || {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &b)
            .set("transactional.id", &id)
            .set("transaction.timeout.ms", OPEN_FOR.as_millis().to_string())
            .create()
            .expect("producer");
        p.init_transactions(Duration::from_secs(30)).expect("init");
        p.begin_transaction().expect("begin");
        p.send(BaseRecord::<[u8], [u8]>::to(&changelog).partition(0).key(b"garbage").payload(b"never committed"))
            .map_err(|(e, _)| e)
            .expect("send");
        p.flush(Duration::from_secs(30)).expect("written");
        p // kept open: dropped at the end of the test
    })
    .await
    .unwrap();

    assert_eq!(s.run("b", 2, 5).await, ["1", "2", "3", "4", "5"]);
    let out = s.run("c", 1, 6).await;
    assert_eq!(out, ["1", "2", "3", "4", "5", "6"], "c restored b's committed counts too");
    drop(open);
}

/// The group's committed offsets are gone (expired after `offsets.retention.minutes` while
/// the pipeline was stopped; here deleted with the group) while the changelog keeps the
/// state they were committed with. Processing from the log's start would count every record
/// a second time onto the restored counts and emit them again; the pipeline stops instead,
/// naming the partition, with nothing emitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_restored_without_the_groups_offsets_stops_the_pipeline() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let s = Setup {
            bootstrap: bootstrap(),
            input: unique("expired-in"),
            output: unique("expired-out"),
            app: unique("expired"),
            guarantee,
        };
        s.create_topics().await;
        assert_eq!(s.run("a", 3, 3).await, ["1", "2", "3"], "{guarantee:?}");

        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &s.bootstrap).create().expect("admin client");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Refused while the stopped member's session lingers (NON_EMPTY_GROUP).
            let deleted = admin.delete_groups(&[s.app.as_str()], &AdminOptions::new()).await.expect("delete group");
            match &deleted[0] {
                Ok(_) => break,
                Err((_, code)) if Instant::now() < deadline => {
                    tracing::debug!(?code, "group not deleted yet");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("cannot delete the group: {e:?}"),
            }
        }

        let run = spawn(s.pipeline("b"));
        s.produce(1).await;
        let handle = run.handle.clone();
        let Ok(ended) = tokio::time::timeout(Duration::from_secs(60), run.finish()).await else {
            handle.shutdown();
            tokio::time::sleep(Duration::from_secs(5)).await;
            panic!("{guarantee:?}: still running after 60 s; outputs {:?}", s.counts().await);
        };
        let err = ended.expect_err("the pipeline must stop");
        match &err {
            kafka_eos::Error::StateWithoutOffsets { partition, .. } => {
                assert_eq!(partition, &format!("{}-0", s.input), "{guarantee:?}")
            }
            other => panic!("{guarantee:?}: expected state without offsets, got {other}"),
        }
        assert!(err.to_string().contains("offsets.retention.minutes"), "the message says why: {err}");
        assert_eq!(s.counts().await, ["1", "2", "3"], "{guarantee:?}: nothing counted twice");
    }
}
