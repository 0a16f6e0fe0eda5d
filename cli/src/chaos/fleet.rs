//! The instance processes of one scenario: start, SIGKILL, SIGTERM, SIGSTOP/SIGCONT, and
//! their status lines.
//!
//! # Nothing outlives the suite
//! Dropping the [`Fleet`] SIGKILLs and reaps every instance still running (a stopped one
//! too: SIGKILL ends stopped processes). That covers errors and panics that unwind. For the
//! rest — a SIGKILL of the suite itself, `panic = "abort"` — every instance is started with
//! `PR_SET_PDEATHSIG = SIGKILL`, so the kernel kills it when the thread that started it
//! ends. The suite starts instances from the thread that runs the scenario (the CLI's main
//! thread), which lives until the fleet is dropped.
//!
//! Processes are only ever signalled through the `Child` we spawned, by its pid, while we
//! have not reaped it — so the pid cannot have been recycled.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::instance::parse_status;
use super::rng::Rng;
use kafka_eos::Summary;
use kafka_eos_testkit::process::{self, Signal, SpawnMode};

/// The latest status an instance printed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Status {
    pub summary: Option<Summary>,
}

struct Proc {
    id: u32,
    /// The lowest slot no other running instance had when this one started: what
    /// `{slot}` in its arguments became (its state directory, reused by a restart).
    slot: u32,
    child: Child,
    status: Arc<Mutex<Status>>,
    stdout: Option<JoinHandle<()>>,
    log: PathBuf,
    /// SIGSTOPped by us and not yet continued.
    stopped: bool,
}

impl Proc {
    fn status(&self) -> Status {
        *self.status.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Signals the instance (a child not reaped yet, so its pid is not recycled).
    fn signal(&self, sig: Signal) {
        let _ = process::signal(self.child.id(), sig);
    }
    /// Waits for the stdout thread so the final status line is read.
    fn drain(&mut self) {
        if let Some(j) = self.stdout.take() {
            let _ = j.join();
        }
    }
}

/// An instance that has exited, as last heard of.
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    pub id: u32,
    pub status: Status,
}

/// The instances of one scenario.
pub(crate) struct Fleet {
    exe: PathBuf,
    args: Vec<String>,
    log_dir: PathBuf,
    running: Vec<Proc>,
    ended: Vec<Ended>,
    next_id: u32,
    /// Instances started, restarts included.
    pub started: u32,
    /// Instances that exited without being told to, or failed when told to stop, with
    /// their exit status and log.
    pub crashes: Vec<String>,
    /// Graceful stops that had to be finished with SIGKILL.
    pub slow_stops: u32,
}

impl Fleet {
    /// `args` are the instance's arguments after the executable (`chaos instance ...`).
    pub(crate) fn new(exe: PathBuf, args: Vec<String>, log_dir: PathBuf) -> Fleet {
        Fleet {
            exe,
            args,
            log_dir,
            running: Vec::new(),
            ended: Vec::new(),
            next_id: 0,
            started: 0,
            crashes: Vec::new(),
            slow_stops: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.running.len()
    }

    /// The position of the running instance `id` (as [`start`](Self::start) returned it),
    /// for [`terminate`](Self::terminate) and the like.
    pub(crate) fn index_of(&self, id: u32) -> Option<usize> {
        self.running.iter().position(|p| p.id == id)
    }

    /// The process id of the running instance `id`.
    pub(crate) fn pid_of(&self, id: u32) -> Option<u32> {
        self.index_of(id).map(|i| self.running[i].child.id())
    }

    /// The process ids of the running instances, oldest first.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.running.iter().map(|p| p.child.id()).collect()
    }

    /// Starts one instance; its stderr (the runtime's log) goes to `instance-<id>.log`.
    pub(crate) fn start(&mut self) -> Result<u32, String> {
        self.start_with(self.args.clone())
    }

    /// Starts one instance with `args` instead of the fleet's (one with its own instance
    /// id: the rolling restart's). `{slot}` in an argument becomes the instance's slot.
    pub(crate) fn start_with(&mut self, args: Vec<String>) -> Result<u32, String> {
        self.next_id += 1;
        let id = self.next_id;
        let slot = (0..).find(|s| self.running.iter().all(|p| p.slot != *s)).unwrap_or(0);
        let args: Vec<String> = args.iter().map(|a| a.replace("{slot}", &slot.to_string())).collect();
        let log = self.log_dir.join(format!("instance-{id}.log"));
        let err = File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(err);
        // The instances' log level: KAFKA_EOS_CHAOS_LOG (e.g. `kafka_eos=debug` to see every
        // transaction), else the suite's own RUST_LOG (inherited), else info.
        if let Some(level) = std::env::var_os("KAFKA_EOS_CHAOS_LOG") {
            cmd.env("RUST_LOG", level);
        } else if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "warn,kafka_eos=info");
        }
        // Dies with the suite however it ends (see kafka_eos_testkit::process).
        let mut child = process::spawn(cmd, SpawnMode::Attached)
            .map_err(|e| format!("starting {} chaos instance: {e}", self.exe.display()))?;
        let status: Arc<Mutex<Status>> = Arc::default();
        let stdout = child.stdout.take().map(|out| {
            let status = status.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if let Some((_, summary)) = parse_status(&line) {
                        *status.lock().unwrap_or_else(|p| p.into_inner()) = Status { summary: Some(summary) };
                    }
                }
            })
        });
        tracing::debug!(id, pid = child.id(), log = %log.display(), "chaos instance started");
        self.running.push(Proc { id, slot, child, status, stdout, log, stopped: false });
        self.started += 1;
        Ok(id)
    }

    /// A random running, not stopped instance that has reported a status (so it is past
    /// its startup and has its signal handlers installed).
    pub(crate) fn pick(&self, rng: &mut Rng) -> Option<usize> {
        let ready: Vec<usize> = (0..self.running.len())
            .filter(|&i| !self.running[i].stopped && self.running[i].status().summary.is_some())
            .collect();
        (!ready.is_empty()).then(|| ready[rng.below(ready.len())])
    }

    /// A random running, not stopped instance that has committed a transaction since it
    /// started: it holds partitions and is processing, so a fault hits work in progress
    /// rather than an instance still waiting for the group to let it in.
    pub(crate) fn pick_busy(&self, rng: &mut Rng) -> Option<usize> {
        let busy: Vec<usize> = (0..self.running.len())
            .filter(|&i| {
                !self.running[i].stopped
                    && self.running[i].status().summary.is_some_and(|s| s.transactions_committed > 0)
            })
            .collect();
        (!busy.is_empty()).then(|| busy[rng.below(busy.len())])
    }

    /// Waits up to `timeout` until some instance has reported a status.
    pub(crate) fn wait_started(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.running.iter().any(|p| p.status().summary.is_some()) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }

    /// Waits up to `timeout` for a [`pick_busy`](Self::pick_busy) instance, then settles
    /// for any [`pick`](Self::pick)able one.
    pub(crate) fn pick_within(&self, rng: &mut Rng, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.pick_busy(rng) {
                return Some(i);
            }
            if Instant::now() >= deadline {
                return self.pick(rng);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn id(&self, idx: usize) -> u32 {
        self.running[idx].id
    }

    fn retire(&mut self, idx: usize) {
        let mut p = self.running.remove(idx);
        let _ = p.child.wait();
        p.drain();
        self.ended.push(Ended { id: p.id, status: p.status() });
    }

    /// SIGKILL: a crash. Nothing runs in the instance after it.
    pub(crate) fn kill(&mut self, idx: usize) {
        let p = &mut self.running[idx];
        tracing::debug!(id = p.id, "SIGKILL chaos instance");
        let _ = p.child.kill();
        self.retire(idx);
    }

    /// SIGTERM: a graceful stop; SIGKILL if it has not exited after `timeout`.
    pub(crate) fn terminate(&mut self, idx: usize, timeout: Duration) {
        self.terminate_many(vec![idx], timeout);
    }

    fn terminate_many(&mut self, mut idxs: Vec<usize>, timeout: Duration) {
        for &i in &idxs {
            let p = &mut self.running[i];
            tracing::debug!(id = p.id, "SIGTERM chaos instance");
            if p.stopped {
                p.signal(Signal::SIGCONT);
                p.stopped = false;
            }
            p.signal(Signal::SIGTERM);
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && idxs.iter().any(|&i| matches!(self.running[i].child.try_wait(), Ok(None))) {
            std::thread::sleep(Duration::from_millis(50));
        }
        idxs.sort_unstable();
        for &i in idxs.iter().rev() {
            let p = &mut self.running[i];
            match p.child.try_wait() {
                Ok(None) => {
                    tracing::warn!(id = p.id, "chaos instance did not stop within {timeout:?}: SIGKILL");
                    self.slow_stops += 1;
                    let _ = p.child.kill();
                }
                Ok(Some(status)) if !status.success() => {
                    let msg = format!("instance {} failed on SIGTERM ({status}); log: {}", p.id, p.log.display());
                    tracing::warn!("{msg}");
                    self.crashes.push(msg);
                }
                _ => {}
            }
            self.retire(i);
        }
    }

    /// Gracefully stops the newest instances until `n` run, or starts new ones.
    pub(crate) fn scale_to(&mut self, n: usize, timeout: Duration) -> Result<(), String> {
        if self.running.len() > n {
            let idxs: Vec<usize> = (n..self.running.len()).collect();
            self.terminate_many(idxs, timeout);
        }
        while self.running.len() < n {
            self.start()?;
        }
        Ok(())
    }

    /// SIGSTOP now, wherever the instance is.
    pub(crate) fn stop_now(&mut self, idx: usize) {
        let p = &mut self.running[idx];
        p.signal(Signal::SIGSTOP);
        p.stopped = true;
    }

    /// Has the instance SIGSTOP itself where `signal` asks (SIGUSR1: inside an open
    /// transaction; SIGUSR2: right after a commit; see the `instance` module). Returns false
    /// if it was not stopped within `timeout` — then it is SIGSTOPped wherever it is.
    pub(crate) fn stop_itself(&mut self, idx: usize, signal: Signal, timeout: Duration) -> bool {
        let p = &mut self.running[idx];
        p.signal(signal);
        let deadline = Instant::now() + timeout;
        let pid = p.child.id();
        while Instant::now() < deadline {
            if is_stopped(pid) {
                p.stopped = true;
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop_now(idx);
        false
    }

    /// SIGCONT every stopped instance.
    pub(crate) fn resume_all(&mut self) {
        for p in self.running.iter_mut().filter(|p| p.stopped) {
            p.signal(Signal::SIGCONT);
            p.stopped = false;
        }
    }

    /// Instances that exited on their own since the last call: recorded as crashes and
    /// returned (the caller restarts them, as a supervisor would).
    pub(crate) fn reap_crashed(&mut self) -> usize {
        let mut crashed = 0;
        let mut i = 0;
        while i < self.running.len() {
            match self.running[i].child.try_wait() {
                Ok(Some(status)) => {
                    let p = &self.running[i];
                    let msg = format!("instance {} exited by itself ({status}); log: {}", p.id, p.log.display());
                    tracing::warn!("{msg}");
                    self.crashes.push(msg);
                    self.retire(i);
                    crashed += 1;
                }
                _ => i += 1,
            }
        }
        crashed
    }

    /// The latest status of instance `id`, running or ended.
    pub(crate) fn status_of(&self, id: u32) -> Option<Status> {
        self.running
            .iter()
            .find(|p| p.id == id)
            .map(Proc::status)
            .or_else(|| self.ended.iter().find(|e| e.id == id).map(|e| e.status))
    }

    /// The sum of every instance's latest counters (ended ones included).
    pub(crate) fn totals(&self) -> Summary {
        let all = self.running.iter().map(Proc::status).chain(self.ended.iter().map(|e| e.status));
        let mut t = Summary::default();
        for s in all.filter_map(|s| s.summary) {
            t.records_in += s.records_in;
            t.records_out += s.records_out;
            t.transactions_committed += s.transactions_committed;
            t.transactions_aborted += s.transactions_aborted;
            t.producers_fenced += s.producers_fenced;
            t.rebalances += s.rebalances;
            t.dead_lettered += s.dead_lettered;
            t.restored_records += s.restored_records;
            t.standby_handovers += s.standby_handovers;
            t.standby_records += s.standby_records;
        }
        t
    }

    /// Gracefully stops every instance (all signalled at once).
    pub(crate) fn shutdown(&mut self, timeout: Duration) {
        self.terminate_many((0..self.running.len()).collect(), timeout);
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for p in &mut self.running {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// Whether the process is in a stopped state (`T` in `/proc/<pid>/stat`).
fn is_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain spaces.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|s| s == "T" || s == "t")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_process_is_seen_stopped_and_the_fleet_kills_what_it_started() {
        // `sleep` stands in for an instance: the fleet only needs a process.
        let dir = std::env::temp_dir().join(format!("kafka-eos-chaos-fleet-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut fleet = Fleet::new("sleep".into(), vec!["600".into()], dir.clone());
        fleet.start().unwrap();
        fleet.start().unwrap();
        let pid = fleet.running[0].child.id();
        assert!(!is_stopped(pid));
        fleet.stop_now(0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_stopped(pid) {
            assert!(Instant::now() < deadline, "SIGSTOP did not stop the process");
            std::thread::sleep(Duration::from_millis(10));
        }
        fleet.resume_all();
        fleet.kill(1);
        assert_eq!((fleet.len(), fleet.reap_crashed()), (1, 0));
        drop(fleet);
        assert!(!std::path::Path::new(&format!("/proc/{pid}/stat")).exists(), "dropped fleet reaps its processes");
        let _ = std::fs::remove_dir_all(dir);
    }
}
