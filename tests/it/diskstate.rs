//! State on disk (`kafka-eos-disk`): a restart restores only the changelog's tail from the
//! local checkpoint; SIGKILLs mid-batch and damaged local stores never change the totals.

use std::path::Path;
use std::time::{Duration, Instant};

use kafka_eos::{Guarantee, PipelineBuilder, Summary};
use kafka_eos_cli::workloads::financial_close::Generate;
use kafka_eos_disk::DiskStore;
use kafka_eos_testkit::process::{spawn as spawn_process, SpawnMode};

use crate::common::spawn;
use crate::state::{total, Close};

fn on_disk(c: &Close, dir: &Path) -> PipelineBuilder {
    c.pipeline().state_backend(DiskStore::at(dir).factory())
}

/// Runs an instance on `dir` until the group has caught up with the input, then stops it.
async fn run_to_end(c: &Close, dir: &Path) -> Summary {
    let run = spawn(on_disk(c, dir));
    run.wait_records_in(1, Duration::from_secs(60)).await;
    c.wait_caught_up().await;
    run.stop().await
}

fn reconciled_exactly(rec: &kafka_eos_cli::workloads::financial_close::Reconciliation) {
    assert!(rec.is_exact(), "{rec}");
    assert_eq!(rec.emitted_twice, 0, "{rec}");
}

/// A restart on the same state directory restores nothing (the checkpoint is at the
/// changelog's end); after another instance (another directory: another machine) advanced
/// the changelogs, the partitions come back and only what that instance wrote is read. In
/// both exactly-once modes (per-consumer: one producer's delivery reports checkpoint every
/// partition, and one pass restores them all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_its_checkpoint_restores_only_the_tail() {
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        tail_only(guarantee).await;
    }
}

async fn tail_only(guarantee: Guarantee) {
    let c = Close::new("disk-tail", Generate { payments: 20_000, ..Generate::default() }, guarantee).await;
    let (mine, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    c.produce(0..10_000).await;
    let first = run_to_end(&c, mine.path()).await;
    assert_eq!(first.restored_records, 0, "a new store starts empty: {first:?}");
    assert!(first.changelog_records > 1_000, "{first:?}");

    c.produce(10_000..12_000).await;
    let restart = run_to_end(&c, mine.path()).await;
    assert_eq!(restart.restored_records, 0, "the checkpoint was at the changelog's end: {restart:?}");

    c.produce(12_000..14_000).await;
    let other = run_to_end(&c, theirs.path()).await;
    let full = first.changelog_records + restart.changelog_records;
    assert!(other.restored_records >= full / 2, "no checkpoint there: a full restore, {other:?}");

    c.produce(14_000..20_000).await;
    let back = run_to_end(&c, mine.path()).await;
    let rec = c.reconcile().await;
    println!("{}: {rec}\nfirst: {first:?}\nrestart: {restart:?}\nother: {other:?}\nback: {back:?}", guarantee.as_str());
    reconciled_exactly(&rec);
    assert!(
        back.restored_records >= other.changelog_records && back.restored_records < other.restored_records / 2,
        "back on its own directory, only the tail the other instance wrote ({} changelog records) is read, \
         far below its full restore ({}): read {}",
        other.changelog_records,
        other.restored_records,
        back.restored_records
    );
}

/// The chaos instance (`kafka-eos chaos instance`, a child process) on one state directory,
/// SIGKILLed mid-run three times and restarted: the totals are exact, each window emitted
/// once — the local stores, written only after commits, never hold an aborted change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_mid_batch_on_the_same_state_directory_keep_totals_exact() {
    let payments = 24_000;
    let c =
        Close::new("disk-kill", Generate { payments, ..Generate::default() }, Guarantee::ExactlyOncePerPartition).await;
    let dir = tempfile::tempdir().unwrap();
    // The group's lag; `None` before the group first committed.
    let lag = |c: &Close| {
        kafka_eos_testkit::admin::group_lag(&c.bootstrap, &c.app, std::slice::from_ref(&c.topics.payments)).ok()
    };
    for kill in 0..3u64 {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-eos"));
        cmd.args(["chaos", "instance", "--bootstrap", &c.bootstrap, "--app", &c.app])
            .args([
                "--input",
                &c.topics.payments,
                "--output",
                &c.topics.revenue,
                "--guarantee",
                "exactly-once-per-partition",
            ])
            .args(["--financial-close-payments", &payments.to_string(), "--state-dir"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = spawn_process(cmd, SpawnMode::Attached).expect("chaos instance");
        // Payments keep arriving in small bursts, so the kill lands while batches are in
        // flight; it comes once the instance has committed progress, later each time.
        let part = kill * 6_000..(kill + 1) * 6_000;
        let mut next = part.start;
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut committed_at = None;
        let lag_before = lag(&c).unwrap_or(0);
        while committed_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_millis(500 + 700 * kill)) {
            assert!(Instant::now() < deadline, "kill {kill}: the instance made no progress");
            if next < part.end {
                c.produce(next..next + 250).await;
                next += 250;
            }
            if committed_at.is_none()
                && next > part.start + 1_000
                && lag(&c).is_some_and(|l| l < lag_before + (next - part.start) as i64 - 500)
            {
                committed_at = Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A burst, and the kill tens of milliseconds later: inside its transaction (the
        // commit interval is 100 ms), the burst's changes in the overlay, not on disk.
        let burst = (next + 1_500).min(part.end);
        if next < burst {
            c.produce(next..burst).await;
            next = burst;
        }
        tokio::time::sleep(Duration::from_millis(20 + 30 * kill)).await;
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        let lag_at_kill = lag(&c);
        if next < part.end {
            c.produce(next..part.end).await;
        }
        println!("kill {kill}: {lag_at_kill:?} records uncommitted at the kill");
    }
    c.produce(18_000..payments).await;
    let last = run_to_end(&c, dir.path()).await;
    let rec = c.reconcile().await;
    println!("{rec}\nlast: {last:?}");
    reconciled_exactly(&rec);
}

/// A damaged store file and a deleted store directory are rebuilt from their changelogs;
/// the intact partitions restore nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_or_missing_local_store_is_rebuilt_from_the_changelog() {
    let c = Close::new(
        "disk-damage",
        Generate { payments: 16_000, ..Generate::default() },
        Guarantee::ExactlyOncePerPartition,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    c.produce(0..8_000).await;
    let first = run_to_end(&c, dir.path()).await;
    let stores = dir.path().join(&c.app);
    let mut damaged = 0;
    for store in std::fs::read_dir(&stores).expect("the stores' directories") {
        let store = store.unwrap().path();
        let file = store.join("0").join("state.redb");
        let len = std::fs::metadata(&file).expect("partition 0's store").len() as usize;
        std::fs::write(&file, vec![0x5A; len]).unwrap();
        std::fs::remove_dir_all(store.join("1")).unwrap();
        damaged += 1;
    }
    assert!(damaged >= 2, "the financial close has two stores");
    c.produce(8_000..16_000).await;
    let second = run_to_end(&c, dir.path()).await;
    let rec = c.reconcile().await;
    println!("{rec}\nfirst: {first:?}\nsecond: {second:?}");
    reconciled_exactly(&rec);
    assert!(second.restored_records > 0, "partitions 0 and 1 are rebuilt: {second:?}");
    assert!(
        second.restored_records < first.changelog_records,
        "partitions 2 and 3 keep their checkpoints: {second:?} after {first:?}"
    );
    assert!(total(&[first, second], |s| s.transactions_committed) > 0);
}
