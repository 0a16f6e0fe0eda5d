//! What a copy is measured with: CPU and memory of a process, the progress of a copy and its
//! measurement window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;

/// Where the CPU time of the subject is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuSource {
    /// This process (`getrusage(RUSAGE_SELF)`).
    SelfProcess,
    /// Another process, from `/proc/<pid>/stat` (a JVM peer).
    Pid(u32),
}

impl CpuSource {
    /// CPU time used so far (user + system), or `None` if it cannot be read.
    pub fn cpu(self) -> Option<Duration> {
        match self {
            CpuSource::SelfProcess => Some(self_cpu()),
            CpuSource::Pid(pid) => pid_cpu(pid),
        }
    }
}

/// `CLOCK_MONOTONIC` now, in seconds.
fn monotonic_seconds() -> f64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    ts.tv_sec() as f64 + ts.tv_nsec() as f64 / 1e9
}

/// User + system CPU time of this process so far.
pub fn self_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    use nix::sys::time::TimeValLike;
    let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else { return Duration::ZERO };
    Duration::from_micros((ru.user_time().num_microseconds() + ru.system_time().num_microseconds()).max(0) as u64)
}

/// User + system CPU time of process `pid` so far, from `/proc/<pid>/stat` (clock ticks).
pub fn pid_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after its closing ')' are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100).max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// Current resident set size (`VmRSS`) of `pid` (`None`: this process), in bytes.
pub fn rss(pid: Option<u32>) -> Option<u64> {
    status_kb(pid, "VmRSS:").map(|kb| kb * 1024)
}

fn status_kb(pid: Option<u32>, field: &str) -> Option<u64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".into(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Gives freed heap memory back to the kernel (glibc keeps it otherwise), so that the RSS
/// left over from earlier work (an earlier copy, a verification) does not count as this
/// copy's.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Resets the peak-RSS high-water mark of `pid` (`None`: this process). Returns whether
/// the kernel accepted it.
pub fn reset_peak_rss(pid: Option<u32>) -> bool {
    let path = match pid {
        Some(p) => format!("/proc/{p}/clear_refs"),
        None => "/proc/self/clear_refs".into(),
    };
    std::fs::write(path, "5").is_ok()
}

/// Peak resident set size (`VmHWM`) of `pid` (`None`: this process), in bytes.
pub fn peak_rss(pid: Option<u32>) -> Option<u64> {
    status_kb(pid, "VmHWM:").map(|kb| kb * 1024)
}

/// A point of a copy's progress: when, how many records were committed, CPU used so far.
#[derive(Debug, Clone, Copy)]
struct Mark {
    at: Instant,
    count: u64,
    cpu: Option<Duration>,
    broker_cpu: Option<Duration>,
}

/// Counts the committed records of one copy and takes the measurement window's two marks:
/// [`start`](Progress::start), when the subject has its partitions and begins to consume,
/// and the commit that reaches the target. Cheap enough to call per record.
#[derive(Debug)]
pub struct Progress {
    target: u64,
    done: AtomicU64,
    cpu: CpuSource,
    /// The broker JVMs whose CPU is summed into [`Window::broker_cpu_seconds`].
    broker: Vec<u32>,
    created: Instant,
    marks: Mutex<[Option<Mark>; 2]>,
}

impl Progress {
    /// A tracker for `target` records whose CPU is read from `cpu`; the end-to-end clock
    /// starts now.
    pub fn new(target: u64, cpu: CpuSource) -> Arc<Progress> {
        Self::with_broker(target, cpu, &[])
    }

    /// A tracker for copying all of `input`, which also measures the CPU of its broker
    /// when it runs here ([`Input::broker_pids`]).
    pub fn for_input(input: &Input, cpu: CpuSource) -> Arc<Progress> {
        Self::with_broker(input.records, cpu, &input.broker_pids)
    }

    fn with_broker(target: u64, cpu: CpuSource, broker: &[u32]) -> Arc<Progress> {
        Arc::new(Progress {
            target,
            done: AtomicU64::new(0),
            cpu,
            broker: broker.to_vec(),
            created: Instant::now(),
            marks: Mutex::new([None; 2]),
        })
    }

    /// A mark now, at `count` records. Logged at debug level with the `CLOCK_MONOTONIC`
    /// time, the clock of `perf record -k CLOCK_MONOTONIC`, so that a profile of a whole
    /// bench run can be cut to a copy's window (`perf report --time START,END`).
    fn mark(&self, count: u64) -> Mark {
        tracing::debug!(monotonic_seconds = format!("{:.6}", monotonic_seconds()), count, "measurement window mark");
        let broker_cpu = if self.broker.is_empty() {
            None
        } else {
            self.broker.iter().map(|pid| pid_cpu(*pid)).sum::<Option<Duration>>()
        };
        Mark { at: Instant::now(), count, cpu: self.cpu.cpu(), broker_cpu }
    }

    /// Opens the window (the first call counts): the subject has joined its group and
    /// starts consuming.
    pub fn start(&self) {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if marks[0].is_none() {
            marks[0] = Some(self.mark(self.count()));
        }
    }

    /// Whether [`start`](Progress::start) was called.
    pub fn is_started(&self) -> bool {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())[0].is_some()
    }

    /// `n` more records committed.
    pub fn add(&self, n: u64) {
        let after = self.done.fetch_add(n, Ordering::Relaxed) + n;
        self.crossed(after - n, after);
    }

    /// The committed count is now `total` (for subjects observed from outside).
    pub fn set(&self, total: u64) {
        let before = self.done.fetch_max(total, Ordering::Relaxed);
        if total > before {
            self.crossed(before, total);
        }
    }

    fn crossed(&self, before: u64, after: u64) {
        if before < self.target && after >= self.target {
            let mark = self.mark(after);
            let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
            marks[0].get_or_insert(Mark { at: self.created, count: 0, cpu: None, broker_cpu: None });
            marks[1].get_or_insert(mark);
        }
    }

    /// Closes the window now if the target was not reached (a copy stopped by its time
    /// limit): the window then covers what was committed so far.
    pub fn close(&self) {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if marks[0].is_some() && marks[1].is_none() {
            marks[1] = Some(self.mark(self.count()));
        }
    }

    /// Records committed so far.
    pub fn count(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Whether the target is reached.
    pub fn is_done(&self) -> bool {
        self.count() >= self.target
    }

    /// The measurement window, once the target is reached.
    pub fn window(&self) -> Option<Window> {
        let marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        let (lo, hi) = (marks[0]?, marks[1]?);
        Some(Window {
            records: hi.count.saturating_sub(lo.count),
            seconds: (hi.at - lo.at).as_secs_f64(),
            cpu_seconds: between(lo.cpu, hi.cpu),
            broker_cpu_seconds: between(lo.broker_cpu, hi.broker_cpu),
            startup_seconds: (lo.at - self.created).as_secs_f64(),
        })
    }

    /// From creation to the target, if reached.
    pub fn end_to_end(&self) -> Option<Duration> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())[1].map(|m| m.at - self.created)
    }
}

/// CPU seconds between two readings, if both were taken.
fn between(lo: Option<Duration>, hi: Option<Duration>) -> Option<f64> {
    Some(hi?.saturating_sub(lo?).as_secs_f64())
}

/// The measurement window of a copy: from the moment the subject has its partitions to the
/// commit of the last input record.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// Records committed inside the window.
    pub records: u64,
    /// Its length.
    pub seconds: f64,
    /// CPU seconds the subject used inside it (`None` if unreadable).
    pub cpu_seconds: Option<f64>,
    /// CPU seconds the broker JVM(s) used inside it (`None`: a remote broker, not measured).
    pub broker_cpu_seconds: Option<f64>,
    /// From starting the subject to the window's start (client creation, group join; a
    /// pipeline's producer initialisation happens inside the window, see the module doc).
    pub startup_seconds: f64,
}

impl Window {
    /// Records per second.
    pub fn records_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.records as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// CPU seconds per million records.
    pub fn cpu_seconds_per_million_records(&self) -> Option<f64> {
        self.per_million_records(self.cpu_seconds)
    }

    /// The broker's CPU seconds per million records (`None` if not measured).
    pub fn broker_cpu_seconds_per_million_records(&self) -> Option<f64> {
        self.per_million_records(self.broker_cpu_seconds)
    }

    fn per_million_records(&self, seconds: Option<f64>) -> Option<f64> {
        seconds.filter(|_| self.records > 0).map(|c| c * 1e6 / self.records as f64)
    }
}
