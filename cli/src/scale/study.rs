//! The scale study of `docs/scaling.md`: one pipeline's instances, as OS processes, going
//! through a sequence of group sizes (1 → 2 → 4 → 2 by default) while a paced writer
//! feeds the input; what each membership change costs, and what each instance holds.
//!
//! # The run ([`run`])
//! The instances are `kafka-eos chaos instance` processes (the chaos suite's 1:1 copy, with
//! no fault injected) that log every committed transaction's partitions with its wall-clock
//! instant (`--commit-log`). At the start of each phase the group is resized: new instances
//! are started, or the newest are stopped gracefully (SIGTERM). Each phase lasts
//! [`StudyOptions::phase`]; once a second every running instance's threads, sockets and
//! RSS are read from `/proc`. At the end the input stops, the group catches up, the
//! instances stop, and the copy is verified (exactly once under the transactional
//! guarantees, at least once otherwise).
//!
//! # What a phase reports ([`PhaseReport`])
//! Over the window from the phase's change to its end (see `gaps`):
//! - **moved / unmoved** partitions: unmoved ones were committed by one instance throughout,
//!   and not by a newcomer;
//! - **unmoved gap**: the longest gap between two commits of an unmoved partition (the
//!   window's edges count as commits) — what incremental rebalancing keeps short;
//! - **steady gap**: the same, over the phase's second half for every partition that one
//!   instance committed there: the gap the input's sparsity and the machine's load make with
//!   no membership change, against which the unmoved gap is to be read;
//! - **moved pause**: the longest time a moved partition went from a commit at its old
//!   owner to one at its new owner;
//! - **all committing**: from the change until every partition had committed at its new
//!   owner (for the first phase: from the start until every partition committed once);
//! - **throughput**: records copied per second over the phase's second half, and the
//!   **backlog** (records written but not yet copied) at its end;
//! - **per instance**: the largest thread, socket and file descriptor counts and RSS any
//!   instance reached.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_eos::admin::Client;
use kafka_eos::{Guarantee, Rebalancing, Summary};
use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};

pub use super::gaps::Pauses;
use super::gaps::{pauses, Commit};
use super::input::{per_tick, Paced};
use crate::chaos::fleet::Fleet;
use crate::chaos::InstanceConfig;

/// What to run.
#[derive(Debug, Clone)]
pub struct StudyOptions {
    /// The `kafka-eos` executable the instances run (`kafka-eos chaos instance`).
    pub exe: PathBuf,
    /// The cluster.
    pub bootstrap: String,
    /// Input (and output) partitions.
    pub partitions: i32,
    /// Replication factor of the topics: 3 on a 3-broker cluster.
    pub replication: i32,
    /// The instances' guarantee.
    pub guarantee: Guarantee,
    /// The instances' rebalance protocol (`None`: the guarantee's default).
    pub rebalancing: Option<Rebalancing>,
    /// The group's size in each phase, in order.
    pub steps: Vec<usize>,
    /// How long each phase lasts.
    pub phase: Duration,
    /// Input records per second, all partitions together.
    pub rate: u64,
    /// Where the instances' logs and commit logs go.
    pub log_dir: PathBuf,
}

impl StudyOptions {
    /// 1 → 2 → 4 → 2 instances, 30 s phases, 5,000 records/s, replication 1.
    pub fn new(exe: PathBuf, bootstrap: &str, partitions: i32, guarantee: Guarantee, log_dir: &Path) -> StudyOptions {
        StudyOptions {
            exe,
            bootstrap: bootstrap.to_string(),
            partitions,
            replication: 1,
            guarantee,
            rebalancing: None,
            steps: vec![1, 2, 4, 2],
            phase: Duration::from_secs(30),
            rate: 5_000,
            log_dir: log_dir.to_path_buf(),
        }
    }
}

/// One process's footprint at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// OS threads.
    pub threads: u64,
    /// Open sockets (TCP connections and the process's own socket pairs).
    pub sockets: u64,
    /// Open file descriptors of every kind (sockets, librdkafka's wake-up pipes, files):
    /// what `RLIMIT_NOFILE` (`ulimit -n`, systemd's `LimitNOFILE`) bounds.
    pub fds: u64,
    /// Resident memory, bytes.
    pub rss_bytes: u64,
}

impl Footprint {
    /// Reads `/proc/<pid>`; `None` if the process is gone or this is not Linux.
    pub fn of(pid: u32) -> Option<Footprint> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse().ok())
        };
        let targets: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .ok()?
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .collect();
        let sockets = targets.iter().filter(|t| t.to_string_lossy().starts_with("socket:")).count() as u64;
        Some(Footprint {
            threads: field("Threads:")?,
            sockets,
            fds: targets.len() as u64,
            rss_bytes: field("VmRSS:").unwrap_or(0) * 1024,
        })
    }

    fn max(self, o: Footprint) -> Footprint {
        Footprint {
            threads: self.threads.max(o.threads),
            sockets: self.sockets.max(o.sockets),
            fds: self.fds.max(o.fds),
            rss_bytes: self.rss_bytes.max(o.rss_bytes),
        }
    }
}

/// What one phase measured (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct PhaseReport {
    /// Instances running in the phase.
    pub instances: usize,
    /// The commit-gap analysis of the phase's window.
    pub pauses: Pauses,
    /// The longest gap between two commits of a partition over the phase's second half,
    /// long after its change: the baseline of [`Pauses::longest_unmoved_gap`].
    pub steady_gap: Duration,
    /// Records copied per second over the phase's second half.
    pub throughput: f64,
    /// Records written but not yet copied at the phase's end.
    pub backlog: u64,
    /// Transactions committed and aborted during the phase, all instances.
    pub committed: u64,
    /// See `committed`.
    pub aborted: u64,
    /// The largest footprint any instance reached in the phase, field by field.
    pub largest: Footprint,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct StudyReport {
    /// One per step.
    pub phases: Vec<PhaseReport>,
    /// Records written.
    pub produced: u64,
    /// The copy's verification.
    pub verified: Report,
    /// Instances started.
    pub instances_started: u32,
}

impl StudyReport {
    /// Whether the copy holds the guarantee: every input exactly once (transactional), or
    /// at least once.
    pub fn holds(&self, guarantee: Guarantee) -> bool {
        if guarantee.is_transactional() {
            self.verified.is_exactly_once() && self.verified.output_records == self.produced
        } else {
            self.verified.is_at_least_once()
        }
    }
}

/// The wall clock as a duration since the Unix epoch (the instances' commit logs use it).
pub(crate) fn wall() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Where a phase starts and ends, and what was counted at its middle and end.
struct Raw {
    instances: usize,
    change: Duration,
    end: Duration,
    newcomers: BTreeSet<u32>,
    mid: (Instant, Summary),
    last: (Instant, Summary),
    backlog: u64,
    largest: Footprint,
}

/// Runs the study (see the [module docs](self)); `Err` says what failed.
pub fn run(opts: &StudyOptions) -> Result<StudyReport, String> {
    let name = crate::bench::unique_name("study");
    let (input, output) = (format!("{name}-in"), format!("{name}-out"));
    let client = Client::new(&opts.bootstrap);
    for t in [&input, &output] {
        client.create_topic(t, opts.partitions, opts.replication).map_err(|e| format!("creating {t}: {e}"))?;
    }
    let commit_dir = opts.log_dir.join(&name);
    std::fs::create_dir_all(&commit_dir).map_err(|e| format!("creating {}: {e}", commit_dir.display()))?;
    let instance = InstanceConfig {
        rebalancing: opts.rebalancing,
        session_timeout: Duration::from_secs(10),
        commit_log: Some(commit_dir.clone()),
        ..InstanceConfig::copy(&opts.bootstrap, &name, &input, &output, opts.guarantee)
    };
    let args = ["chaos".to_string(), "instance".to_string()].into_iter().chain(instance.to_args()).collect();
    let mut fleet = Fleet::new(opts.exe.clone(), args, commit_dir.clone());
    let writer = Paced::start(&opts.bootstrap, &input, opts.partitions, per_tick(opts.rate))?;
    let mut raw = Vec::new();
    for &n in &opts.steps {
        raw.push(phase(&mut fleet, &writer, n, opts.phase)?);
    }
    let produced = writer.finish()?;
    catch_up_and_stop(&mut fleet, &opts.bootstrap, &name, &input)?;
    let log = read_commit_logs(&commit_dir)?;
    let mut phases = Vec::new();
    for (k, r) in raw.iter().enumerate() {
        let p = pauses(&log, r.change, r.end, &r.newcomers, Some(opts.partitions), true);
        let half = r.change + (r.end.saturating_sub(r.change)) / 2;
        let steady_gap = pauses(&log, half, r.end, &BTreeSet::new(), None, false).longest_unmoved_gap;
        let (mid, last) = (&r.mid, &r.last);
        let secs = (last.0 - mid.0).as_secs_f64().max(1e-3);
        let before = if k == 0 { Summary::default() } else { raw[k - 1].last.1 };
        phases.push(PhaseReport {
            instances: r.instances,
            pauses: p,
            steady_gap,
            throughput: last.1.records_out.saturating_sub(mid.1.records_out) as f64 / secs,
            backlog: r.backlog,
            committed: last.1.transactions_committed.saturating_sub(before.transactions_committed),
            aborted: last.1.transactions_aborted.saturating_sub(before.transactions_aborted),
            largest: r.largest,
        });
    }
    let cfg = VerifyConfig::new(&opts.bootstrap, &input, &instance.output);
    let verified = verify(&cfg).map_err(|e| format!("verifying: {e}"))?;
    Ok(StudyReport { phases, produced, verified, instances_started: fleet.started })
}

/// Resizes the group to `n` and watches it for `length`.
fn phase(fleet: &mut Fleet, writer: &Paced, n: usize, length: Duration) -> Result<Raw, String> {
    let before: BTreeSet<u32> = fleet.pids().into_iter().collect();
    let (change, started) = (wall(), Instant::now());
    fleet.scale_to(n, Duration::from_secs(60))?;
    let newcomers = fleet.pids().into_iter().filter(|p| !before.contains(p)).collect();
    let mut largest = Footprint::default();
    let mut mid = None;
    while started.elapsed() < length {
        std::thread::sleep(Duration::from_secs(1).min(length.saturating_sub(started.elapsed())));
        check_crashes(fleet)?;
        for pid in fleet.pids() {
            largest = largest.max(Footprint::of(pid).unwrap_or_default());
        }
        if mid.is_none() && started.elapsed() >= length / 2 {
            mid = Some((Instant::now(), fleet.totals()));
        }
    }
    let last = (Instant::now(), fleet.totals());
    Ok(Raw {
        instances: n,
        change,
        end: wall(),
        newcomers,
        mid: mid.unwrap_or(last),
        backlog: writer.sent().saturating_sub(last.1.records_out),
        last,
        largest,
    })
}

/// Fails the run if an instance exited on its own.
pub(crate) fn check_crashes(fleet: &mut Fleet) -> Result<(), String> {
    match fleet.reap_crashed() {
        0 => Ok(()),
        _ => Err(format!("instances crashed: {}", fleet.crashes.join("; "))),
    }
}

/// Waits until the group `group` has caught up with `input`, then stops every instance
/// gracefully; `Err` if that took too long or an instance crashed at any point.
pub(crate) fn catch_up_and_stop(fleet: &mut Fleet, bootstrap: &str, group: &str, input: &str) -> Result<(), String> {
    kafka_eos_testkit::admin::wait_for_catch_up(bootstrap, group, &[input.to_string()], Duration::from_secs(300))
        .map_err(|e| format!("catching up: {e}"))?;
    fleet.shutdown(Duration::from_secs(60));
    match fleet.crashes.is_empty() {
        true => Ok(()),
        false => Err(format!("instances crashed: {}", fleet.crashes.join("; "))),
    }
}

/// Every instance's `commits-<pid>.log` under `dir`.
pub(crate) fn read_commit_logs(dir: &Path) -> Result<Vec<Commit>, String> {
    let mut log = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries.filter_map(|e| e.ok()) {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = file.strip_prefix("commits-").and_then(|f| f.strip_suffix(".log")?.parse().ok()) else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).map_err(|e| format!("reading {file}: {e}"))?;
        log.extend(parse_commit_log(&text, pid));
    }
    Ok(log)
}

/// The lines of one commit log (`<unix ms> <p>,<p>...`); a torn last line is skipped.
fn parse_commit_log(text: &str, pid: u32) -> Vec<Commit> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((ms, partitions)) = line.split_once(' ') else { continue };
        let Ok(ms) = ms.parse::<u64>() else { continue };
        let when = Duration::from_millis(ms);
        out.extend(partitions.split(',').filter_map(|p| p.parse().ok()).map(|p| (when, pid, p)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_logs_parse_and_skip_torn_lines() {
        let log = parse_commit_log("1000 0,3\n1500 2\n17", 42);
        let ms = Duration::from_millis;
        assert_eq!(log, vec![(ms(1000), 42, 0), (ms(1000), 42, 3), (ms(1500), 42, 2)]);
    }

    #[test]
    fn this_process_has_a_footprint() {
        let me = Footprint::of(std::process::id());
        if cfg!(target_os = "linux") {
            let me = me.expect("/proc/self is readable");
            assert!(me.threads >= 1 && me.rss_bytes > 0 && me.fds >= 3, "{me:?}");
        }
    }
}
