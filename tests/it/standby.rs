//! Standby replicas: an instance keeps warm copies of the partitions the other owns, and a
//! partition that moves to it continues its copy, reading only the changelog's tail, with
//! every count still exactly once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kafka_eos::state::Store;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder, ShutdownHandle};
use kafka_eos_disk::DiskStore;
use kafka_eos_testkit::admin::{self, Client};
use kafka_eos_testkit::write::Writer;

use crate::common::{bootstrap, caught_up, committed_by_key, spawn, unique};

const KEYS: usize = 400;
const PARTITIONS: i32 = 4;

struct Setup {
    bootstrap: String,
    input: String,
    output: String,
    app: String,
    /// The instances' state directories, for the disk backend.
    dirs: Option<(tempfile::TempDir, tempfile::TempDir)>,
}

impl Setup {
    async fn new(name: &str, disk: bool) -> Setup {
        let s = Setup {
            bootstrap: bootstrap(),
            input: unique(&format!("{name}-in")),
            output: unique(&format!("{name}-out")),
            app: unique(name),
            dirs: disk.then(|| (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())),
        };
        let (b, i, o) = (s.bootstrap.clone(), s.input.clone(), s.output.clone());
        tokio::task::spawn_blocking(move || {
            admin::create_topic(&b, &i, PARTITIONS, 1)?;
            admin::create_topic(&b, &o, PARTITIONS, 1)
        })
        .await
        .unwrap()
        .expect("topics");
        s
    }

    fn dir(&self, instance: usize) -> Option<PathBuf> {
        self.dirs.as_ref().map(|(a, b)| if instance == 0 { a.path() } else { b.path() }.to_path_buf())
    }

    /// Counts records per key and emits `key -> count`, with one standby replica.
    fn pipeline(&self, instance: usize) -> PipelineBuilder {
        let mut b = Pipeline::builder()
            .bootstrap_servers(&self.bootstrap)
            .application_id(&self.app)
            .input_topic(&self.input)
            .guarantee(Guarantee::ExactlyOncePerPartition)
            .instance_id(format!("i{instance}"))
            .commit_interval(Duration::from_millis(100))
            .standby_replicas(1)
            .handle_signals(false);
        if let Some(dir) = self.dir(instance) {
            b = b.state_backend(DiskStore::at(dir).factory());
        }
        let counts: Store<String, u64> = b.store("counts");
        let out = b.output_topic(&self.output);
        b.processor(move |ctx, r| {
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            let mut store = ctx.store(&counts);
            let n = store.get(&key)?.unwrap_or(0) + 1;
            store.put(&key, &n)?;
            ctx.emit(OutputRecord::to(&out).key(key).value(n.to_string()));
            Ok(())
        })
    }

    /// `rounds` records of every key.
    async fn produce(&self, rounds: usize) {
        let (b, topic) = (self.bootstrap.clone(), self.input.clone());
        tokio::task::spawn_blocking(move || {
            let w = Writer::new(&Client::new(&b))?;
            for _ in 0..rounds {
                for k in 0..KEYS {
                    w.send(&OutputRecord::to(topic.as_str()).key(format!("k{k}")).value("x"))?;
                }
            }
            w.flush_all_delivered(Duration::from_secs(30))
        })
        .await
        .unwrap()
        .expect("produce");
    }
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Instance 0 counts alone, then instance 1 joins and each keeps a copy of the other's
/// partitions. Instance 0 stops: instance 1 takes its partitions over from its copies —
/// every moved partition continues a copy, and the takeover reads a small part of the
/// changelog records a full restore of them would — and every key's counts run 1..=N with
/// no gap and no repeat.
async fn takeover_continues_the_standby(name: &str, disk: bool) {
    let s = Setup::new(name, disk).await;
    let first = spawn(s.pipeline(0));
    s.produce(20).await;
    caught_up(&s.bootstrap, &s.app, &s.input).await;
    let second = spawn(s.pipeline(1));
    let (h0, h1): (ShutdownHandle, ShutdownHandle) = (first.handle.clone(), second.handle.clone());
    let owned = |h: &ShutdownHandle| h.health().partitions.iter().filter(|p| p.topic == s.input).count();
    wait_for("the group settled on both instances", Duration::from_secs(60), || {
        owned(&h0) + owned(&h1) == PARTITIONS as usize && owned(&h1) > 0
    })
    .await;
    // Instance 1's copies of instance 0's partitions read their changelogs from the start.
    wait_for("instance 1 keeping copies", Duration::from_secs(60), || h1.summary().standby_records > 0).await;
    s.produce(10).await;
    caught_up(&s.bootstrap, &s.app, &s.input).await;
    let committed = h0.summary().changelog_records + h1.summary().changelog_records;
    // The copies are written every few hundred milliseconds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let moved = owned(&h0) as u64;
    assert!(moved > 0 && moved < PARTITIONS as u64, "instance 0 holds {moved} partitions");
    let restored_before = h1.summary().restored_records;
    first.stop().await;

    s.produce(10).await;
    caught_up(&s.bootstrap, &s.app, &s.input).await;
    let summary = second.stop().await;
    assert_eq!(summary.standby_handovers, moved, "every moved partition continued its copy: {summary:?}");
    let takeover = summary.restored_records - restored_before;
    assert!(
        takeover * 10 < committed,
        "the takeover read {takeover} changelog records; all partitions' changelogs hold {committed}"
    );
    let by_key = committed_by_key(&s.bootstrap, &s.input, &s.output).await;
    assert_eq!(by_key.len(), KEYS);
    let want: Vec<String> = (1..=40).map(|n| n.to_string()).collect();
    for (key, counts) in by_key {
        assert_eq!(counts, want, "key {key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_partition_continues_its_standby_in_memory() {
    takeover_continues_the_standby("standby-mem", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_partition_continues_its_standby_on_disk() {
    takeover_continues_the_standby("standby-disk", true).await;
}
