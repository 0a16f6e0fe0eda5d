//! What both benchmarks share: arguments, the broker, result files, progress bars, plots,
//! and the Java peers. The measuring itself lives in the library (`kafka_eos_cli::bench`), so
//! `kafka-eos bench` measures the same way.

// Each bench binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod peers;
pub mod plot;

use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};

/// Command-line arguments of a bench binary. Cargo passes `--bench` (and a filter, when
/// one is given) to every `harness = false` target; anything unknown is ignored.
#[derive(clap::Parser, Debug, Clone)]
#[command(ignore_errors = true, about = "kafka-eos benchmark (see docs/benchmarks.md)")]
pub struct Args {
    /// The reduced matrix that keeps the whole run, broker start included, under ~3 minutes.
    #[arg(long)]
    pub quick: bool,
    /// Run the Java peers (Kafka Streams, TransactionalMessageCopier) in quick mode too.
    #[arg(long)]
    pub peers: bool,
    /// Skip the Java peers in full mode.
    #[arg(long)]
    pub no_peers: bool,
    /// Repetitions of every configuration (medians are reported); default 1 quick, 3 full.
    #[arg(long)]
    pub reps: Option<usize>,
    /// Where to write the plots (SVG); default `docs/img` in an unnarrowed full run, and
    /// `target/bench-results/img` in quick mode or a narrowed run (`--partitions`,
    /// `--subjects`, `--intervals`, `--records`, `--broker-breakdown`), so that neither CI nor an experiment
    /// overwrites the docs' plots.
    #[arg(long)]
    pub plots: Option<PathBuf>,
    /// batch_throughput: only these partition counts (comma-separated), for experiments;
    /// latency and timeline: the input's partition count (one).
    #[arg(long, value_delimiter = ',')]
    pub partitions: Vec<i32>,
    /// batch_throughput, rebalance, scale_study, latency: only these subjects or guarantees
    /// (comma-separated names, e.g. `at-least-once,exactly-once`), for experiments.
    #[arg(long, value_delimiter = ',')]
    pub subjects: Vec<String>,
    /// batch_throughput: only these commit intervals in ms (comma-separated; subjects without
    /// an interval, the ceiling and the copier, are kept), for experiments; latency: every
    /// system's commit interval (one; default: each system's own, 100 ms).
    #[arg(long, value_delimiter = ',')]
    pub intervals: Vec<u64>,
    /// batch_throughput and timeline: records per input instead of the mode's default.
    #[arg(long)]
    pub records: Option<u64>,
    /// The broker JVM's process id, to measure its CPU when `KAFKA_BOOTSTRAP` names a broker
    /// running on this machine (a local cluster started by the bench is measured anyway).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// commit_latency: only 1,000 transactions (200 with `--quick`) of 100 records x 100 B for our two modes, on a
    /// local broker logging every request (`kafka.request.logger` at DEBUG), and the commit
    /// step split into the broker's time and ours (see `kafka_eos_cli::bench::broker_log`).
    #[arg(long)]
    pub broker_breakdown: bool,
    /// commit_latency --broker-breakdown: its control instead runs each mode with the
    /// machine's cores shared (as everywhere else) and split (the broker's threads on the
    /// first core, this process's on the others: `taskset`), alternating; Linux with
    /// two cores or more.
    #[arg(long)]
    pub split_cores: bool,
    /// scale_study: each phase's length in seconds instead of the mode's default.
    #[arg(long)]
    pub phase_secs: Option<u64>,
    /// scale_study, latency: input records per second instead of the mode's default.
    #[arg(long)]
    pub rate: Option<u64>,
    /// latency: seconds of paced input per system instead of the mode's default.
    #[arg(long)]
    pub duration_secs: Option<u64>,
    /// latency: the first seconds of input, not counted (the pipeline's warm-up).
    #[arg(long)]
    pub warmup_secs: Option<u64>,
    /// latency: seconds of unreported load on a new broker before the systems run (default
    /// 60, 20 with `--quick`): the broker's first minutes under load are slower for every
    /// system, so without it the first system pays for them alone.
    #[arg(long)]
    pub broker_warmup_secs: Option<u64>,
    /// latency: every system on a broker of its own, started for it (with
    /// `--broker-warmup-secs 0`: how each system fares on a young broker).
    #[arg(long)]
    pub fresh_broker: bool,
    /// latency: a linear y axis on the plot instead of a logarithmic one.
    #[arg(long)]
    pub linear_y: bool,
    /// scale_study: brokers in the local cluster (the topics' replication factor) instead of
    /// the mode's default (3 full, 1 quick).
    #[arg(long)]
    pub brokers: Option<usize>,
    /// scale_study: run only one of its parts, `study` (the group's sizes), `rolling` (the
    /// rolling restart with and without static membership) or `failover` (an instance
    /// killed for good, with and without standby replicas).
    #[arg(long)]
    pub only: Option<String>,
    /// Set by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl Args {
    /// Parses the process arguments, ignoring what it does not know.
    pub fn parse() -> Args {
        <Args as clap::Parser>::parse()
    }

    /// `quick` or `full`.
    pub fn mode(&self) -> &'static str {
        if self.quick {
            "quick"
        } else {
            "full"
        }
    }

    /// Repetitions of each configuration.
    pub fn reps(&self) -> usize {
        self.reps.unwrap_or(if self.quick { 1 } else { 3 }).max(1)
    }

    /// Whether the Java peers run.
    pub fn with_peers(&self) -> bool {
        (self.peers || !self.quick) && !self.no_peers
    }

    /// The plot directory.
    pub fn plot_dir(&self) -> PathBuf {
        self.plots.clone().unwrap_or_else(|| {
            let narrowed = !self.partitions.is_empty()
                || !self.subjects.is_empty()
                || !self.intervals.is_empty()
                || self.records.is_some()
                || self.phase_secs.is_some()
                || self.rate.is_some()
                || self.only.is_some()
                || self.broker_breakdown;
            if self.quick || narrowed {
                results_dir().join("img")
            } else {
                workspace_dir().join("docs").join("img")
            }
        })
    }
}

/// The workspace root (the benches are in `<root>/benches`, the crate in `<root>/processor`).
pub fn workspace_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_default()
}

/// `target/bench-results` (or under `$CARGO_TARGET_DIR`).
pub fn results_dir() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_dir().join("target"));
    target.join("bench-results")
}

/// Logs warnings of the library to stderr (`RUST_LOG` overrides).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,rdkafka::client=off".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// The process ids of the broker JVMs whose CPU the benches measure: the local cluster's
/// nodes, or `--broker-pid` for an external broker on this machine; none otherwise (a remote
/// broker's CPU cannot be read from here).
pub fn broker_pids(cluster: &Cluster, args: &Args) -> Vec<u32> {
    match cluster {
        Cluster::Local(local) => local.node_ids().into_iter().filter_map(|n| local.pid(n)).collect(),
        Cluster::External { .. } => args.broker_pid.into_iter().collect(),
    }
}

/// The broker: `KAFKA_BOOTSTRAP`, or a local one-node cluster that dies with this process.
/// The heap is raised to 1 GiB so the broker's GC does not throttle the copies.
pub fn broker() -> Cluster {
    broker_with(ClusterConfig::default())
}

/// [`broker`] with the other settings of `cfg` (the heap is still raised).
pub fn broker_with(cfg: ClusterConfig) -> Cluster {
    let cfg = ClusterConfig { heap_mb: 1024, ..cfg };
    Cluster::from_env_or_start(cfg).unwrap_or_else(|e| {
        eprintln!("cannot start the benchmark broker: {e}");
        std::process::exit(2)
    })
}

/// A progress bar over `n` configurations, on stderr; hidden when stderr is not a
/// terminal (CI logs get one line per configuration instead, from [`step`]).
pub fn bar(n: u64) -> ProgressBar {
    let bar = ProgressBar::new(n);
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// Announces a configuration on the bar, and as a plain line when the bar is hidden.
pub fn step(bar: &ProgressBar, msg: String) {
    if bar.is_hidden() {
        eprintln!("  {msg}");
    }
    bar.set_message(msg);
}

/// Writes `target/bench-results/<name>.json`: the mode, the machine, and one object per
/// configuration.
pub fn write_results(name: &str, mode: &str, broker: &str, extra: serde_json::Value, results: Vec<serde_json::Value>) {
    let dir = results_dir();
    let doc = serde_json::json!({
        "bench": name,
        "mode": mode,
        "kafka_version": kafka_eos_testkit::broker::KAFKA_VERSION,
        "broker": broker,
        "machine": machine(),
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "run": extra,
        "results": results,
    });
    let path = dir.join(format!("{name}.json"));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap_or_default()));
    match written {
        Ok(()) => println!("results: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
}

/// Cores, memory and CPU model, for the record.
pub fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).unwrap_or("");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    serde_json::json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model.trim(),
        "memory_gib": (mem_kb as f64 / (1u64 << 20) as f64 * 10.0).round() / 10.0,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
    })
}

/// A multi-thread Tokio runtime for the pipelines (2 workers: the machine has 2 cores,
/// and the pipelines' own work runs on their dedicated threads anyway).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

/// The machine's CPU time so far, in ticks: (stolen by the hypervisor, all). Stolen time is
/// time this virtual machine's runnable threads waited for a host CPU; it is quoted next to
/// latency figures because no load average inside the machine shows it. Zeros where
/// /proc/stat is missing.
pub fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> =
        stat.lines().next().unwrap_or_default().split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let all = fields.iter().take(8).sum();
    (fields.get(7).copied().unwrap_or(0), all)
}

/// The share of CPU time stolen between two [`cpu_ticks`] readings, in percent (NaN where
/// no time passed or /proc/stat is missing).
pub fn steal_percent(before: (u64, u64), after: (u64, u64)) -> f64 {
    let all = after.1.saturating_sub(before.1);
    if all == 0 {
        return f64::NAN;
    }
    after.0.saturating_sub(before.0) as f64 * 100.0 / all as f64
}

/// The 1-minute load average, quoted next to every figure (NaN where /proc is missing).
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}
