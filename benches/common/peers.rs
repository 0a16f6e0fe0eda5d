//! The Java peers, run on the same broker and the same input as our pipelines:
//!
//! - `cli/java/CopyApp.java`: a minimal Kafka Streams application doing the same 1:1
//!   copy (same key, value and partition, plus the `kafka-eos.origin` header), with
//!   `processing.guarantee=exactly_once_v2`;
//! - Kafka's own `TransactionalMessageCopier` (`kafka-tools`), one process per input
//!   partition, as Kafka's system tests run it.
//!
//! [`kafka_eos_cli::java::JavaApps`] fetches their jars (once) and compiles the apps, with
//! the Kafka version of the peers (the broker's, [`KAFKA_VERSION`], or another:
//! [`Peers::prepare_version`] runs Kafka Streams 4.4.0 beside the 4.1.1 broker).
//!
//! A peer is a separate process: its CPU comes from `/proc/<pid>/stat` and its peak RSS
//! from `/proc/<pid>/status`, and its progress from its consumer group's committed offsets,
//! polled every 50 ms from here (so the polling costs *this* process, not the peer). It is
//! started attached (`kafka_eos_testkit::process`), so it dies with the bench however the
//! bench ends.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use kafka_eos_cli::bench::{peak_rss, CopyResult, CpuSource, Input, Progress, Verified};
use kafka_eos_cli::java::JavaApps;
use kafka_eos_testkit::broker::KAFKA_VERSION;
use kafka_eos_testkit::process::{self, SpawnMode};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::results_dir;

/// The fewest records `ProducerPerformance` writes for the reference rate.
pub const PRODUCER_PERF_MIN_RECORDS: u64 = 1_000_000;

/// Ready-to-run peers: the classpath and the compiled Streams application.
pub struct Peers {
    /// The Kafka release of the jars (Kafka Streams, kafka-tools).
    pub version: String,
    apps: JavaApps,
    logs: PathBuf,
}

type Res<T> = Result<T, String>;

impl Peers {
    /// Fetches the jars of the broker's Kafka release (once) and compiles `CopyApp.java`.
    pub fn prepare() -> Res<Peers> {
        Peers::prepare_version(KAFKA_VERSION)
    }

    /// The same with the jars of Kafka `version` (a client release talks to older and newer
    /// brokers alike).
    pub fn prepare_version(version: &str) -> Res<Peers> {
        let out = results_dir().parent().unwrap_or(Path::new(".")).join("bench-peers");
        let apps = JavaApps::prepare(version, &out)?;
        let logs = out.join("logs");
        fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
        Ok(Peers { version: version.to_string(), apps, logs })
    }

    /// Starts a JVM; every stdout line goes to its log and to `on_line`.
    fn spawn(
        &self,
        log_name: &str,
        jvm: &[&str],
        main: &str,
        args: &[String],
        on_line: impl Fn(&str) + Send + 'static,
    ) -> Res<Child> {
        use std::io::{BufRead, Write};
        let log_path = self.logs.join(format!("{log_name}.log"));
        let log = fs::File::create(&log_path).map_err(|e| format!("creating {}: {e}", log_path.display()))?;
        let mut out_log = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = self.apps.command(jvm, main, args);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
        let mut child = process::spawn(cmd, SpawnMode::Attached).map_err(|e| format!("starting {main}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                on_line(&line);
                let _ = writeln!(out_log, "{line}");
            }
        });
        Ok(child)
    }

    /// Runs a Kafka tool to completion and returns its output.
    fn tool(&self, main: &str, args: &[&str]) -> Res<String> {
        self.apps.tool(main, args)
    }

    /// The cluster's finalized `transaction.version` (0: the classic protocol librdkafka
    /// speaks; 2: KIP-890's, which the Java 4.x producer then uses).
    pub fn transaction_version(&self, bootstrap: &str) -> Option<u32> {
        let text =
            self.tool("org.apache.kafka.tools.FeatureCommand", &["--bootstrap-server", bootstrap, "describe"]).ok()?;
        let line = text.lines().find(|l| l.contains("Feature: transaction.version"))?;
        line.split('\t')
            .find_map(|f| f.trim().strip_prefix("FinalizedVersionLevel:"))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Sets the cluster's `transaction.version` (upgrade or downgrade).
    pub fn set_transaction_version(&self, bootstrap: &str, version: u32) -> Res<()> {
        let current = self.transaction_version(bootstrap).unwrap_or(0);
        let verb = if version < current { "downgrade" } else { "upgrade" };
        let feature = format!("transaction.version={version}");
        self.tool(
            "org.apache.kafka.tools.FeatureCommand",
            &["--bootstrap-server", bootstrap, verb, "--feature", &feature],
        )
        .map(|_| ())
    }

    /// Kafka Streams copying `input` into `output` (created here) with `guarantee`
    /// (`exactly_once_v2` or `at_least_once`).
    pub fn streams(
        &self,
        input: &Input,
        output: &str,
        guarantee: &str,
        commit_ms: u64,
        label: &str,
    ) -> Res<CopyResult> {
        input.create_topic(output, 1).map_err(|e| e.to_string())?;
        let progress = Arc::new(OnceLock::<Arc<Progress>>::new());
        let p = progress.clone();
        // The window opens when Kafka Streams has its tasks and starts processing.
        let app = self.start_streams(&input.bootstrap, &input.topic, output, guarantee, commit_ms, move || {
            if let Some(p) = p.get() {
                p.start();
            }
        })?;
        let tracker = Progress::for_input(input, CpuSource::Pid(app.child.id()));
        let _ = progress.set(tracker.clone());
        let result = self.watch(app.child, tracker, input, &app.id, label, Some(commit_ms), false);
        let _ = fs::remove_dir_all(&app.state);
        let mut r = result?;
        if r.records_copied >= input.records {
            r.verified = Some(
                kafka_eos_cli::bench::check(input, output, kafka_eos_cli::bench::Subject::Ceiling)
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(r)
    }

    /// Starts `CopyApp` copying `input` into `output` (both exist) with `guarantee`;
    /// `on_running` is called when it reports `RUNNING` (it has its tasks and processes).
    /// The caller stops it ([`stop`]) and removes its state directory.
    pub fn start_streams(
        &self,
        bootstrap: &str,
        input: &str,
        output: &str,
        guarantee: &str,
        commit_ms: u64,
        on_running: impl Fn() + Send + 'static,
    ) -> Res<StreamsApp> {
        let id = kafka_eos_cli::bench::unique_name("bench-streams");
        let state = std::env::temp_dir().join(&id);
        let args = [bootstrap, &id, input, output, guarantee, &commit_ms.to_string(), &state.display().to_string()]
            .map(String::from);
        let child = self.spawn(&id, &["-Xms256m", "-Xmx1g", "-XX:+UseG1GC"], "CopyApp", &args, move |line| {
            if line.ends_with("-> RUNNING") {
                on_running();
            }
        })?;
        Ok(StreamsApp { child, id, state })
    }

    /// Kafka's own `ProducerPerformance` writing as many records as `input` holds (at least
    /// [`PRODUCER_PERF_MIN_RECORDS`]), of the same size, into a new topic with as many partitions (acks=all, `linger.ms=5`, one
    /// idempotent producer: the settings of the broker-capacity figure in
    /// `docs/benchmarks.md`): what this broker accepts from one tuned Java producer, the
    /// physical reference every subject is also reported against. Its own final summary
    /// line gives the rate (records/s over its whole run).
    pub fn producer_perf(&self, input: &Input, output: &str, label: &str) -> Res<CopyResult> {
        input.create_topic(output, 1).map_err(|e| e.to_string())?;
        let progress = Progress::new(input.records, CpuSource::SelfProcess);
        let props = format!("bootstrap.servers={}", input.bootstrap);
        // At least a million records: a fresh JVM's warm-up (JIT, metadata, connections)
        // counts in ProducerPerformance's rate, and dwarfs a short run's transfer time.
        let records = input.records.max(PRODUCER_PERF_MIN_RECORDS);
        let mut args: Vec<String> = ["--topic", output, "--num-records"].iter().map(|s| s.to_string()).collect();
        args.push(records.to_string());
        args.extend(["--record-size".into(), input.value_size.to_string(), "--throughput".into(), "-1".into()]);
        args.extend(["--producer-props".into(), props, "acks=all".into(), "linger.ms=5".into()]);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = self.tool("org.apache.kafka.tools.ProducerPerformance", &argv)?;
        let rps = kafka_eos_cli::bench::parse_producer_performance(&text)
            .ok_or_else(|| format!("no summary line from ProducerPerformance: {text}"))?;
        let r = CopyResult::measured(label, input, None, &progress, None);
        Ok(CopyResult {
            records_copied: input.records,
            records_per_second: rps,
            megabytes_per_second: rps * input.value_size as f64 / 1e6,
            cpu_seconds_per_million_records: None,
            broker_cpu_seconds_per_million_records: None,
            ..r
        })
    }

    /// One `TransactionalMessageCopier` per input partition, `txn_size` records per
    /// transaction, all started at once; progress is their group's committed offsets.
    pub fn copier(&self, input: &Input, output: &str, txn_size: u32, label: &str) -> Res<CopyResult> {
        input.create_topic(output, 1).map_err(|e| e.to_string())?;
        let group = kafka_eos_cli::bench::unique_name("bench-copier");
        let mut children = Vec::new();
        for p in 0..input.partitions {
            let args = vec![
                "--broker-list".into(),
                input.bootstrap.clone(),
                "--input-topic".into(),
                input.topic.clone(),
                "--input-partition".into(),
                p.to_string(),
                "--output-topic".into(),
                output.to_string(),
                "--transactional-id".into(),
                format!("{group}-{p}"),
                "--consumer-group".into(),
                group.clone(),
                "--transaction-size".into(),
                txn_size.to_string(),
                "--use-group-metadata".into(),
            ];
            children.push(self.spawn(
                &format!("{group}-{p}"),
                &["-Xms128m", "-Xmx512m"],
                "org.apache.kafka.tools.TransactionalMessageCopier",
                &args,
                |_| {},
            )?);
        }
        // Progress and CPU of the first copier stand for all: with one partition (the
        // configuration the docs compare) there is only one.
        let first = children.remove(0);
        let tracker = Progress::for_input(input, CpuSource::Pid(first.id()));
        let r = self.watch(first, tracker, input, &group, label, None, true);
        for mut c in children {
            let _ = c.wait();
        }
        let mut r = r?;
        r.subject = label.to_string();
        // The copier writes no origin header: compare counts (read_committed) only.
        if r.records_copied >= input.records {
            let mut n = 0u64;
            let cfg = kafka_eos_testkit::verify::VerifyConfig::new(&input.bootstrap, &input.topic, output);
            kafka_eos_testkit::verify::read_to_end(&cfg, output, Instant::now() + Duration::from_secs(120), |_| n += 1)
                .map_err(|e| e.to_string())?;
            r.verified = Some(Verified {
                input_records: input.records,
                output_records: n,
                duplicates: n.saturating_sub(input.records),
                missing: input.records.saturating_sub(n),
                ok: n == input.records,
            });
        }
        Ok(r)
    }

    /// Follows a peer's group until every input record is committed, then stops it.
    /// `start_on_first_commit`: open the window at the first committed offset (for a peer
    /// that says nothing when it is ready; its first transaction is left out).
    #[allow(clippy::too_many_arguments)]
    fn watch(
        &self,
        mut child: Child,
        progress: Arc<Progress>,
        input: &Input,
        group: &str,
        label: &str,
        commit_ms: Option<u64>,
        start_on_first_commit: bool,
    ) -> Res<CopyResult> {
        let pid = child.id();
        let lag = LagPoller::new(input, group)?;
        let deadline = Instant::now() + Duration::from_secs(120 + input.records / 2_000);
        let mut peak = None;
        let mut exited = None;
        while !progress.is_done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            peak = peak_rss(Some(pid)).or(peak);
            if let Some(n) = lag.committed() {
                if start_on_first_commit && n > 0 {
                    progress.start();
                }
                progress.set(n);
            }
            if let Ok(Some(status)) = child.try_wait() {
                exited = Some(status);
                if let Some(n) = lag.committed() {
                    progress.set(n);
                }
                break;
            }
        }
        stop(&mut child);
        if !progress.is_done() {
            return Err(format!(
                "{label} committed {} of {} records ({}); see {}",
                progress.count(),
                input.records,
                exited.map_or("timed out".to_string(), |s| format!("exited: {s}")),
                self.logs.display()
            ));
        }
        Ok(CopyResult::measured(label, input, commit_ms, &progress, peak))
    }
}

/// A running `CopyApp` ([`Peers::start_streams`]).
pub struct StreamsApp {
    /// The JVM.
    pub child: Child,
    /// Its `application.id` (also its consumer group).
    pub id: String,
    /// Its state directory.
    pub state: PathBuf,
}

/// SIGTERM, then SIGKILL after 15 s.
pub fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = process::signal(child.id(), process::Signal::SIGTERM);
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads a group's committed offsets on the input (sum over partitions) without joining it.
struct LagPoller {
    consumer: BaseConsumer,
    tpl: TopicPartitionList,
}

impl LagPoller {
    fn new(input: &Input, group: &str) -> Res<LagPoller> {
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &input.bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            // Not read_committed: that would ask for stable offsets, which the broker
            // refuses while a transaction is open; committed offsets are only ever the
            // ones of committed transactions anyway.
            .set("isolation.level", "read_uncommitted")
            .set("log_level", "3");
        input.client_properties.iter().for_each(|(k, v)| {
            cc.set(k, v);
        });
        let consumer: BaseConsumer = cc.create().map_err(|e| e.to_string())?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..input.partitions {
            tpl.add_partition(&input.topic, p);
        }
        Ok(LagPoller { consumer, tpl })
    }

    fn committed(&self) -> Option<u64> {
        let c = self.consumer.committed_offsets(self.tpl.clone(), Duration::from_secs(5)).ok()?;
        Some(
            c.elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) if o > 0 => o as u64,
                    _ => 0,
                })
                .sum(),
        )
    }
}
