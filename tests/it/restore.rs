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
}

impl Setup {
    /// A per-consumer pipeline (the transactional.id is the instance's) counting records
    /// per key and emitting `key -> count` for each.
    fn pipeline(&self, instance: &str) -> PipelineBuilder {
        let mut b = Pipeline::builder()
            .bootstrap_servers(&self.bootstrap)
            .application_id(&self.app)
            .input_topic(&self.input)
            .guarantee(Guarantee::ExactlyOncePerConsumer)
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
    };
    let (b, i, o) = (s.bootstrap.clone(), s.input.clone(), s.output.clone());
    tokio::task::spawn_blocking(move || {
        admin::create_topic(&b, &i, 1, 1)?;
        admin::create_topic(&b, &o, 1, 1)
    })
    .await
    .unwrap()
    .expect("topics");

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
