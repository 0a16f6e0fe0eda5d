//! Scaling out under incremental rebalancing (issue 11): partitions that stay with their
//! instance keep committing while others move.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_eos::admin::Client;
use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::{Guarantee, PipelineBuilder, Rebalancing};
use kafka_eos_testkit::write::Writer;

use crate::common::{spawn, topics, unique, Topics};

/// `(when, instance, partition)` of every committed transaction.
type Commits = Arc<Mutex<Vec<(Instant, usize, i32)>>>;

/// Writes one record to every partition every 20 ms until stopped; returns how many.
fn paced_input(t: &Topics, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let (bootstrap, topic, partitions) = (t.bootstrap.clone(), t.input.clone(), t.partitions);
    tokio::task::spawn_blocking(move || {
        let writer = Writer::new(&Client::new(&bootstrap)).expect("writer");
        let mut i = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let records = (0..partitions).map(|p| {
                i += 1;
                (Some(p), i.to_string().into_bytes(), format!("{i:>100}").into_bytes())
            });
            writer.send_all(&topic, records.collect::<Vec<_>>()).expect("send");
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.flush_all_delivered(Duration::from_secs(60)).expect("input delivered")
    })
}

fn recording(builder: PipelineBuilder, commits: &Commits, instance: usize) -> PipelineBuilder {
    let commits = commits.clone();
    builder.on_transaction(move |e: &TransactionEvent| {
        if e.outcome == Outcome::Committed {
            let now = Instant::now();
            let mut c = commits.lock().unwrap();
            c.extend(e.partitions.iter().map(|(_, p)| (now, instance, *p)));
        }
    })
}

/// Two instances share 16 partitions while input flows; a third joins. Every partition
/// that stays with its instance (it committed there before the join and is never
/// committed by another instance) keeps committing throughout: its longest gap between
/// commits, from 2 s before the join until 2 s after the newcomer's first commit, stays
/// under twice the commit interval plus 1 s (the target). Under eager rebalancing
/// every partition pauses for the whole rebalance (the scale study measures it). The run
/// ends exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_instance_leaves_unmoved_partitions_committing() {
    const COMMIT_INTERVAL: Duration = Duration::from_millis(300);
    for (rebalancing, guarantee) in [
        (Rebalancing::Cooperative, Guarantee::ExactlyOnce),
        (Rebalancing::Consumer, Guarantee::ExactlyOnce),
        (Rebalancing::Cooperative, Guarantee::ExactlyOncePerConsumer),
    ] {
        let what = format!("{} / {}", rebalancing.as_str(), guarantee.as_str());
        let t = topics("scale", 16, 0, 100).await;
        let app = unique("scale");
        let commits: Commits = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let input = paced_input(&t, stop.clone());
        let instance = |i: usize| {
            let b = t.pipeline(&app, guarantee).rebalancing(rebalancing).commit_interval(COMMIT_INTERVAL);
            spawn(recording(b, &commits, i))
        };
        let (a, b) = (instance(0), instance(1));
        let committed_by = |i: usize| commits.lock().unwrap().iter().filter(|c| c.1 == i).map(|c| c.2).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while [0, 1].iter().any(|i| BTreeSet::<i32>::is_empty(&committed_by(*i))) {
            assert!(Instant::now() < deadline, "{what}: A and B never both committed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let joined = Instant::now();
        let c = instance(2);
        let deadline = Instant::now() + Duration::from_secs(60);
        let first_c = loop {
            if let Some(first) = commits.lock().unwrap().iter().find(|c| c.1 == 2).map(|c| c.0) {
                break first;
            }
            assert!(Instant::now() < deadline, "{what}: the third instance never committed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.store(true, Ordering::SeqCst);
        let produced = input.await.unwrap();
        t.wait_caught_up(&app, Duration::from_secs(90)).await;
        let summaries = [a.stop().await, b.stop().await, c.stop().await];

        let (from, to) = (joined - Duration::from_secs(2), first_c + Duration::from_secs(2));
        let log = commits.lock().unwrap().clone();
        let mut owners: BTreeMap<i32, BTreeSet<usize>> = BTreeMap::new();
        let mut times: BTreeMap<i32, Vec<Instant>> = BTreeMap::new();
        for (when, i, p) in log.iter().filter(|c| c.0 >= from && c.0 <= to) {
            owners.entry(*p).or_default().insert(*i);
            times.entry(*p).or_default().push(*when);
        }
        let unmoved: Vec<i32> = owners.iter().filter(|(_, o)| o.len() == 1 && !o.contains(&2)).map(|(p, _)| *p).collect();
        let moved = 16 - unmoved.len();
        assert!(!unmoved.is_empty() && moved > 0, "{what}: owners {owners:?}");
        let limit = COMMIT_INTERVAL * 2 + Duration::from_secs(1);
        let mut worst = Duration::ZERO;
        for p in &unmoved {
            let mut ts = times[p].clone();
            ts.sort();
            let edges = std::iter::once(from).chain(ts.iter().copied()).chain(std::iter::once(to));
            let gaps: Vec<Duration> = edges.clone().zip(edges.skip(1)).map(|(x, y)| y - x).collect();
            worst = worst.max(gaps.into_iter().max().unwrap());
        }
        eprintln!(
            "{what}: {} of 16 partitions unmoved, longest commit gap {worst:?} (limit {limit:?}); newcomer's first commit {:?} after joining",
            unmoved.len(),
            first_c - joined
        );
        assert!(worst < limit, "{what}: an unmoved partition stopped committing for {worst:?}");
        let report = t.verify().await;
        assert!(report.is_exactly_once(), "{what}: {report:?}");
        assert_eq!(report.output_records, produced, "{what}");
        assert_eq!(summaries.iter().map(|s| s.records_in).sum::<u64>(), produced, "{what}: {summaries:?}");
    }
}
