//! Measuring what each guarantee costs: the one implementation behind `cargo bench`
//! (`benches/batch_throughput.rs`, `benches/commit_latency.rs`) and `kafka-eos bench`.
//!
//! # What is measured
//!
//! A *copy* reads a pre-produced input topic and writes every record, unchanged, to an
//! output topic (same key, value and partition, plus the `kafka-eos.origin` header the
//! verifier joins on). The subject doing the copy is either a kafka-eos [`Pipeline`] under
//! one [`Guarantee`], or the **ceiling**: a plain rdkafka consume→produce loop with no
//! transaction and no offset guarantee, the fastest a Rust program can copy with the same
//! client library and settings ([`Subject::Ceiling`]).
//!
//! Input is produced *before* the subject starts, so the subject is never starved; every
//! figure is taken while it copies that backlog:
//!
//! - **Throughput** — input records divided by the *window*: from the moment the subject
//!   has its partitions (a pipeline's first assignment callback starts; the ceiling's first
//!   record; a Kafka Streams peer's `RUNNING` state) to the commit of the last input record
//!   (its acknowledgement, for at-least-once and the ceiling). Client creation and the
//!   group join are outside it and reported apart ([`Window::startup_seconds`]); a
//!   pipeline's producer initialisation (`init_transactions`, per partition in
//!   [`Guarantee::ExactlyOnce`]) runs in the assignment callback and so falls inside it,
//!   as it does at every rebalance in production.
//! - **CPU** — user + system CPU time of this process (`getrusage(RUSAGE_SELF)`) between
//!   the window's two ends. Inside it the process runs the subject (consumer,
//!   task and producer threads, librdkafka's internal threads) and the harness's own
//!   waiting loop (a 20 ms timer) and progress bar; the broker is another process and is
//!   not counted; producing the input and verifying the output happen outside the window.
//!   A subject in another process (a JVM peer) is measured through `/proc/<pid>/stat`
//!   instead ([`CpuSource::Pid`]).
//! - **Broker CPU** — when the broker runs on this machine ([`Input::broker_pids`]), the
//!   user + system CPU of its JVM(s) over the same window, from `/proc/<pid>/stat`: the
//!   work a subject causes on the other side of the wire (produce and fetch requests,
//!   transaction coordination, markers, offset commits), which competes for the same cores.
//! - **Peak RSS** — the process's high-water mark (`VmHWM`), reset before each copy by
//!   writing `5` to `/proc/self/clear_refs` after freed heap is given back to the kernel
//!   (`malloc_trim`); reported whole and as the rise above the RSS at the copy's start
//!   ([`CopyResult::peak_rss_above_baseline_bytes`], the part the subject added: the
//!   process also holds the earlier copies' client libraries and allocator arenas). If the
//!   kernel refuses the reset, the figure is the peak since the process started (flagged
//!   in [`CopyResult::peak_rss_reset`]).
//!
//! Afterwards the output is read back with [`kafka_eos_testkit::verify`] (read_committed) and checked
//! against the guarantee: exactly-once for the transactional modes and the ceiling (which
//! in a fault-free run copies exactly, though it promises nothing), at-least-once for
//! [`Guarantee::AtLeastOnce`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};

use kafka_eos::config::Properties;
use kafka_eos::error::{Error, Result};
use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::record::ORIGIN_HEADER;
use kafka_eos::{Guarantee, OutputRecord, Pipeline};
use kafka_eos_testkit::admin::ClientExt;
use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};

/// Who copies the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// A plain rdkafka loop: one `BaseConsumer` (auto-commit, so no offset guarantee) feeding
    /// one non-idempotent `BaseProducer`, no transaction, on one thread. The ceiling every
    /// guarantee is compared with.
    Ceiling,
    /// A kafka-eos pipeline with this guarantee.
    Pipeline(Guarantee),
    /// The same pipeline, stateful: each record also increments a count per input key in a
    /// state store. Input keys are unique, so every record changes its own key: one
    /// changelog record per input record, the most a store can write. After the copy the
    /// stores are restored from their changelogs to measure the restore rate
    /// ([`CopyResult::restore`]).
    Stateful(Guarantee),
}

impl Subject {
    /// `ceiling`, `exactly-once`, `exactly-once-per-consumer` or `at-least-once`.
    pub fn name(self) -> &'static str {
        match self {
            Subject::Ceiling => "ceiling",
            Subject::Pipeline(g) => g.as_str(),
            Subject::Stateful(Guarantee::ExactlyOnce) => "exactly-once+state",
            Subject::Stateful(Guarantee::ExactlyOncePerConsumer) => "exactly-once-per-consumer+state",
            Subject::Stateful(Guarantee::AtLeastOnce) => "at-least-once+state",
        }
    }

    /// The subject [`name`](Self::name) names.
    pub fn from_name(name: &str) -> Option<Subject> {
        if name == "ceiling" {
            return Some(Subject::Ceiling);
        }
        match name.strip_suffix("+state") {
            Some(g) => g.parse().ok().map(Subject::Stateful),
            None => name.parse().ok().map(Subject::Pipeline),
        }
    }

    /// The ceiling and the three guarantees, in the order tables show them.
    pub fn all() -> [Subject; 4] {
        [
            Subject::Ceiling,
            Subject::Pipeline(Guarantee::AtLeastOnce),
            Subject::Pipeline(Guarantee::ExactlyOnce),
            Subject::Pipeline(Guarantee::ExactlyOncePerConsumer),
        ]
    }
}

/// The input of a copy: a topic already holding `records` records of `value_size` bytes,
/// spread evenly over its `partitions` partitions.
#[derive(Debug, Clone)]
pub struct Input {
    /// `bootstrap.servers`.
    pub bootstrap: String,
    /// The input topic.
    pub topic: String,
    /// Its partition count; the output topic gets as many.
    pub partitions: i32,
    /// Records in it.
    pub records: u64,
    /// Bytes per value (MB/s counts value bytes only).
    pub value_size: usize,
    /// Client properties for every client (security settings), verbatim.
    pub client_properties: Properties,
    /// Process ids of the broker JVMs, when they run on this machine (a local cluster):
    /// their CPU over each copy's window is measured too ([`Window::broker_cpu_seconds`]),
    /// because on a machine the broker shares with the subject, a mode that costs the
    /// broker more (per-partition transactions, smaller produce requests) slows the copy
    /// as surely as its own CPU does. Empty (not measured) for a remote cluster.
    pub broker_pids: Vec<u32>,
}

impl Input {
    /// Creates `topic` (replication factor `replication`) and fills it with
    /// [`admin::produce_sequence`](kafka_eos_testkit::admin::produce_sequence). Blocking.
    pub fn create(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        replication: i32,
        records: u64,
        value_size: usize,
        client_properties: Properties,
    ) -> Result<Input> {
        let input = Input {
            bootstrap: bootstrap.to_string(),
            topic: topic.to_string(),
            partitions,
            records,
            value_size,
            client_properties,
            broker_pids: Vec::new(),
        };
        input.create_topic(topic, replication)?;
        input.admin().produce_sequence(topic, partitions, records, value_size)?;
        Ok(input)
    }

    /// Creates another topic with this input's partition count (e.g. an output topic).
    pub fn create_topic(&self, topic: &str, replication: i32) -> Result<()> {
        self.admin().create_topic(topic, self.partitions, replication)
    }

    fn admin(&self) -> kafka_eos_testkit::admin::Client {
        kafka_eos_testkit::admin::Client::new(&self.bootstrap).properties(self.client_properties.clone())
    }
}

/// How a pipeline subject is configured (ignored by the ceiling).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// [`PipelineBuilder::commit_interval`](kafka_eos::PipelineBuilder::commit_interval).
    pub commit_interval: Duration,
    /// [`PipelineBuilder::max_records_per_transaction`](kafka_eos::PipelineBuilder::max_records_per_transaction).
    pub max_records_per_transaction: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { commit_interval: Duration::from_millis(100), max_records_per_transaction: 10_000 }
    }
}

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
    // SAFETY: clock_gettime writes into the zeroed struct we own.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// User + system CPU time of this process so far.
pub fn self_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User + system CPU time of process `pid` so far, from `/proc/<pid>/stat` (clock ticks).
pub fn pid_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after its closing ')' are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
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
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
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

/// What the verifier found, against what the guarantee promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// Committed input records read.
    pub input_records: u64,
    /// Committed output records read.
    pub output_records: u64,
    /// Outputs beyond one per input.
    pub duplicates: u64,
    /// Inputs without an output.
    pub missing: u64,
    /// Whether the subject kept its promise (exactly-once, or at-least-once for
    /// [`Guarantee::AtLeastOnce`]).
    pub ok: bool,
}

/// One copy's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CopyResult {
    /// [`Subject::name`], or a peer's name.
    pub subject: String,
    /// Input partitions.
    pub partitions: i32,
    /// Bytes per value.
    pub value_size_bytes: usize,
    /// The pipeline's commit interval (`None` for the ceiling).
    pub commit_interval_ms: Option<u64>,
    /// Records in the input.
    pub input_records: u64,
    /// Records the subject committed before it was stopped.
    pub records_copied: u64,
    /// The measurement window.
    pub window: Window,
    /// Records per second in the window.
    pub records_per_second: f64,
    /// Value megabytes (10^6 bytes) per second in the window.
    pub megabytes_per_second: f64,
    /// CPU seconds per million records, in the window.
    pub cpu_seconds_per_million_records: Option<f64>,
    /// The broker's CPU seconds per million records, in the same window (`None`: a remote
    /// broker, not measured).
    pub broker_cpu_seconds_per_million_records: Option<f64>,
    /// From starting the subject until every input record was committed (startup
    /// included), if it got there.
    pub end_to_end_seconds: Option<f64>,
    /// Peak RSS of the process hosting the subject, in bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Peak RSS minus the RSS just before the copy started (after giving freed heap back
    /// to the kernel): the memory the subject itself added. `None` for a subject in its own
    /// process, whose whole RSS is its own.
    pub peak_rss_above_baseline_bytes: Option<u64>,
    /// Whether the peak-RSS mark was reset before this copy (else it is the process peak).
    pub peak_rss_reset: bool,
    /// Transactions (at-least-once: acknowledged batches) committed.
    pub transactions: u64,
    /// The verifier's findings, if the copy was verified.
    pub verified: Option<Verified>,
    /// A stateful subject's stores rebuilt from their changelogs after the copy.
    pub restore: Option<Restore>,
}

/// Restoring every partition's stores from their changelogs in one pass, on one thread (as
/// an instance task taking over all partitions does).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Restore {
    /// Changelog records read.
    pub records: u64,
    /// Time to read them and rebuild the stores.
    pub seconds: f64,
    /// `records / seconds`.
    pub records_per_second: f64,
}

impl CopyResult {
    /// The figures of a copy `progress` watched, the rates derived from its window; the
    /// caller sets what only it knows (the RSS baseline, transactions, verification, the
    /// restore) with struct update syntax.
    pub fn measured(
        subject: impl Into<String>,
        input: &Input,
        commit_interval_ms: Option<u64>,
        progress: &Progress,
        peak_rss_bytes: Option<u64>,
    ) -> CopyResult {
        let window = progress.window().unwrap_or_default();
        let records_per_second = window.records_per_second();
        CopyResult {
            subject: subject.into(),
            partitions: input.partitions,
            value_size_bytes: input.value_size,
            commit_interval_ms,
            input_records: input.records,
            records_copied: progress.count(),
            records_per_second,
            megabytes_per_second: records_per_second * input.value_size as f64 / 1e6,
            cpu_seconds_per_million_records: window.cpu_seconds_per_million_records(),
            broker_cpu_seconds_per_million_records: window.broker_cpu_seconds_per_million_records(),
            window,
            end_to_end_seconds: progress.end_to_end().map(|d| d.as_secs_f64()),
            peak_rss_bytes,
            peak_rss_above_baseline_bytes: None,
            peak_rss_reset: true,
            transactions: 0,
            verified: None,
            restore: None,
        }
    }
}

/// Options of one copy.
#[derive(Clone, Default)]
pub struct CopyOptions {
    /// The pipeline's tuning.
    pub tuning: Tuning,
    /// Stop after this long even if the input is not fully copied (then nothing is verified).
    pub time_limit: Option<Duration>,
    /// Read the output back and check the guarantee.
    pub verify: bool,
    /// An extra transaction hook (the commit-latency bench reads its timings here).
    #[allow(clippy::type_complexity)]
    pub hook: Option<Arc<dyn Fn(&TransactionEvent) + Send + Sync>>,
}

/// A name no earlier run uses: `<prefix>-<pid>-<time>`.
pub fn unique_name(prefix: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{prefix}-{}-{:x}", std::process::id(), now.as_micros() & 0x00ff_ffff_ffff)
}

/// Copies `input` into a new topic `output` with `subject` and measures it. Blocking
/// except for the pipeline itself, which runs on `rt`.
pub fn copy(
    rt: &tokio::runtime::Handle,
    input: &Input,
    output: &str,
    subject: Subject,
    opts: &CopyOptions,
) -> Result<CopyResult> {
    input.create_topic(output, 1)?;
    let app_id = unique_name(&format!("bench-{}", subject.name().replace('+', "-")));
    trim_heap();
    let baseline = rss(None);
    let rss_reset = reset_peak_rss(None);
    let progress = Progress::for_input(input, CpuSource::SelfProcess);
    let transactions = match subject {
        Subject::Ceiling => ceiling(input, output, &app_id, &progress, opts.time_limit)?,
        Subject::Pipeline(_) | Subject::Stateful(_) => {
            rt.block_on(pipeline(input, output, &app_id, subject, &progress, opts))?
        }
    };
    let peak = peak_rss(None);
    let verified = if opts.verify && progress.is_done() { Some(check(input, output, subject)?) } else { None };
    let restore = match subject {
        Subject::Stateful(g) if progress.is_done() => Some(restore(input, &app_id, g)?),
        _ => None,
    };
    if let Subject::Stateful(_) = subject {
        let changelog = kafka_eos::state::changelog_topic(&app_id, BENCH_STORE);
        delete_topics(&input.bootstrap, &input.client_properties, &[changelog]);
    }
    let commit_interval_ms = match subject {
        Subject::Ceiling => None,
        Subject::Pipeline(_) | Subject::Stateful(_) => Some(opts.tuning.commit_interval.as_millis() as u64),
    };
    Ok(CopyResult {
        peak_rss_above_baseline_bytes: match (peak, baseline) {
            (Some(p), Some(b)) if rss_reset => Some(p.saturating_sub(b)),
            _ => None,
        },
        peak_rss_reset: rss_reset,
        transactions,
        verified,
        restore,
        ..CopyResult::measured(subject.name(), input, commit_interval_ms, &progress, peak)
    })
}

/// Verifies `output` against `input`, with the promise of `subject`.
pub fn check(input: &Input, output: &str, subject: Subject) -> Result<Verified> {
    let mut cfg = VerifyConfig::new(&input.bootstrap, &input.topic, output);
    cfg.client_properties = input.client_properties.clone();
    let r: Report = verify(&cfg)?;
    let ok = match subject {
        Subject::Pipeline(Guarantee::AtLeastOnce) | Subject::Stateful(Guarantee::AtLeastOnce) => r.is_at_least_once(),
        _ => r.is_exactly_once(),
    } && r.input_records == input.records;
    Ok(Verified {
        input_records: r.input_records,
        output_records: r.output_records,
        duplicates: r.duplicates,
        missing: r.missing,
        ok,
    })
}

/// Runs a pipeline until `progress` reaches its target (or the time limit), then shuts it
/// down gracefully. Returns the committed transactions.
async fn pipeline(
    input: &Input,
    output: &str,
    app_id: &str,
    subject: Subject,
    progress: &Arc<Progress>,
    opts: &CopyOptions,
) -> Result<u64> {
    let guarantee = match subject {
        Subject::Pipeline(g) | Subject::Stateful(g) => g,
        Subject::Ceiling => return Err(Error::Internal("the ceiling is not a pipeline".into())),
    };
    let counter = progress.clone();
    let extra = opts.hook.clone();
    let mut builder = Pipeline::builder()
        .bootstrap_servers(&input.bootstrap)
        .application_id(app_id)
        .input_topic(&input.topic)
        .guarantee(guarantee)
        .commit_interval(opts.tuning.commit_interval)
        .max_records_per_transaction(opts.tuning.max_records_per_transaction)
        .handle_signals(false)
        .on_transaction(move |e| {
            if e.outcome == Outcome::Committed {
                counter.add(e.records as u64);
            }
            if let Some(h) = &extra {
                h(e);
            }
        });
    let out = builder.output_topic(output);
    // Key and value only, as the Java peers copy (no headers, the producer's timestamp).
    let copy_of = move |r: &kafka_eos::InputRecord| {
        let mut o = OutputRecord::to(&out).partition(r.partition);
        o.key = r.key.clone();
        o.value = r.value.clone();
        o
    };
    builder = match subject {
        Subject::Stateful(_) => {
            let counts = builder.store::<Vec<u8>, u64>(BENCH_STORE);
            builder.processor(move |ctx, r| {
                let key = r.key.clone().unwrap_or_default();
                let mut store = ctx.store(&counts);
                let n = store.get(&key)?.unwrap_or(0);
                store.put(&key, &(n + 1))?;
                ctx.emit(copy_of(r));
                Ok(())
            })
        }
        _ => builder.processor(move |ctx, r| {
            ctx.emit(copy_of(r));
            Ok(())
        }),
    };
    // Long intervals need a transaction timeout above them (validation insists).
    if guarantee.is_transactional() && opts.tuning.commit_interval >= Duration::from_secs(5) {
        builder = builder.transaction_timeout(opts.tuning.commit_interval * 3);
    }
    let pipeline = builder.client_properties(&input.client_properties).build()?;
    let handle = pipeline.shutdown_handle();
    let running = tokio::spawn(pipeline.run());
    let deadline = opts.time_limit.map(|t| Instant::now() + t);
    while !progress.is_done() && !running.is_finished() && deadline.is_none_or(|d| Instant::now() < d) {
        if progress.is_started() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        } else {
            // The window opens when the group has assigned the partitions (the rebalance
            // counter moves as the assignment callback starts).
            if handle.summary().rebalances > 0 {
                progress.start();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    progress.close();
    handle.shutdown();
    let summary = running.await.map_err(|e| Error::Internal(format!("pipeline task: {e}")))??;
    Ok(summary.transactions_committed)
}

/// The store of [`Subject::Stateful`].
const BENCH_STORE: &str = "counts";

/// Rebuilds the stores of every partition of a stateful copy from their changelogs.
fn restore(input: &Input, app_id: &str, guarantee: Guarantee) -> Result<Restore> {
    let mut builder = Pipeline::builder()
        .bootstrap_servers(&input.bootstrap)
        .application_id(app_id)
        .input_topic(&input.topic)
        .guarantee(guarantee);
    let _counts = builder.store::<Vec<u8>, u64>(BENCH_STORE);
    builder = builder.processor(|_, _| Ok(()));
    for (k, v) in input.client_properties.iter() {
        builder = builder.client_property(k, v);
    }
    let pipeline = builder.build()?;
    let started = Instant::now();
    let partitions: Vec<i32> = (0..input.partitions).collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    let records = kafka_eos::state::measure_restore(pipeline.config(), &partitions, deadline)?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Restore { records, seconds, records_per_second: records as f64 / seconds.max(1e-9) })
}

/// Counts the ceiling's delivery reports.
struct Acks(Arc<Progress>);

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_ok() {
            self.0.add(1);
        }
    }
}

/// The ceiling: consume, produce, nothing else, on this thread.
fn ceiling(
    input: &Input,
    output: &str,
    group: &str,
    progress: &Arc<Progress>,
    time_limit: Option<Duration>,
) -> Result<u64> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &input.bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // The same fetch buffering as the pipeline's consumer.
        .set("queued.max.messages.kbytes", "16384")
        .set("log_level", "3");
    input.client_properties.apply(&mut cc);
    let consumer: BaseConsumer = cc.create().map_err(|e| Error::Config(format!("ceiling consumer: {e}")))?;
    let mut pc = ClientConfig::new();
    // The same batching as the pipeline's producers (linger.ms 5); no idempotence.
    pc.set("bootstrap.servers", &input.bootstrap).set("linger.ms", "5").set("log_level", "3");
    input.client_properties.apply(&mut pc);
    let producer: BaseProducer<Acks> =
        pc.create_with_context(Acks(progress.clone())).map_err(|e| Error::Config(format!("ceiling producer: {e}")))?;
    consumer.subscribe(&[&input.topic]).map_err(|e| Error::Config(format!("ceiling subscribe: {e}")))?;
    let deadline = time_limit.map(|t| Instant::now() + t);
    while !progress.is_done() && deadline.is_none_or(|d| Instant::now() < d) {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                progress.start();
                let origin = format!("{}/{}/{}", m.topic(), m.partition(), m.offset());
                let mut headers = OwnedHeaders::new_with_capacity(1);
                if let Some(hs) = m.headers() {
                    for h in hs.iter().filter(|h| h.key != ORIGIN_HEADER) {
                        headers = headers.insert(Header { key: h.key, value: h.value });
                    }
                }
                headers = headers.insert(Header { key: ORIGIN_HEADER, value: Some(origin.as_bytes()) });
                let mut rec = BaseRecord::<[u8], [u8]>::to(output).partition(m.partition()).headers(headers);
                rec.key = m.key();
                rec.payload = m.payload();
                loop {
                    match producer.send(rec) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                            rec = r;
                            producer.poll(Duration::from_millis(5));
                        }
                        Err((e, _)) => return Err(Error::Config(format!("ceiling produce: {e}"))),
                    }
                }
                producer.poll(Duration::ZERO);
            }
            Some(Err(e)) => tracing::debug!(error = %e, "ceiling consumer error"),
            None => {
                producer.poll(Duration::ZERO);
            }
        }
    }
    while !progress.is_done() && deadline.is_none_or(|d| Instant::now() < d) && producer.in_flight_count() > 0 {
        producer.poll(Duration::from_millis(10));
    }
    progress.close();
    Ok(0)
}

/// Deletes topics (best effort): the benchmark's own, on a cluster someone else runs.
pub fn delete_topics(bootstrap: &str, props: &Properties, topics: &[String]) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    if topics.is_empty() {
        return;
    }
    let cc = kafka_eos_testkit::admin::Client::new(bootstrap).properties(props.clone()).config();
    let Ok(admin) = cc.create::<AdminClient<rdkafka::client::DefaultClientContext>>() else { return };
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    if let Err(e) = futures::executor::block_on(admin.delete_topics(&names, &opts)) {
        tracing::warn!(error = %e, "deleting the benchmark topics failed");
    }
}

/// Median of `xs` (NaN if empty); the middle two's mean for an even count.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A Markdown table (what `docs/benchmarks.md` holds): a header row, then rows, numbers
/// right-aligned. A row with more cells than the header gets extra columns, not a panic.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN).set_header(header.iter().copied());
    for r in rows {
        t.add_row(r.iter().map(String::as_str));
    }
    for column in t.column_iter_mut().skip(1) {
        column.set_cell_alignment(comfy_table::CellAlignment::Right);
    }
    t.to_string() + "\n"
}

/// Formats an optional number with `digits` decimals, `-` when absent.
pub fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "-".into(),
    }
}

/// The overhead table: each result's throughput, its ratio to the ceiling among
/// `results`, CPU per million records, peak RSS and the verifier's verdict.
pub fn overhead_table(results: &[CopyResult]) -> String {
    let ceiling = results.iter().find(|r| r.subject == Subject::Ceiling.name()).map(|r| r.records_per_second);
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.subject.clone(),
                r.commit_interval_ms.map_or("-".into(), |ms| ms.to_string()),
                format!("{:.0}", r.records_per_second),
                format!("{:.2}", r.megabytes_per_second),
                fmt_opt(ceiling.filter(|c| *c > 0.0).map(|c| 100.0 * r.records_per_second / c), 1),
                fmt_opt(r.cpu_seconds_per_million_records, 2),
                fmt_opt(r.peak_rss_bytes.map(|b| b as f64 / (1 << 20) as f64), 0),
                fmt_opt(r.peak_rss_above_baseline_bytes.map(|b| b as f64 / (1 << 20) as f64), 0),
                match r.verified {
                    Some(v) if v.ok => "ok".into(),
                    Some(v) => format!("FAILED ({} dup, {} missing)", v.duplicates, v.missing),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    table(
        &[
            "subject",
            "commit ms",
            "records/s",
            "MB/s",
            "% of ceiling",
            "CPU s/M rec",
            "peak RSS MiB",
            "RSS over baseline MiB",
            "verified",
        ],
        &rows,
    )
}

/// The records/s in the final summary line of Kafka's `ProducerPerformance`: `N records
/// sent, X records/sec (Y MB/sec), ... ms 99.9th.` (its periodic lines carry no
/// percentiles).
pub fn parse_producer_performance(text: &str) -> Option<f64> {
    let line = text.lines().rev().find(|l| l.contains(" records sent, ") && l.contains("99.9th"))?;
    let rate = line.split(", ").nth(1)?;
    rate.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
    }

    #[test]
    fn progress_marks_the_window() {
        let p = Progress::new(100, CpuSource::SelfProcess);
        p.add(5);
        p.start();
        p.add(10);
        assert!(p.window().is_none());
        p.set(100);
        let w = p.window().expect("both marks");
        assert_eq!(w.records, 95);
        assert!(p.is_done() && p.end_to_end().is_some());
    }

    #[test]
    fn cpu_and_rss_are_readable() {
        assert!(pid_cpu(std::process::id()).is_some());
        assert!(peak_rss(None).is_some_and(|b| b > 0));
    }

    #[test]
    fn producer_performance_summary_parses() {
        let out = "3000 records sent, 599.9 records/sec (0.06 MB/sec), 2.0 ms avg latency, 120.0 ms max latency.\n\
                   500000 records sent, 373134.328358 records/sec (35.59 MB/sec), 5.12 ms avg latency, \
                   210.00 ms max latency, 3 ms 50th, 15 ms 95th, 20 ms 99th, 25 ms 99.9th.\n";
        assert_eq!(parse_producer_performance(out), Some(373134.328358));
        assert_eq!(parse_producer_performance("3000 records sent, 599.9 records/sec (0.06 MB/sec)"), None);
    }

    #[test]
    fn table_is_markdown_with_numbers_right_aligned() {
        let t = table(&["a", "bb"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "| a   | bb |\n|-----|----|\n| xyz |  1 |\n");
    }

    /// `kafka-eos bench` used to panic here: the rows had a cell more than the header.
    #[test]
    fn overhead_table_has_a_header_per_cell() {
        let input = Input {
            bootstrap: "127.0.0.1:9092".into(),
            topic: "in".into(),
            partitions: 1,
            records: 10,
            value_size: 100,
            client_properties: Properties::default(),
            broker_pids: vec![],
        };
        let progress = Progress::new(10, CpuSource::SelfProcess);
        let r = CopyResult::measured(Subject::Ceiling.name(), &input, None, &progress, Some(1 << 20));
        let t = overhead_table(&[r]);
        let bars: Vec<usize> = t.lines().map(|l| l.matches('|').count()).collect();
        assert!(bars.iter().all(|&n| n == bars[0] && n == 10), "{t}");
    }
}
