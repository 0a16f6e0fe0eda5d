//! Scaling out: how long partitions pause when an instance joins, under each rebalance
//! protocol. Shared by the integration test (`tests/it/scale.rs`, which asserts the
//! targets) and the benchmark (`benches/rebalance.rs`, which prints the figures of
//! `docs/scaling.md`).
//!
//! # The run ([`join_third`])
//! Two instances (in this process, each with its own consumer, producers and threads)
//! share an input topic while a paced writer puts one record into every partition every
//! 20 ms; once both commit, and `settle` later, a third instance joins; `settle` after its
//! first commit the input stops, the group catches up and the copy is verified exactly
//! once. Every committed transaction is logged with its instant, instance and partitions
//! ([`TransactionEvent::partitions`]). In the window from `settle` before the join to
//! `settle` after the newcomer's first commit:
//! - a partition committed by a single instance, not the newcomer, is **unmoved**: its
//!   longest gap between commits (the window's edges count as commits) is what incremental
//!   rebalancing promises to keep short;
//! - any other partition **moved**: its pause is the gap between its last commit at the
//!   old owner and its first at the new one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_eos::admin::Client;
use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::{Guarantee, OutputRecord, Pipeline, Rebalancing, ShutdownHandle, Summary, Topic};
use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};
use kafka_eos_testkit::write::Writer;

/// What to run.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// The cluster.
    pub bootstrap: String,
    /// Input (and output) partitions.
    pub partitions: i32,
    /// The instances' guarantee.
    pub guarantee: Guarantee,
    /// The instances' rebalance protocol.
    pub rebalancing: Rebalancing,
    /// The instances' commit interval.
    pub commit_interval: Duration,
    /// Steady running before the join, and after the newcomer's first commit.
    pub settle: Duration,
}

impl JoinOptions {
    /// 16 partitions, a 300 ms commit interval, 3 s of settling.
    pub fn new(bootstrap: &str, guarantee: Guarantee, rebalancing: Rebalancing) -> JoinOptions {
        JoinOptions {
            bootstrap: bootstrap.to_string(),
            partitions: 16,
            guarantee,
            rebalancing,
            commit_interval: Duration::from_millis(300),
            settle: Duration::from_secs(3),
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct JoinReport {
    /// Partitions that stayed with their instance through the join.
    pub unmoved: usize,
    /// Partitions that changed owner.
    pub moved: usize,
    /// The longest gap between two commits of an unmoved partition.
    pub longest_unmoved_gap: Duration,
    /// The longest pause of a moved partition: its last commit at the old owner to its
    /// first at the new one.
    pub longest_moved_pause: Duration,
    /// From the join to the newcomer's first commit.
    pub newcomer_first_commit: Duration,
    /// Records written.
    pub produced: u64,
    /// The three instances' summaries.
    pub summaries: Vec<Summary>,
    /// The copy's verification.
    pub verified: Report,
    /// Each duplicated input (`topic/partition/offset`) with the output offsets holding it:
    /// what to look for in the instances' logs when the verification fails.
    pub duplicated: Vec<String>,
}

impl JoinReport {
    /// Aborted transactions over all transactions of the three instances.
    pub fn abort_ratio(&self) -> f64 {
        let aborted: u64 = self.summaries.iter().map(|s| s.transactions_aborted).sum();
        let committed: u64 = self.summaries.iter().map(|s| s.transactions_committed).sum();
        aborted as f64 / (aborted + committed).max(1) as f64
    }
}

/// `(when, instance, partition)` of every committed transaction.
type Commits = Arc<Mutex<Vec<(Instant, usize, i32)>>>;

/// Runs the join (see the [module docs](self)); `Err` says what did not happen in time.
pub async fn join_third(opts: &JoinOptions) -> Result<JoinReport, String> {
    let name = crate::bench::unique_name("scale");
    let (input, output) = (format!("{name}-in"), format!("{name}-out"));
    let client = Client::new(&opts.bootstrap);
    for t in [&input, &output] {
        client.create_topic(t, opts.partitions, 1).map_err(|e| format!("creating {t}: {e}"))?;
    }
    let commits: Commits = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = paced_input(&opts.bootstrap, &input, opts.partitions, stop.clone());
    let instance = |i: usize| spawn(opts, &name, &input, &output, commits.clone(), i);
    let mut running = vec![instance(0)?, instance(1)?];
    let committed = |i: usize| commits.lock().unwrap().iter().any(|c| c.1 == i);
    wait_for(Duration::from_secs(60), || committed(0) && committed(1), "the first two instances to commit").await?;
    tokio::time::sleep(opts.settle).await;
    let joined = Instant::now();
    running.push(instance(2)?);
    wait_for(Duration::from_secs(90), || committed(2), "the third instance to commit").await?;
    let first = commits.lock().unwrap().iter().find(|c| c.1 == 2).map(|c| c.0).expect("waited for it");
    tokio::time::sleep(opts.settle).await;
    stop.store(true, Ordering::SeqCst);
    let produced = writer.await.map_err(|e| format!("input writer: {e}"))??;
    let topics = vec![input.clone()];
    let (b, g) = (opts.bootstrap.clone(), name.clone());
    tokio::task::spawn_blocking(move || {
        kafka_eos_testkit::admin::wait_for_catch_up(&b, &g, &topics, Duration::from_secs(120))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("catching up: {e}"))?;
    let mut summaries = Vec::new();
    for (handle, join) in running {
        handle.shutdown();
        summaries.push(join.await.map_err(|e| e.to_string())?.map_err(|e| format!("an instance failed: {e}"))?);
    }
    let cfg = VerifyConfig::new(&opts.bootstrap, &input, &output);
    let verified = tokio::task::spawn_blocking(move || verify(&cfg))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("verifying: {e}"))?;
    let duplicated = if verified.duplicates > 0 { duplicated(&opts.bootstrap, &output).await? } else { Vec::new() };
    let log = commits.lock().unwrap().clone();
    let (unmoved, moved, longest_unmoved_gap, longest_moved_pause) =
        pauses(&log, joined - opts.settle, first + opts.settle);
    Ok(JoinReport {
        unmoved,
        moved,
        longest_unmoved_gap,
        longest_moved_pause,
        newcomer_first_commit: first - joined,
        produced,
        summaries,
        verified,
        duplicated,
    })
}

/// The inputs found more than once in `output`, with where.
async fn duplicated(bootstrap: &str, output: &str) -> Result<Vec<String>, String> {
    let (b, o) = (bootstrap.to_string(), output.to_string());
    let records = tokio::task::spawn_blocking(move || {
        kafka_eos_testkit::read::read_all(&Client::new(&b), &o, Duration::from_secs(60))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("reading {output}: {e}"))?;
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &records {
        let origin = r.header(kafka_eos::record::ORIGIN_HEADER).map(|v| String::from_utf8_lossy(v).into_owned());
        seen.entry(origin.unwrap_or_default()).or_default().push(format!("{}@{}", r.partition, r.offset));
    }
    Ok(seen.into_iter().filter(|(_, at)| at.len() > 1).map(|(o, at)| format!("{o} at {}", at.join(", "))).collect())
}

/// `(unmoved, moved, longest unmoved gap, longest moved pause)` of the commits in
/// `[from, to]`.
fn pauses(log: &[(Instant, usize, i32)], from: Instant, to: Instant) -> (usize, usize, Duration, Duration) {
    let mut by_partition: BTreeMap<i32, Vec<(Instant, usize)>> = BTreeMap::new();
    for (when, i, p) in log.iter().filter(|c| c.0 >= from && c.0 <= to) {
        by_partition.entry(*p).or_default().push((*when, *i));
    }
    let (mut unmoved, mut moved) = (0, 0);
    let (mut gap, mut pause) = (Duration::ZERO, Duration::ZERO);
    for commits in by_partition.values_mut() {
        commits.sort();
        let owners: BTreeSet<usize> = commits.iter().map(|c| c.1).collect();
        if owners.len() == 1 && !owners.contains(&2) {
            unmoved += 1;
            let edges: Vec<Instant> =
                std::iter::once(from).chain(commits.iter().map(|c| c.0)).chain(std::iter::once(to)).collect();
            gap = gap.max(edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default());
        } else {
            moved += 1;
            for w in commits.windows(2).filter(|w| w[0].1 != w[1].1) {
                pause = pause.max(w[1].0 - w[0].0);
            }
        }
    }
    (unmoved, moved, gap, pause)
}

type Running = (ShutdownHandle, tokio::task::JoinHandle<kafka_eos::Result<Summary>>);

fn spawn(
    opts: &JoinOptions,
    app: &str,
    input: &str,
    output: &str,
    commits: Commits,
    i: usize,
) -> Result<Running, String> {
    let out = Topic::new(output);
    let pipeline = Pipeline::builder()
        .bootstrap_servers(&opts.bootstrap)
        .application_id(app)
        .input_topic(input)
        .guarantee(opts.guarantee)
        .rebalancing(opts.rebalancing)
        .commit_interval(opts.commit_interval)
        .processor(move |ctx, r| {
            let mut o = OutputRecord::to(&out).value(r.value.clone().unwrap_or_default()).partition(r.partition);
            o.key = r.key.clone();
            ctx.emit(o);
            Ok(())
        })
        .on_transaction(move |e: &TransactionEvent| {
            if e.outcome == Outcome::Committed {
                let now = Instant::now();
                commits.lock().unwrap().extend(e.partitions.iter().map(|(_, p)| (now, i, *p)));
            }
        })
        .build()
        .map_err(|e| e.to_string())?;
    let handle = pipeline.shutdown_handle();
    Ok((handle, tokio::spawn(pipeline.run())))
}

/// Writes one record to every partition every 20 ms until `stop`; returns how many.
fn paced_input(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Result<u64, String>> {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let writer = Writer::new(&Client::new(&bootstrap)).map_err(|e| e.to_string())?;
        let mut i = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let batch: Vec<_> = (0..partitions)
                .map(|p| {
                    i += 1;
                    (Some(p), i.to_string().into_bytes(), format!("{i:>100}").into_bytes())
                })
                .collect();
            writer.send_all(&topic, batch).map_err(|e| e.to_string())?;
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.flush_all_delivered(Duration::from_secs(60)).map_err(|e| e.to_string())
    })
}

async fn wait_for(timeout: Duration, done: impl Fn() -> bool, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("waited {timeout:?} for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
