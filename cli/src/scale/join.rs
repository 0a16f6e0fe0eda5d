//! One instance joins two (in this process): the run behind `cargo bench --bench
//! rebalance` and the CI test `scale::a_joining_instance_leaves_unmoved_partitions_committing`.
//! See the [module docs](super).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_eos::admin::Client;
use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::{Guarantee, OutputRecord, Pipeline, Rebalancing, ShutdownHandle, Summary, Topic};
use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};

use super::gaps::{pauses, Commit};
use super::input::Paced;

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

/// Runs the join (see the [`scale` module docs](super)); `Err` says what did not happen in time.
pub async fn join_third(opts: &JoinOptions) -> Result<JoinReport, String> {
    let name = crate::bench::unique_name("scale");
    let (input, output) = (format!("{name}-in"), format!("{name}-out"));
    let client = Client::new(&opts.bootstrap);
    for t in [&input, &output] {
        client.create_topic(t, opts.partitions, 1).map_err(|e| format!("creating {t}: {e}"))?;
    }
    let commits: Commits = Arc::default();
    // One record per partition per tick.
    let writer = Paced::start(&opts.bootstrap, &input, opts.partitions, opts.partitions as u64)?;
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
    let produced = tokio::task::spawn_blocking(move || writer.finish()).await.map_err(|e| e.to_string())??;
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
    let origin = joined - opts.settle;
    let since = |t: Instant| t.saturating_duration_since(origin);
    let log: Vec<Commit> =
        commits.lock().unwrap().iter().filter(|c| c.0 >= origin).map(|(t, i, p)| (since(*t), *i as u32, *p)).collect();
    let p = pauses(&log, Duration::ZERO, since(first + opts.settle), &BTreeSet::from([2]), None, true);
    let (unmoved, moved, longest_unmoved_gap, longest_moved_pause) =
        (p.unmoved, p.moved, p.longest_unmoved_gap, p.longest_moved_pause);
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
