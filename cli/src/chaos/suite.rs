//! Runs the scenarios: cluster, topics, instances, faults, and the checks at the end.
//!
//! Per scenario, top to bottom ([`run_scenario`]):
//!
//! ```text
//! create input and output topics (replication factor 3, min.insync.replicas 2)
//! start the concurrent reader, the paced input producer and the first instances
//! for each step of the plan: wait for its virtual time, inject the fault
//! wait for the input to be written, then for the group to commit all of it
//! SIGTERM every instance
//! verify (kafka_eos::verify) + read the final output + compare with the concurrent reader
//! ```
//!
//! An instance that exits by itself is restarted at once (as a supervisor would) and
//! reported: that is a robustness problem, not by itself an exactly-once violation.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::fleet::Fleet;
use super::matrix::{verdict, Cell, Verdict, Workload};
use super::net::Net;
use super::pace::{Input, InputSpec, Items};
use super::plan::{Plan, Scenario};
use super::reader::{utc_time_of_day, wall_ms, Reader};
use super::report::{ScenarioResult, SuiteReport};
use super::rng::Rng;
use super::sink::Server;
use super::subject::Subject;

mod act;
mod checks;
mod setup;
mod velocity;
mod wait;
use crate::java::JavaApps;
use crate::workloads::{card_velocity, financial_close};
use kafka_eos::config::Properties;
use kafka_eos::{Guarantee, Summary};
use kafka_eos_testkit::admin;
use kafka_eos_testkit::broker::{ClusterConfig, LocalCluster, KAFKA_VERSION};

/// Consumer `session.timeout.ms` of every instance: the broker's minimum by default, so a
/// crashed or stalled instance loses its partitions quickly.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// Producer `transaction.timeout.ms` of every instance, unless configured: short, so that a
/// stalled instance's transaction is aborted, and the suite moves on, within seconds.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(8);
/// How often the coordinator looks for timed-out transactions on the suite's own cluster
/// (`transaction.abort.timed.out.transaction.cleanup.interval.ms`; Kafka's default is 10 s).
const LOCAL_TIMEOUT_CHECK: Duration = Duration::from_secs(2);
/// The same, assumed for a cluster given with `--bootstrap` (Kafka's default).
const DEFAULT_TIMEOUT_CHECK: Duration = Duration::from_secs(10);
/// How long a graceful instance stop may take before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// What to run. [`SuiteConfig::new`] has the defaults of `kafka-eos chaos`.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// Input records per scenario.
    pub records: u64,
    /// Partitions of the input and output topics.
    pub partitions: i32,
    /// Scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// The workload of every scenario that is a fault alone (default: the copy); a preset
    /// scenario (`financial-close`, the sink scenarios) brings its own.
    pub workload: Option<Workload>,
    /// Every scenario's fault count is multiplied by this: 1 by default, 10 in the soak;
    /// `--fault-scale 67` gives `coordinator-kill` its 201 aimed kills.
    pub fault_scale: usize,
    /// Seed of every random choice (fault instants, victims); print it to replay a run.
    pub seed: u64,
    /// An existing cluster instead of a local 3-node one (broker scenarios cannot run).
    pub bootstrap: Option<String>,
    /// Replication factor of the topics; default 3 (`min.insync.replicas` is 2, or 1 below 3).
    pub replication: Option<i32>,
    /// The guarantee the instances run.
    pub guarantee: Guarantee,
    /// The instances' rebalance protocol.
    pub rebalancing: Option<kafka_eos::Rebalancing>,
    /// The `kafka-eos` executable, run as `<exe> chaos instance ...` for each instance.
    pub instance_exe: PathBuf,
    /// Where instance logs go; default a temporary directory, removed when every scenario
    /// passed.
    pub log_dir: Option<PathBuf>,
    /// A failed scenario copies the local cluster's data directories into its log directory
    /// (`cluster-data/`), for reading the partitions' batches and markers back.
    pub keep_data_on_failure: bool,
    /// Restart a crashed broker when the plan says, even before the controller has fenced
    /// it (`broker.session.timeout.ms`, 9 s). Off by default: a crashed broker comes back
    /// only once the cluster has noticed the crash, as `docs/operations.md` asks of a
    /// deployment. Back sooner, it can lead its partitions again at the same leader epoch
    /// and, as a transaction coordinator, act on a `PrepareCommit` it never replicated:
    /// Kafka then commits one transaction in some partitions and aborts it in others, which
    /// no client can prevent (`docs/reliability.md`). On, the suite reproduces that flaw.
    pub restart_unfenced: bool,
    /// Restart a crashed broker this long after its crash (not sooner, and without waiting
    /// for the controller to fence it): the restart delay `docs/operations.md` gives
    /// supervisors, tested as a supervisor applies it. `None`: wait for the fencing.
    pub restart_delay: Option<Duration>,
    /// In the aimed coordinator kill after an `EndTxn`, the other brokers are SIGSTOPped from
    /// the `EndTxn`'s release to the kill: the coordinator's `PrepareCommit` is never
    /// replicated, the precondition of the split transaction of `docs/reliability.md`.
    pub unreplicated_prepare: bool,
    /// Producer `transaction.timeout.ms` of every instance (8 s by default).
    pub transaction_timeout: Duration,
    /// How long after its record the timers workload sends its output.
    pub timer_delay: Duration,
    /// Bytes per input record value.
    pub value_size: usize,
    /// Who runs the pipeline: our instances (default) or the copy written with Kafka's own
    /// Java clients, the control for a flaw that may be the broker's.
    pub subject: Subject,
    /// Client properties (security settings) for every client of the suite: the instances'
    /// pipelines, topic creation, the input producer, the readers and the verifier. The
    /// instances get them through a file only the user can read, never on their command
    /// line (which `ps` shows to everyone).
    pub client_properties: Properties,
}

impl SuiteConfig {
    /// The cells the scenarios make under this config: each scenario with its preset's
    /// workload or the config's, and the config's guarantee.
    pub fn cells(&self) -> Vec<Cell> {
        let workload = |s: Scenario| s.preset().or(self.workload).unwrap_or(Workload::Copy);
        let cell = |s| Cell { workload: workload(s), guarantee: self.guarantee, fault: s };
        self.scenarios.iter().map(|&s| cell(s)).collect()
    }

    /// 100,000 records in 4 partitions, every scenario, exactly-once, a random seed.
    pub fn new(instance_exe: PathBuf) -> SuiteConfig {
        SuiteConfig {
            records: 100_000,
            partitions: 4,
            scenarios: Scenario::ALL.to_vec(),
            workload: None,
            fault_scale: 1,
            seed: Rng::seed_from_entropy(),
            bootstrap: None,
            replication: None,
            guarantee: Guarantee::ExactlyOncePerPartition,
            rebalancing: None,
            instance_exe,
            log_dir: None,
            keep_data_on_failure: false,
            restart_unfenced: false,
            restart_delay: None,
            unreplicated_prepare: false,
            transaction_timeout: TRANSACTION_TIMEOUT,
            value_size: 64,
            timer_delay: Duration::from_secs(1),
            subject: Subject::KafkaEos,
            client_properties: Properties::default(),
        }
    }
}

/// What [`run_suite`] reports as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A line for humans (cluster started, scenario starting).
    Message(&'a str),
    /// A scenario finished.
    Result(&'a ScenarioResult),
}

/// Runs the scenarios of `cfg` ([`SuiteConfig::cells`]): see [`run_cells`].
pub fn run_suite(
    cfg: &SuiteConfig,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<SuiteReport, Box<dyn std::error::Error>> {
    run_cells(cfg, &cfg.cells(), progress)
}

/// Runs `cells`, one after another, on one cluster (started here unless `cfg.bootstrap`
/// names one), calling `progress` as it goes; a cell the matrix calls inapplicable is
/// skipped with a message. Blocking; start it from the thread that will outlive it
/// (instances die with the thread that started them).
///
/// # Errors
/// Only for what prevents the suite from running at all (the cluster does not start, a
/// broker scenario without broker control); a scenario that fails is a result.
pub fn run_cells(
    cfg: &SuiteConfig,
    cells: &[Cell],
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<SuiteReport, Box<dyn std::error::Error>> {
    let mut scenarios = Vec::new();
    if let Some(why) = cells.iter().find_map(|c| cfg.subject.refuses(c)) {
        return Err(why.into());
    }
    if cfg.subject.is_java() && cfg.client_properties.iter().next().is_some() {
        return Err(format!("--subject {} does not take client properties (--client-config)", cfg.subject).into());
    }
    for &c in cells {
        match verdict(c.workload, c.guarantee, c.fault) {
            Verdict::Inapplicable(why) => progress(Progress::Message(&format!(
                "chaos: skipping {} under {} with {}: {why}",
                c.workload,
                c.guarantee.as_str(),
                c.fault
            ))),
            _ => scenarios.push(c),
        }
    }
    if cfg.bootstrap.is_some() {
        let (skip, keep): (Vec<Cell>, Vec<Cell>) = scenarios.iter().partition(|c| c.fault.needs_broker_control());
        if !skip.is_empty() && cells.len() < Scenario::ALL.len() {
            let names: Vec<&str> = skip.iter().map(|c| c.fault.name()).collect();
            return Err(format!(
                "{names:?} stop and start brokers: they need the suite's own cluster (no --bootstrap)"
            )
            .into());
        }
        for c in &skip {
            progress(Progress::Message(&format!("chaos: skipping {}: it needs the suite's own cluster", c.fault)));
        }
        scenarios = keep;
    }
    let mut cluster = None;
    let (bootstrap, timeout_check) = match &cfg.bootstrap {
        Some(b) => (b.clone(), DEFAULT_TIMEOUT_CHECK),
        None => {
            progress(Progress::Message("chaos: starting a local 3-node Kafka cluster"));
            // Every client reaches the brokers through the fault proxy (network scenarios).
            // A broker restarted late in a long run loads every partition the earlier
            // scenarios left (10 GiB by the twelfth scenario of a 300,000-record soak, where
            // the default 60 s ran out on a loaded machine): give restarts five minutes.
            let mut cc = ClusterConfig {
                fault_proxy: true,
                ready_timeout: Duration::from_secs(300),
                ..ClusterConfig::with_nodes(3)
            };
            cc.extra_properties.push((
                "transaction.abort.timed.out.transaction.cleanup.interval.ms".into(),
                LOCAL_TIMEOUT_CHECK.as_millis().to_string(),
            ));
            let c = LocalCluster::start(cc)?;
            let b = c.bootstrap_servers();
            let tv = c.transaction_version()?;
            let v = c.kafka_version();
            progress(Progress::Message(&format!("chaos: Kafka {v} cluster (transaction.version {tv}) ready at {b}")));
            cluster = Some(c);
            (b, LOCAL_TIMEOUT_CHECK)
        }
    };
    let java = if cfg.subject.is_java() {
        let version =
            cluster.as_ref().map_or(KAFKA_VERSION.to_string(), |c: &LocalCluster| c.kafka_version().to_string());
        progress(Progress::Message(&format!("chaos: subject {}, Kafka's Java clients {version}", cfg.subject)));
        let out = cfg.instance_exe.parent().map_or_else(std::env::temp_dir, Path::to_path_buf).join("chaos-java");
        Some(JavaApps::prepare(&version, &out)?)
    } else {
        None
    };
    let (log_root, remove_logs) = match &cfg.log_dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("kafka-eos-chaos-{}", std::process::id())), true),
    };
    let run_id = format!("{}-{:x}", std::process::id(), Rng::seed_from_entropy() & 0xff_ffff);
    let client = admin::Client::new(&bootstrap).properties(cfg.client_properties.clone());
    let client_config = PrivateFile::write(&format!("kafka-eos-chaos-{run_id}"), &cfg.client_properties)?;
    let mut report = SuiteReport { results: Vec::new(), seed: cfg.seed, logs: None };
    for (i, &cell) in scenarios.iter().enumerate() {
        let scenario = cell.fault;
        let label = cell.label();
        progress(Progress::Message(&format!("chaos: {label} ({}/{})", i + 1, scenarios.len())));
        // One generator per cell, from the seed and the cell alone: running a subset with
        // --scenario replays the same schedule as in the full run.
        let mut rng = Rng::new(cfg.seed ^ cell.seed_salt());
        let ctx = Ctx {
            cfg,
            client: &client,
            client_config: client_config.as_ref().map(|f| f.path.as_path()),
            java: java.as_ref(),
            run_id: &run_id,
            log_dir: log_root.join(&label),
            // Longer than the session timeout and the transaction timeout plus the
            // coordinator's check interval: both the group and the coordinator move on.
            stall: cfg.transaction_timeout.max(SESSION_TIMEOUT) + timeout_check + Duration::from_secs(5),
        };
        let result = run_scenario(&ctx, cluster.as_mut(), cell, &mut rng);
        if let Some(proxy) = cluster.as_ref().and_then(|c| c.proxy()) {
            proxy.heal_all(); // a scenario that failed half-way leaves no fault behind
        }
        // The brokers' logs go with the instances' (the cluster's own directory is removed
        // with it): on a failure, and always into a log directory the user chose, since a
        // passing run's logs are the evidence when comparing subjects.
        if !result.passed() || !remove_logs {
            for (node, log) in cluster.iter().flat_map(|c| c.node_ids().into_iter().map(|n| (n, c.log_path(n)))) {
                if let Some(log) = log {
                    let _ = std::fs::copy(&log, ctx.log_dir.join(format!("broker-{node}.log")));
                }
            }
        }
        if !result.passed() {
            if let (true, Some(c)) = (cfg.keep_data_on_failure, cluster.as_ref()) {
                let to = ctx.log_dir.join("cluster-data");
                match copy_tree(c.data_dir(), &to) {
                    Ok(bytes) => progress(Progress::Message(&format!(
                        "chaos: {scenario} failed: the cluster's data ({} MiB) copied to {}",
                        bytes >> 20,
                        to.display()
                    ))),
                    Err(e) => tracing::warn!(error = %e, "copying the cluster's data failed"),
                }
            }
        }
        progress(Progress::Result(&result));
        report.results.push(result);
    }
    if remove_logs && report.passed() {
        let _ = std::fs::remove_dir_all(&log_root);
    } else {
        report.logs = Some(log_root);
    }
    Ok(report)
}

/// Copies the directory tree `from` to `to` (files as they are at that moment: brokers may
/// still be appending); returns the bytes copied.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<u64> {
    std::fs::create_dir_all(to)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            bytes += copy_tree(&entry.path(), &target)?;
        } else {
            bytes += std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(bytes)
}

struct Ctx<'a> {
    cfg: &'a SuiteConfig,
    /// The cluster, with the user's client properties.
    client: &'a admin::Client,
    /// Those properties in a private file, for the instances (`--client-config`).
    client_config: Option<&'a Path>,
    /// The Java subjects' apps, when the subject is one.
    java: Option<&'a JavaApps>,
    run_id: &'a str,
    log_dir: PathBuf,
    stall: Duration,
}

fn run_scenario(ctx: &Ctx<'_>, cluster: Option<&mut LocalCluster>, cell: Cell, rng: &mut Rng) -> ScenarioResult {
    let started = Instant::now();
    let mut result = ScenarioResult::new(cell);
    if let Err(e) = Run::new(ctx, cluster, cell, rng, &mut result).and_then(|run| run.execute()) {
        result.error = Some(e);
    }
    result.elapsed = started.elapsed();
    result
}

/// One scenario in progress.
struct Run<'a, 'r> {
    ctx: &'a Ctx<'a>,
    cluster: Option<&'a mut LocalCluster>,
    rng: &'a mut Rng,
    result: &'r mut ScenarioResult,
    /// The workload, guarantee and fault this run is.
    cell: Cell,
    plan: Plan,
    input_topic: String,
    output_topic: String,
    app: String,
    /// The financial-close scenario's topics (checked by reconciliation, not 1:1).
    close_topics: Option<financial_close::Topics>,
    /// The sink scenarios' server (checked from its contents, not from an output topic).
    sink: Option<Server>,
    fleet: Fleet,
    /// Stalled instances and their counters when stalled.
    zombies: Vec<(u32, Summary)>,
    /// `steps.log` in the log directory: every fault with its UTC time, to line up with
    /// the instances' and brokers' logs.
    timeline: Option<std::fs::File>,
    /// Network faults injected so far.
    net: Net,
    /// When each broker that is down now was SIGKILLed (for `restart_delay`).
    crashed_at: std::collections::HashMap<i32, Instant>,
}

impl<'a, 'r> Run<'a, 'r> {
    fn note(&mut self, s: impl Into<String>) {
        self.result.notes.push(s.into());
    }

    /// Restarts instances that exited by themselves.
    fn tend(&mut self) -> Result<(), String> {
        for _ in 0..self.fleet.reap_crashed() {
            self.fleet.start()?;
        }
        Ok(())
    }

    /// Sleeps `d` while tending the fleet.
    fn pause(&mut self, d: Duration) -> Result<(), String> {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.tend()?;
            std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
        }
        Ok(())
    }

    fn execute(mut self) -> Result<(), String> {
        let ctx = self.ctx;
        let cfg = ctx.cfg;
        if self.cluster.is_some() {
            wait_full_isr(ctx.client, Duration::from_secs(120))?;
        }
        // The concurrent reader joins outputs to inputs 1:1 by origin: the copies only.
        let reader = match self.cell.workload {
            Workload::Copy | Workload::Timers => {
                Some(Reader::start(ctx.client, &self.output_topic, cfg.partitions, &self.input_topic)?)
            }
            _ => None,
        };
        let input = Input::start(InputSpec {
            client: ctx.client.clone(),
            topic: self.input_topic.clone(),
            partitions: cfg.partitions,
            records: cfg.records,
            value_size: cfg.value_size,
            duration: self.plan.duration,
            items: match self.cell.workload {
                _ if self.close_topics.is_some() => Items::Close(close_generate(cfg.records)),
                Workload::Join => Items::Join,
                Workload::Velocity => Items::Velocity(card_velocity::Generate {
                    payments: cfg.records,
                    ..card_velocity::Generate::default()
                }),
                _ => Items::Sequence,
            },
        })?;
        self.fleet.scale_to(self.plan.instances, STOP_TIMEOUT)?;
        // The clock (and so the input) starts once an instance is up.
        if !self.fleet.wait_started(Duration::from_secs(90)) {
            return Err("no instance reported a status within 90 s; see the instance logs".into());
        }
        self.mark("an instance is up: input and faults start");
        let clock = input.clock.clone();
        let steps = self.plan.steps.clone();
        let mut late = 0;
        for (i, step) in steps.iter().enumerate() {
            clock.set_cap(step.at);
            while clock.now() < step.at {
                if input.is_finished() {
                    break; // the input thread failed: finish() below says why
                }
                self.pause(Duration::from_millis(50))?;
            }
            if input.is_finished() {
                late += 1;
            }
            let next = steps.get(i + 1).map_or(self.plan.duration, |s| s.at);
            clock.set_cap(step.at + (next.saturating_sub(step.at)) / 2);
            self.act(step.action)?;
            if step.fault {
                self.result.faults += 1;
            }
        }
        if self.net.unfired > 0 {
            // A network fault whose request never came injected nothing: not counted.
            self.result.faults -= self.net.unfired.min(self.result.faults);
            self.note(format!("{} network fault(s) never fired (see steps.log)", self.net.unfired));
        }
        clock.set_cap(self.plan.duration);
        while !input.is_finished() {
            self.pause(Duration::from_millis(100))?;
        }
        let input_stats = input.finish()?;
        self.mark("input written");
        if input_stats.failed > 0 {
            self.note(format!(
                "input: {} of {} records failed to be written ({}); they are not part of the input",
                input_stats.failed,
                input_stats.sent,
                input_stats.first_error.unwrap_or_default()
            ));
        }
        if late > 0 {
            self.note(format!("{late} fault(s) came after the input had failed"));
        }
        self.fleet.resume_all();
        if self.fleet.len() == 0 {
            self.fleet.start()?;
        }
        let mut caught_up = self.wait_caught_up()?;
        let velocity = self.cell.workload == Workload::Velocity;
        if caught_up && velocity {
            self.mark("group caught up: waiting for the last alerts and merchant totals");
            caught_up = self.wait_velocity()?;
        }
        if caught_up && self.close_topics.is_some() {
            self.mark("group caught up: waiting for the timers to close the last days");
            caught_up = self.wait_closed()?;
        }
        let timers = self.cell.workload == Workload::Timers;
        if let (true, true, Some(reader)) = (caught_up, timers, reader.as_ref()) {
            self.mark("group caught up: waiting for the last timers");
            caught_up = self.wait_timers_fired(reader)?;
        }
        self.mark(if caught_up { "group caught up: SIGTERM to every instance" } else { "catch-up timed out" });
        self.fleet.shutdown(STOP_TIMEOUT);
        self.mark("instances stopped");
        match reader {
            _ if velocity => self.check_velocity(caught_up),
            _ if self.cell.workload == Workload::Join => self.check_join(caught_up),
            Some(reader) => self.check(reader, caught_up),
            None if self.sink.is_some() => self.check_sink(caught_up),
            None => self.reconcile(caught_up),
        }
    }

    /// Appends `what` to the timeline, stamped with the UTC time of day.
    fn mark(&mut self, what: &str) {
        use std::io::Write as _;
        if let Some(f) = &mut self.timeline {
            let _ = writeln!(f, "{} {what}", utc_time_of_day(wall_ms()));
        }
    }
}

/// The financial-close input of a scenario: `payments` payments over the default days,
/// merchants, duplicate and late ratios.
fn close_generate(payments: u64) -> financial_close::Generate {
    financial_close::Generate { payments, ..financial_close::Generate::default() }
}

/// Waits until every partition of every topic (internal ones included) has its full ISR.
fn wait_full_isr(client: &admin::Client, timeout: Duration) -> Result<(), String> {
    let probe: BaseConsumer =
        client.config().set("log_level", "2").create().map_err(|e| format!("metadata probe: {e}"))?;
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        match probe.fetch_metadata(None, Duration::from_secs(5)) {
            Ok(md) => {
                let short: usize = md
                    .topics()
                    .iter()
                    .flat_map(|t| t.partitions())
                    .filter(|p| p.isr().len() < p.replicas().len())
                    .count();
                if short == 0 {
                    return Ok(());
                }
                last = format!("{short} partitions under-replicated");
            }
            Err(e) => last = format!("metadata: {e}"),
        }
        if Instant::now() >= deadline {
            return Err(format!("replicas not back in sync within {timeout:?}: {last}"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A file only this user can read (directory 0700, file 0600), removed when dropped: how
/// the client properties, secrets included, reach the instance processes.
struct PrivateFile {
    dir: PathBuf,
    path: PathBuf,
}

impl PrivateFile {
    /// Writes `props` to `<temp>/<name>/client.properties`; `None` when there are none.
    fn write(name: &str, props: &Properties) -> Result<Option<PrivateFile>, String> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if props.iter().next().is_none() {
            return Ok(None);
        }
        let dir = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let file = PrivateFile { path: dir.join("client.properties"), dir };
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file.path)
            .and_then(|mut f| f.write_all(crate::client_config::to_text(props).as_bytes()))
            .map_err(|e| format!("writing {}: {e}", file.path.display()))?;
        Ok(Some(file))
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copy_tree_copies_every_file_of_every_directory_and_counts_the_bytes() {
        let root = std::env::temp_dir().join(format!("kafka-eos-copy-tree-{}", std::process::id()));
        let from = root.join("from");
        std::fs::create_dir_all(from.join("node-1/data/__transaction_state-3")).unwrap();
        std::fs::write(from.join("node-1/kafka.log"), b"log line\n").unwrap();
        std::fs::write(from.join("node-1/data/__transaction_state-3/00000000000000000000.log"), [7u8; 1000]).unwrap();
        let bytes = super::copy_tree(&from, &root.join("to")).unwrap();
        assert_eq!(bytes, 9 + 1000);
        let copied = std::fs::read(root.join("to/node-1/data/__transaction_state-3/00000000000000000000.log")).unwrap();
        assert_eq!(copied, vec![7u8; 1000]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
