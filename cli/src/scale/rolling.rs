//! A rolling restart (issue 11, item 6): what restarting every instance of a group, one
//! after another as an orchestrator's rolling update does, costs its partitions — with and
//! without static membership (KIP-345).
//!
//! # The run ([`run`])
//! `instances` instances (`kafka-eos chaos instance` processes) share the input, each under
//! a stable instance id (`roll-<k>`, a pod name) and with its stores on disk under its own
//! directory (`kafka-eos-disk`: a pod's persistent volume), running the keyed-state copy
//! (every record also counts its key in a store, so each partition's changelog grows with
//! its input). Before they start, `preload` records are written, so every partition has
//! state; then a paced writer feeds `rate` records per second. Once every partition has
//! committed, each instance in turn is stopped gracefully (SIGTERM) and, `restart_delay`
//! later, started again with the same id and directory; the next waits until the restarted one has
//! committed again and `settle` has passed (a readiness probe and a rolling update's
//! pause). At the end the input stops, the group catches up and the copy is verified.
//!
//! # What it reports ([`RollingReport`])
//! Over the window from the first stop to the end of the last settle, from the instances'
//! commit logs:
//! - **paused**: partition-seconds without a commit, counting every gap between two of a
//!   partition's commits longer than [`PAUSE_OVER`] (the window's edges count as commits);
//! - **longest gap**: the longest such gap of any partition;
//! - **moves**: how often a partition's commits passed from one instance id to another
//!   (a restarted instance keeps its id: getting its partitions back is not a move);
//! - **restored**: changelog records read to restore state, all instances;
//! - **takeovers**: assignments of partitions to the instances not being restarted (each
//!   restarted process's own first assignment is not one).
//!
//! Without static membership every stop is a rebalance (the partitions move to the
//! others) and every start another one (some come back); with it, neither: the group keeps
//! the stopped member's partitions for it for the session timeout, and they wait for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_eos::admin::Client;
use kafka_eos::Guarantee;
use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};
use kafka_eos_testkit::write::Writer;

use super::gaps::Commit;
use super::input::{per_tick, Paced};
use super::study::{catch_up_and_stop, check_crashes, read_commit_logs, wall};
use super::Group;
use crate::chaos::fleet::Fleet;
use crate::chaos::InstanceConfig;

/// A gap between two commits of a partition longer than this counts as a pause: well above
/// the commit interval (100 ms) plus a commit's time on a loaded machine.
pub const PAUSE_OVER: Duration = Duration::from_secs(1);

/// What to run.
#[derive(Debug, Clone)]
pub struct RollingOptions {
    /// The instances; each is restarted once.
    pub group: Group,
    /// Static membership under each instance's id.
    pub static_membership: bool,
    /// Records written before the instances start: the state to restore.
    pub preload: u64,
    /// Input records per second while the group runs, all partitions together.
    pub rate: u64,
    /// How long a stopped instance stays down before it starts again (a pod rescheduled:
    /// scheduling, image, start-up), well within the session timeout.
    pub restart_delay: Duration,
    /// How long to wait after a restarted instance commits again before the next restart.
    pub settle: Duration,
}

impl RollingOptions {
    /// 4 instances, replication 1, 200,000 records of state, 2,000 records/s, down for 5 s,
    /// 5 s settle, 20 s session timeout, exactly-once.
    pub fn new(exe: PathBuf, bootstrap: &str, partitions: i32, static_membership: bool, log_dir: &Path) -> Self {
        RollingOptions {
            group: Group {
                exe,
                bootstrap: bootstrap.to_string(),
                partitions,
                replication: 1,
                instances: 4,
                guarantee: Guarantee::ExactlyOncePerPartition,
                session_timeout: Duration::from_secs(20),
                log_dir: log_dir.to_path_buf(),
            },
            static_membership,
            preload: 200_000,
            rate: 2_000,
            restart_delay: Duration::from_secs(5),
            settle: Duration::from_secs(5),
        }
    }
}

/// What a rolling restart cost (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct RollingReport {
    /// Instances restarted.
    pub restarts: usize,
    /// From the first stop to the end of the last settle.
    pub window: Duration,
    /// Partition-seconds of gaps longer than [`PAUSE_OVER`].
    pub paused: Duration,
    /// The longest gap between two commits of any partition.
    pub longest_gap: Duration,
    /// Times a partition's commits passed from one instance id to another.
    pub moves: usize,
    /// Changelog records restored during the window, all instances.
    pub restored: u64,
    /// Assignments of partitions to instances that were not being restarted: how often the
    /// others had to take partitions over (every assignment during the window, less each
    /// restarted process's first).
    pub takeovers: u64,
    /// Records written (preload included).
    pub produced: u64,
    /// The copy's verification.
    pub verified: Report,
}

/// Runs the rolling restart (see the [module docs](self)); `Err` says what failed.
pub fn run(opts: &RollingOptions) -> Result<RollingReport, String> {
    let g = &opts.group;
    let run = g.prepare(if opts.static_membership { "roll-static" } else { "roll-dynamic" })?;
    let (name, input, output, dir) = (&run.name, &run.input, &run.output, &run.dir);
    let preloaded = preload(&run.client, input, g.partitions, opts.preload, 100)?;
    let base = InstanceConfig { static_membership: opts.static_membership, keyed_state: true, ..g.instance(&run) };
    let args_of = |slot: usize| -> Vec<String> {
        let mut cfg = base.clone();
        cfg.instance_id = Some(format!("roll-{slot}"));
        cfg.state_dir = Some(dir.join(format!("state-{slot}")));
        Group::args(&cfg)
    };
    let mut fleet = Fleet::new(g.exe.clone(), Vec::new(), dir.clone());
    // Which instance id (slot) each process was: the commit logs are per process.
    let mut slot_of: BTreeMap<u32, usize> = BTreeMap::new();
    let mut ids = Vec::new();
    for slot in 0..g.instances {
        let id = fleet.start_with(args_of(slot))?;
        slot_of.insert(fleet.pid_of(id).expect("just started"), slot);
        ids.push(id);
    }
    let writer = Paced::start(&g.bootstrap, input, g.partitions, per_tick(opts.rate))?;
    // Before the first stop: the preload is copied (its state built), and every instance
    // commits (the group has spread the partitions; the first instance to join takes them
    // all at first).
    let started = Instant::now();
    let committing =
        |fleet: &Fleet, id: &u32| fleet.status_of(*id).and_then(|s| s.summary).is_some_and(|s| s.records_in > 0);
    while fleet.totals().records_in < preloaded || !ids.iter().all(|id| committing(&fleet, id)) {
        check_crashes(&mut fleet)?;
        if started.elapsed() > Duration::from_secs(300) {
            return Err(format!(
                "the group did not copy the {preloaded} preloaded records with every instance in 300 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(opts.settle);
    let (from, before) = (wall(), fleet.totals());
    for (slot, id) in ids.iter_mut().enumerate() {
        let idx = fleet.index_of(*id).ok_or_else(|| format!("instance roll-{slot} is gone"))?;
        fleet.terminate(idx, Duration::from_secs(60));
        std::thread::sleep(opts.restart_delay);
        *id = fleet.start_with(args_of(slot))?;
        slot_of.insert(fleet.pid_of(*id).expect("just started"), slot);
        let back = Instant::now();
        while !committing(&fleet, id) {
            check_crashes(&mut fleet)?;
            if back.elapsed() > Duration::from_secs(180) {
                return Err(format!("the restarted roll-{slot} committed nothing in 180 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(opts.settle);
    }
    let (to, after) = (wall(), fleet.totals());
    let produced = preloaded + writer.finish()?;
    catch_up_and_stop(&mut fleet, &g.bootstrap, name, input)?;
    let log = read_commit_logs(dir)?;
    let (paused, longest_gap, moves) = analyse(&log, &slot_of, from, to);
    let verified = verify(&VerifyConfig::new(&g.bootstrap, input, output)).map_err(|e| format!("verifying: {e}"))?;
    Ok(RollingReport {
        restarts: g.instances,
        window: to.saturating_sub(from),
        paused,
        longest_gap,
        moves,
        restored: after.restored_records.saturating_sub(before.restored_records),
        takeovers: after.rebalances.saturating_sub(before.rebalances).saturating_sub(g.instances as u64),
        produced,
        verified,
    })
}

/// Writes `n` records round-robin over the partitions (unique keys: one state entry each),
/// each with a value of `value_bytes`.
pub(super) fn preload(
    client: &Client,
    topic: &str,
    partitions: i32,
    n: u64,
    value_bytes: usize,
) -> Result<u64, String> {
    let writer = Writer::new(client).map_err(|e| format!("preload writer: {e}"))?;
    let mut from = 0;
    while from < n {
        let to = (from + 10_000).min(n);
        let batch: Vec<_> = (from..to)
            .map(|i| {
                (Some((i % partitions.max(1) as u64) as i32), format!("pre-{i}").into_bytes(), vec![b'x'; value_bytes])
            })
            .collect();
        from = to;
        writer.send_all(topic, batch).map_err(|e| e.to_string())?;
    }
    writer.flush_all_delivered(Duration::from_secs(120)).map_err(|e| e.to_string())?;
    Ok(n)
}

/// `(paused, longest gap, moves)` of the commits in `[from, to]` (see the
/// [module docs](self)); each process is counted as its instance id.
fn analyse(
    log: &[Commit],
    slot_of: &BTreeMap<u32, usize>,
    from: Duration,
    to: Duration,
) -> (Duration, Duration, usize) {
    let mut by_partition: BTreeMap<i32, Vec<(Duration, Option<usize>)>> = BTreeMap::new();
    for (when, pid, p) in log.iter().filter(|c| c.0 >= from && c.0 <= to) {
        by_partition.entry(*p).or_default().push((*when, slot_of.get(pid).copied()));
    }
    let (mut paused, mut longest, mut moves) = (Duration::ZERO, Duration::ZERO, 0);
    for commits in by_partition.values_mut() {
        commits.sort();
        moves += commits.windows(2).filter(|w| w[0].1 != w[1].1).count();
        let edges: Vec<Duration> =
            std::iter::once(from).chain(commits.iter().map(|c| c.0)).chain(std::iter::once(to)).collect();
        for gap in edges.windows(2).map(|w| w[1] - w[0]) {
            longest = longest.max(gap);
            if gap > PAUSE_OVER {
                paused += gap;
            }
        }
    }
    (paused, longest, moves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_count_long_gaps_and_moves_count_changes_of_instance_id() {
        let ms = Duration::from_millis;
        // Processes 10 and 11 are instance 0 before and after its restart; 20 is instance 1.
        let slots = BTreeMap::from([(10, 0), (11, 0), (20, 1)]);
        let log = vec![
            (ms(500), 10, 0),
            (ms(3000), 11, 0), // a 2.5 s gap, same instance id: no move
            (ms(900), 20, 1),
            (ms(1600), 10, 1), // moved to instance 0 ...
            (ms(2000), 20, 1), // ... and back
            (ms(9000), 20, 1), // outside the window
        ];
        let (paused, longest, moves) = analyse(&log, &slots, ms(0), ms(4000));
        assert_eq!(moves, 2);
        assert_eq!(longest, ms(2500));
        // Partition 0: 0.5, 2.5, 1.0 -> 2.5 counts; partition 1: 0.9, 0.7, 0.4, 2.0 -> 2.0.
        assert_eq!(paused, ms(4500));
    }
}
