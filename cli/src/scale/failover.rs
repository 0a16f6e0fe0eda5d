//! Failover: an instance SIGKILLed for good while it holds partitions with large state, and
//! how long those partitions wait to commit again at their new owners — with and without
//! standby replicas.
//!
//! # The run ([`run`])
//! `instances` instances (`kafka-eos chaos instance` processes) run the copy that also keeps
//! every record's value in a store by key (`--keyed-values`), on memory or on disk, with
//! `standby_replicas` warm copies. `preload` records with unique keys and `value_bytes`
//! values are written first: the state. Then a paced writer feeds `rate` records per second,
//! so every partition commits continuously. Once the preload is copied, every instance
//! commits and, with standbys, the other instances' copies have applied the preload of
//! instance 0's partitions (caught up), instance 0 is SIGKILLed and not restarted. The group
//! moves its partitions after the session timeout; each moved partition's **wait** is the
//! time from the kill to its first commit at another instance (from the instances' commit
//! logs). At the end the group catches up and the copy is verified.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};

use super::input::{per_tick, Paced};
use super::rolling::preload;
use super::study::{catch_up_and_stop, check_crashes, read_commit_logs, wall};
use super::Group;
use crate::chaos::fleet::Fleet;
use crate::chaos::InstanceConfig;

/// What to run.
#[derive(Debug, Clone)]
pub struct FailoverOptions {
    /// The instances; instance 0 is killed.
    pub group: Group,
    /// Records (unique keys) written before the instances start: the state.
    pub preload: u64,
    /// Bytes of each preloaded value.
    pub value_bytes: usize,
    /// Input records per second while the group runs, all partitions together.
    pub rate: u64,
    /// Standby replicas (0: none).
    pub standby_replicas: usize,
    /// Stores on disk (`kafka-eos-disk`, a directory per instance) instead of in memory.
    pub disk: bool,
}

impl FailoverOptions {
    /// 2 instances, exactly-once, 100,000 records of 1,000 B, 400 records/s, 6 s session
    /// timeout (the broker's minimum by default), in memory, no standby.
    pub fn new(exe: PathBuf, bootstrap: &str, partitions: i32, log_dir: &Path) -> Self {
        FailoverOptions {
            group: Group::pair(exe, bootstrap, partitions, log_dir),
            preload: 100_000,
            value_bytes: 1_000,
            rate: 400,
            standby_replicas: 0,
            disk: false,
        }
    }
}

/// What the failover cost (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct FailoverReport {
    /// Each partition the killed instance held, with its wait: from the kill to its first
    /// commit at another instance.
    pub waits: BTreeMap<i32, Duration>,
    /// Changelog records the survivors read to restore state after the kill.
    pub restored: u64,
    /// Partitions that continued a standby copy after the kill.
    pub handovers: u64,
    /// Records written (preload included).
    pub produced: u64,
    /// The copy's verification.
    pub verified: Report,
}

impl FailoverReport {
    /// The longest wait: when the last of the killed instance's partitions committed again.
    pub fn longest(&self) -> Duration {
        self.waits.values().copied().max().unwrap_or_default()
    }
}

/// Runs the failover (see the [module docs](self)); `Err` says what failed.
pub fn run(opts: &FailoverOptions) -> Result<FailoverReport, String> {
    let g = &opts.group;
    let run = g.prepare(if opts.standby_replicas > 0 { "failover-standby" } else { "failover" })?;
    let (name, input, output, dir) = (&run.name, &run.input, &run.output, &run.dir);
    let preloaded = preload(&run.client, input, g.partitions, opts.preload, opts.value_bytes)?;
    let mut fleet = Fleet::new(g.exe.clone(), Vec::new(), dir.clone());
    let mut ids = Vec::new();
    for slot in 0..g.instances {
        let cfg = InstanceConfig {
            state_dir: opts.disk.then(|| dir.join(format!("state-{slot}"))),
            instance_id: Some(format!("failover-{slot}")),
            keyed_values: true,
            standby_replicas: opts.standby_replicas,
            ..g.instance(&run)
        };
        ids.push(fleet.start_with(Group::args(&cfg))?);
    }
    let writer = Paced::start(&g.bootstrap, input, g.partitions, per_tick(opts.rate))?;
    wait_ready(&mut fleet, &ids, preloaded)?;
    let victim = fleet.pid_of(ids[0]).ok_or("instance 0 is gone")?;
    let held = last_committer(&read_commit_logs(dir)?, victim);
    if held.is_empty() {
        return Err("instance 0 held no partition at the kill".into());
    }
    if opts.standby_replicas > 0 {
        // Each preloaded key is one changelog record of its partition.
        let preload_of_held = preloaded * held.len() as u64 / g.partitions.max(1) as u64;
        wait_copies(&mut fleet, &ids[1..], preload_of_held)?;
    }
    let (killed_at, before) = (wall(), fleet.totals());
    let idx = fleet.index_of(ids[0]).ok_or("instance 0 is gone")?;
    fleet.kill(idx);
    let waits = wait_moved(&mut fleet, dir, victim, &held, killed_at)?;
    let produced = preloaded + writer.finish()?;
    catch_up_and_stop(&mut fleet, &g.bootstrap, name, input)?;
    // The survivors' final reports: nothing else moved after the kill.
    let after = fleet.totals();
    let verified = verify(&VerifyConfig::new(&g.bootstrap, input, output)).map_err(|e| format!("verifying: {e}"))?;
    // The killed instance's counters are its last report: only the survivors' grow.
    Ok(FailoverReport {
        waits,
        restored: after.restored_records.saturating_sub(before.restored_records),
        handovers: after.standby_handovers.saturating_sub(before.standby_handovers),
        produced,
        verified,
    })
}

/// Waits until the preload is copied and every instance commits.
fn wait_ready(fleet: &mut Fleet, ids: &[u32], preloaded: u64) -> Result<(), String> {
    let started = Instant::now();
    let committing =
        |fleet: &Fleet, id: &u32| fleet.status_of(*id).and_then(|s| s.summary).is_some_and(|s| s.records_in > 0);
    loop {
        check_crashes(fleet)?;
        let copied = fleet.totals().records_in;
        if copied >= preloaded && ids.iter().all(|id| committing(fleet, id)) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(format!("not ready in 600 s: {copied} of {preloaded} preloaded records copied"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the standby copies of instances `survivors` have applied `records` changelog
/// records in all, then two seconds more for their last writes.
fn wait_copies(fleet: &mut Fleet, survivors: &[u32], records: u64) -> Result<(), String> {
    let started = Instant::now();
    let applied = |fleet: &Fleet| -> u64 {
        survivors.iter().filter_map(|id| fleet.status_of(*id)?.summary).map(|s| s.standby_records).sum()
    };
    while applied(fleet) < records {
        check_crashes(fleet)?;
        if started.elapsed() > Duration::from_secs(600) {
            return Err(format!("standby copies applied {} of {records} records in 600 s", applied(fleet)));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// The partitions whose latest commit in `log` is `pid`'s.
fn last_committer(log: &[(Duration, u32, i32)], pid: u32) -> BTreeSet<i32> {
    let mut last: BTreeMap<i32, (Duration, u32)> = BTreeMap::new();
    for (when, who, p) in log {
        let e = last.entry(*p).or_insert((*when, *who));
        if *when >= e.0 {
            *e = (*when, *who);
        }
    }
    last.into_iter().filter(|(_, (_, who))| *who == pid).map(|(p, _)| p).collect()
}

/// Waits until each of `held` has committed at an instance other than `victim` after
/// `killed_at`, and returns each one's wait.
fn wait_moved(
    fleet: &mut Fleet,
    dir: &Path,
    victim: u32,
    held: &BTreeSet<i32>,
    killed_at: Duration,
) -> Result<BTreeMap<i32, Duration>, String> {
    let started = Instant::now();
    loop {
        let waits = first_commits_after(&read_commit_logs(dir)?, victim, held, killed_at);
        if waits.len() == held.len() {
            return Ok(waits);
        }
        check_crashes(fleet)?;
        if started.elapsed() > Duration::from_secs(600) {
            return Err(format!("after the kill, only {waits:?} of {held:?} committed again in 600 s"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// For each partition of `held`, the time from `killed_at` to its first commit after it by
/// another process than `victim`.
fn first_commits_after(
    log: &[(Duration, u32, i32)],
    victim: u32,
    held: &BTreeSet<i32>,
    killed_at: Duration,
) -> BTreeMap<i32, Duration> {
    let mut out: BTreeMap<i32, Duration> = BTreeMap::new();
    for (when, who, p) in log {
        if *who != victim && *when >= killed_at && held.contains(p) {
            let wait = *when - killed_at;
            let e = out.entry(*p).or_insert(wait);
            *e = (*e).min(wait);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_victims_partitions_and_their_first_commits_elsewhere_after_the_kill() {
        let ms = Duration::from_millis;
        let log = vec![
            (ms(100), 1, 0),
            (ms(200), 2, 0), // partition 0 moved to 2 before the kill: not the victim's
            (ms(150), 1, 1),
            (ms(300), 1, 1),
            (ms(250), 2, 2),
            (ms(1500), 1, 3), // the victim's last commit of 3 (none of 3 after the kill)
        ];
        let held = last_committer(&log, 1);
        assert_eq!(held, BTreeSet::from([1, 3]));
        assert!(last_committer(&[], 1).is_empty());
        let after = [(ms(9000), 2, 1), (ms(8000), 2, 1), (ms(7000), 1, 3), (ms(12000), 3, 3), (ms(4000), 2, 3)];
        let log: Vec<_> = log.into_iter().chain(after).collect();
        let waits = first_commits_after(&log, 1, &held, ms(5000));
        assert_eq!(waits, BTreeMap::from([(1, ms(3000)), (3, ms(7000))]));
        assert!(first_commits_after(&log, 1, &BTreeSet::new(), ms(5000)).is_empty());
    }
}
