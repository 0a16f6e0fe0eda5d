//! One instance process of the suite: `kafka-eos chaos instance ...` runs a
//! [`Pipeline`](kafka_eos::Pipeline) until SIGTERM.
//!
//! Instances are separate OS processes so that the suite can do to them what a machine or
//! an orchestrator does: SIGKILL (a crash: nothing runs after it, not even a destructor),
//! SIGTERM (a graceful stop, which the runtime handles), SIGSTOP/SIGCONT (a stall: a GC
//! pause, a frozen VM, a swapped-out process). The transform is 1:1: each input record
//! becomes one output record in the same partition (so per-partition order is checkable),
//! with the runtime's `kafka-eos.origin` header naming its input.
//!
//! # What an instance tells the suite
//! It prints a status line on stdout every `status_interval` and a last one on exit:
//!
//! ```text
//! chaos-status records_in=1200 records_out=1200 committed=31 aborted=9 fenced=0 rebalances=2
//! chaos-final records_in=... (same fields)
//! ```
//!
//! The first status line also means its SIGUSR1 and SIGUSR2 handlers are installed (see
//! below).
//!
//! # Deliberate aborts (`abort_one_in`)
//! The runtime has no "abort this transaction" call for user code, and it should not: the
//! way a transaction gets aborted on purpose is the processor failing. So the processor
//! fails on a random record with the probability `p` that makes a whole transaction of `n`
//! records fail with probability `1/k`: `1 - (1 - p)^n = 1/k`. `n` is not known in
//! advance (batches follow the input rate), so the instance measures it with a
//! transaction hook (a moving average of records per cycle) and derives `p` from it. With
//! `ProcessorErrorPolicy::retry(u32::MAX)` the aborted batch is replayed, and each replay
//! rolls the dice again: about one cycle in `k` aborts.
//!
//! # Stalling inside a transaction (SIGUSR1)
//! A SIGSTOP sent at a random instant often finds the instance between transactions. To
//! stall it *inside* one, the suite sends SIGUSR1: the next record processed (so the
//! transaction is open and its earlier outputs are already sent) waits 200 ms for those
//! outputs to reach the broker, then the process SIGSTOPs itself. When the suite SIGCONTs
//! it, it finishes the batch and tries to commit — with a producer that has been fenced.
//!
//! # Stalling right after a commit (SIGUSR2)
//! On SIGUSR2 the transaction hook of the next committed transaction SIGSTOPs the process:
//! no transaction is open, so the coordinator aborts nothing at the transaction timeout and
//! the producer's epoch stays. On waking, the instance's next transaction (timers alone,
//! under the timers workload) can only be refused by the group generation its offsets carry.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::rng::Rng;
use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder, ProcessorErrorPolicy, Rebalancing, Summary};

/// How to run one instance.
#[derive(Debug, Clone)]
pub struct InstanceConfig {
    /// Bootstrap servers.
    pub bootstrap: String,
    /// The application id (group id, transactional.id prefix), shared by all instances of a
    /// scenario.
    pub application_id: String,
    /// The input topic.
    pub input: String,
    /// The output topic (same partition count as the input).
    pub output: String,
    /// The delivery guarantee under test.
    pub guarantee: Guarantee,
    /// The rebalance protocol. Under [`Rebalancing::Consumer`] the session timeout is the
    /// broker's (`group.consumer.session.timeout.ms`, 45 s by default) and
    /// `session_timeout` is not used.
    pub rebalancing: Option<Rebalancing>,
    /// Abort about one transaction in this many on purpose; 0 for none.
    pub abort_one_in: u32,
    /// Consumer `session.timeout.ms`: how long a crashed or stalled instance keeps its
    /// partitions. Short (6 s, the broker's minimum by default) so faults resolve quickly.
    pub session_timeout: Duration,
    /// Producer `transaction.timeout.ms`: how long the coordinator lets a stalled
    /// transaction stay open before aborting it.
    pub transaction_timeout: Duration,
    /// How often to print a status line.
    pub status_interval: Duration,
    /// `Some(payments)`: run the financial-close workload (input = payments, output =
    /// revenue, late payments to `<output>-late`) instead of the 1:1 copy.
    pub financial_close_payments: Option<u64>,
    /// Run the card-velocity workload (input = payments, output = merchant totals, late
    /// payments to `<output>-late`, alerts to the PostgreSQL of `sink`) instead of the copy.
    pub card_velocity: bool,
    /// Run the join workload (input = orders and shipments, output = their pairs, poison
    /// orders dead-lettered to `<output>-dlq`) instead of the copy.
    pub join: bool,
    /// `Some(dir)`: keep the stores on disk under `dir` (`kafka-eos-disk`), so a restart
    /// restores only the changelogs' tails.
    pub state_dir: Option<std::path::PathBuf>,
    /// `Some(spec)`: write each input record's effect to a sink instead of the output topic
    /// (see the `sink` module): `postgres=<connection string>`, `redis=<url>`,
    /// `redis-plain=<url>`.
    pub sink: Option<String>,
    /// `Some(dir)`: append every committed transaction to `dir/commits-<pid>.log`, one line
    /// each: `<unix ms> <partition>,<partition>...` (the scale study's commit gaps).
    pub commit_log: Option<std::path::PathBuf>,
    /// `Some(id)`: the instance's id (`PipelineBuilder::instance_id`), stable across its
    /// restarts (a pod name); `None`: the runtime's default, new for every process.
    pub instance_id: Option<String>,
    /// Static membership (KIP-345) under `instance_id`: a restart within the session
    /// timeout gets the same partitions back with no rebalance.
    pub static_membership: bool,
    /// The 1:1 copy also counts every key in a store (one changelog record per input
    /// record), so that an instance has state to restore: the rolling restart's workload.
    pub keyed_state: bool,
    /// The 1:1 copy also keeps every record's value in a store by its key: state as large
    /// as the input's distinct keys times their values (the failover measurement's).
    pub keyed_values: bool,
    /// The 1:1 copy sends each output to its key's partition (not its input's), carrying its
    /// input's timestamp: every transaction writes every output partition, and a reader
    /// sees each record's latency (the read_committed wait after a kill's).
    pub by_key: bool,
    /// `Some(delay)`: the copy's outputs are sent by wall-clock timers this long after their
    /// records (the `delayed` module), most of them in transactions of timers alone.
    pub timer_delay: Option<Duration>,
    /// Standby replicas of each partition's stores on other instances (0: none).
    pub standby_replicas: usize,
    /// `Some(delay)`: the instance as a zombie (test-only faults): when the group takes its
    /// partitions without a revocation (its session expired), its tasks are told only this
    /// long after its client noticed, as a poll thread held up elsewhere would, and every
    /// commit meanwhile ends with its outcome unknown (not made), so its tasks reconcile
    /// while the partitions' new owners commit.
    pub zombie_for: Option<Duration>,
    /// Client properties (security settings) for the pipeline's clients. Never put on the
    /// instance's command line: the suite hands them over in a private file
    /// (`--client-config`).
    pub client_properties: kafka_eos::config::Properties,
}

impl InstanceConfig {
    /// The plain 1:1 copy from `input` to `output` under `guarantee`, every option off: a
    /// 6 s session, a 30 s transaction timeout, a status line every 500 ms.
    pub fn copy(bootstrap: &str, application_id: &str, input: &str, output: &str, guarantee: Guarantee) -> Self {
        InstanceConfig {
            bootstrap: bootstrap.to_string(),
            application_id: application_id.to_string(),
            input: input.to_string(),
            output: output.to_string(),
            guarantee,
            rebalancing: None,
            abort_one_in: 0,
            session_timeout: Duration::from_secs(6),
            transaction_timeout: Duration::from_secs(30),
            status_interval: Duration::from_millis(500),
            financial_close_payments: None,
            card_velocity: false,
            join: false,
            state_dir: None,
            sink: None,
            commit_log: None,
            instance_id: None,
            static_membership: false,
            keyed_state: false,
            keyed_values: false,
            by_key: false,
            timer_delay: None,
            standby_replicas: 0,
            zombie_for: None,
            client_properties: Default::default(),
        }
    }

    /// The instance's command-line arguments after `kafka-eos chaos instance`, except the
    /// client properties (never on a command line: `ps` shows it to every user).
    pub(crate) fn to_args(&self) -> Vec<String> {
        vec![
            "--bootstrap".into(),
            self.bootstrap.clone(),
            "--app".into(),
            self.application_id.clone(),
            "--input".into(),
            self.input.clone(),
            "--output".into(),
            self.output.clone(),
            "--guarantee".into(),
            self.guarantee.as_str().into(),
            "--abort-one-in".into(),
            self.abort_one_in.to_string(),
            "--session-timeout-ms".into(),
            self.session_timeout.as_millis().to_string(),
            "--transaction-timeout-ms".into(),
            self.transaction_timeout.as_millis().to_string(),
            "--status-interval-ms".into(),
            self.status_interval.as_millis().to_string(),
        ]
        .into_iter()
        .chain(self.rebalancing.iter().flat_map(|r| ["--rebalancing".into(), r.as_str().into()]))
        .chain(self.financial_close_payments.iter().flat_map(|n| ["--financial-close-payments".into(), n.to_string()]))
        .chain(self.card_velocity.then(|| "--card-velocity".into()))
        .chain(self.join.then(|| "--join".into()))
        .chain(self.sink.iter().flat_map(|s| ["--sink".into(), s.clone()]))
        .chain(self.state_dir.iter().flat_map(|d| ["--state-dir".into(), d.display().to_string()]))
        .chain(self.commit_log.iter().flat_map(|d| ["--commit-log".into(), d.display().to_string()]))
        .chain(self.instance_id.iter().flat_map(|id| ["--instance-id".into(), id.clone()]))
        .chain(self.static_membership.then(|| "--static-membership".into()))
        .chain(self.keyed_state.then(|| "--keyed-state".into()))
        .chain(self.keyed_values.then(|| "--keyed-values".into()))
        .chain(self.by_key.then(|| "--by-key".into()))
        .chain(self.timer_delay.iter().flat_map(|d| ["--timer-delay-ms".into(), d.as_millis().to_string()]))
        .chain(self.zombie_for.iter().flat_map(|d| ["--zombie-for-ms".into(), d.as_millis().to_string()]))
        .chain(
            (self.standby_replicas > 0)
                .then(|| ["--standby-replicas".into(), self.standby_replicas.to_string()])
                .into_iter()
                .flatten(),
        )
        .collect()
    }

    /// The financial-close topics of this instance's input and output.
    pub(crate) fn financial_close_topics(&self) -> crate::workloads::financial_close::Topics {
        crate::workloads::financial_close::Topics {
            payments: self.input.clone(),
            revenue: self.output.clone(),
            late: format!("{}-late", self.output),
            merchants: format!("{}-merchants", self.input),
        }
    }
}

/// Decides which records fail on purpose so that about one transaction in `one_in` aborts.
struct AbortDice {
    one_in: u32,
    /// Moving average of records per transaction cycle, in thousandths.
    avg_batch_milli: AtomicU64,
    rng: Mutex<Rng>,
}

impl AbortDice {
    fn new(one_in: u32) -> AbortDice {
        AbortDice {
            one_in,
            avg_batch_milli: AtomicU64::new(50_000),
            rng: Mutex::new(Rng::new(Rng::seed_from_entropy())),
        }
    }

    /// The per-record failure probability for transactions of `n` records.
    fn per_record(one_in: u32, n: f64) -> f64 {
        1.0 - (1.0 - 1.0 / one_in as f64).powf(1.0 / n.max(1.0))
    }

    fn roll(&self) -> bool {
        if self.one_in < 2 {
            return false;
        }
        let n = self.avg_batch_milli.load(Ordering::Relaxed) as f64 / 1000.0;
        let p = Self::per_record(self.one_in, n);
        self.rng.lock().unwrap_or_else(|e| e.into_inner()).unit() < p
    }

    fn observe(&self, records: usize) {
        let old = self.avg_batch_milli.load(Ordering::Relaxed);
        let new = (old * 4 + records as u64 * 1000) / 5;
        self.avg_batch_milli.store(new.max(1000), Ordering::Relaxed);
    }
}

/// `--commit-log`: one line per committed transaction, written through at once (an
/// instance may be SIGKILLed).
struct CommitLog(Mutex<std::io::LineWriter<std::fs::File>>);

impl CommitLog {
    fn create(dir: &std::path::Path) -> kafka_eos::Result<CommitLog> {
        let path = dir.join(format!("commits-{}.log", std::process::id()));
        let file = std::fs::File::create(&path)
            .map_err(|e| kafka_eos::Error::Internal(format!("cannot create the commit log {}: {e}", path.display())))?;
        Ok(CommitLog(Mutex::new(std::io::LineWriter::new(file))))
    }

    /// Logs `e` if its batch committed: a cycle that committed, or one whose unknown
    /// outcome was reconciled as committed.
    fn record(&self, e: &TransactionEvent) {
        use kafka_eos::observe::{Outcome, Reconciliation};
        use std::io::Write;
        let committed =
            matches!(e.outcome, Outcome::Committed | Outcome::Reconciled { found: Reconciliation::Committed, .. });
        if !committed {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let partitions: Vec<String> = e.partitions.iter().map(|(_, p)| p.to_string()).collect();
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(w, "{} {}", now.as_millis(), partitions.join(","));
    }
}

/// A status line: `<kind> records_in=.. records_out=.. committed=.. aborted=.. fenced=..
/// rebalances=.. restored=.. handovers=.. standby=..`.
pub(crate) fn status_line(kind: &str, s: &Summary) -> String {
    format!(
        "{kind} records_in={} records_out={} committed={} aborted={} fenced={} rebalances={} restored={} handovers={} standby={}",
        s.records_in,
        s.records_out,
        s.transactions_committed,
        s.transactions_aborted,
        s.producers_fenced,
        s.rebalances,
        s.restored_records,
        s.standby_handovers,
        s.standby_records
    )
}

/// Parses a [`status_line`]: `(is_final, summary)`, or `None` for any other line.
pub(crate) fn parse_status(line: &str) -> Option<(bool, Summary)> {
    let mut words = line.split_whitespace();
    let is_final = match words.next()? {
        "chaos-status" => false,
        "chaos-final" => true,
        _ => return None,
    };
    let mut s = Summary::default();
    for w in words {
        let (k, v) = w.split_once('=')?;
        let v: u64 = v.parse().ok()?;
        match k {
            "records_in" => s.records_in = v,
            "records_out" => s.records_out = v,
            "committed" => s.transactions_committed = v,
            "aborted" => s.transactions_aborted = v,
            "fenced" => s.producers_fenced = v,
            "rebalances" => s.rebalances = v,
            "restored" => s.restored_records = v,
            "handovers" => s.standby_handovers = v,
            "standby" => s.standby_records = v,
            _ => {}
        }
    }
    Some((is_final, s))
}

/// Runs the instance until SIGTERM (graceful) and returns its summary; prints status lines.
pub fn run_instance(cfg: InstanceConfig) -> kafka_eos::Result<Summary> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| kafka_eos::Error::Internal(format!("tokio runtime: {e}")))?;
    rt.block_on(run(cfg))
}

/// A flag set each time the process gets the signal `kind` (`name` for the error); whoever
/// acts on it clears it.
fn raised_on(kind: tokio::signal::unix::SignalKind, name: &str) -> kafka_eos::Result<Arc<AtomicBool>> {
    let mut signals = tokio::signal::unix::signal(kind)
        .map_err(|e| kafka_eos::Error::Internal(format!("cannot install the {name} handler: {e}")))?;
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    tokio::spawn(async move {
        while signals.recv().await.is_some() {
            set.store(true, Ordering::SeqCst);
        }
    });
    Ok(flag)
}

/// The pipeline an instance of `cfg` runs, as [`Pipeline::describe`] tells it (`kafka-eos
/// describe`): built as [`run_instance`] builds it, with no signal handler and no commit
/// log, and never run.
pub fn describe_instance(cfg: &InstanceConfig) -> kafka_eos::Result<kafka_eos::config::TopologyDescription> {
    let cfg = InstanceConfig { commit_log: None, ..cfg.clone() };
    let quiet = Flags { stall: Arc::default(), stall_after_commit: Arc::default() };
    Ok(builder(&cfg, quiet)?.build()?.describe())
}

/// The flags the instance's signal handlers raise (SIGUSR1, SIGUSR2).
struct Flags {
    stall: Arc<AtomicBool>,
    stall_after_commit: Arc<AtomicBool>,
}

async fn run(cfg: InstanceConfig) -> kafka_eos::Result<Summary> {
    use tokio::signal::unix::SignalKind;

    let stall = raised_on(SignalKind::user_defined1(), "SIGUSR1")?;
    let stall_after_commit = raised_on(SignalKind::user_defined2(), "SIGUSR2")?;
    let pipeline = builder(&cfg, Flags { stall, stall_after_commit })?.build()?;
    let handle = pipeline.shutdown_handle();
    let interval = cfg.status_interval.max(Duration::from_millis(50));
    let status = tokio::spawn(async move {
        loop {
            println!("{}", status_line("chaos-status", &handle.summary()));
            tokio::time::sleep(interval).await;
        }
    });
    let result = pipeline.run().await;
    status.abort();
    if let Ok(summary) = &result {
        println!("{}", status_line("chaos-final", summary));
    }
    result
}

/// The instance's pipeline, its stalls driven by `flags`.
fn builder(cfg: &InstanceConfig, flags: Flags) -> kafka_eos::Result<PipelineBuilder> {
    let Flags { stall, stall_after_commit } = flags;
    let dice = Arc::new(AbortDice::new(cfg.abort_one_in));
    let (out, d) = (cfg.output.clone(), dice.clone());
    let commit_log = match &cfg.commit_log {
        Some(dir) => Some(CommitLog::create(dir)?),
        None => None,
    };
    let heartbeat = (cfg.session_timeout / 6).max(Duration::from_millis(500));
    let builder = Pipeline::builder()
        .bootstrap_servers(&cfg.bootstrap)
        .application_id(&cfg.application_id)
        .guarantee(cfg.guarantee)
        .transaction_timeout(cfg.transaction_timeout);
    let builder = match cfg.rebalancing {
        Some(r) => builder.rebalancing(r),
        None => builder,
    };
    let builder = match cfg.rebalancing {
        Some(Rebalancing::Consumer) => builder,
        _ => builder
            .consumer_property("session.timeout.ms", cfg.session_timeout.as_millis().to_string())
            .consumer_property("heartbeat.interval.ms", heartbeat.as_millis().to_string()),
    };
    let builder = match cfg.zombie_for {
        Some(delay) => builder
            .inject_slow_lost_relay(delay)
            .inject_unknown_outcome_while_lost(kafka_eos::config::UnknownOutcome::TimedOutSlowlyBeforeCommit),
        None => builder,
    };
    let builder = builder
        .client_properties(&cfg.client_properties)
        .startup_timeout(Duration::from_secs(60))
        // SIGTERM is how the suite stops an instance gracefully.
        .handle_signals(true)
        // Deliberate failures are replayed until they pass: never stop, never dead-letter.
        .on_processor_error(ProcessorErrorPolicy::retry(u32::MAX).backoff(Duration::from_millis(10)))
        .on_transaction(move |e: &TransactionEvent| {
            d.observe(e.records);
            if e.outcome == Outcome::Committed && stall_after_commit.swap(false, Ordering::SeqCst) {
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            }
            if let Some(log) = &commit_log {
                log.record(e);
            }
        });
    let builder = match &cfg.state_dir {
        Some(dir) => builder.state_backend(kafka_eos_disk::DiskStore::at(dir).factory()),
        None => builder,
    };
    let builder = match cfg.standby_replicas {
        0 => builder,
        n => builder.standby_replicas(n),
    };
    let builder = match &cfg.instance_id {
        Some(id) => builder.instance_id(id).static_membership(cfg.static_membership),
        None => builder,
    };
    // On every record, before the workload's own work: the stall asked for with SIGUSR1,
    // then the deliberate failures.
    let before = move |r: &kafka_eos::InputRecord| -> Result<(), kafka_eos::processor::ProcessError> {
        if stall.swap(false, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
        if dice.roll() {
            return Err(format!("chaos: deliberate abort at {}", r.origin()).into());
        }
        Ok(())
    };
    let builder = if cfg.card_velocity {
        let conn = cfg.sink.as_deref().and_then(|s| s.strip_prefix("postgres=")).ok_or_else(|| {
            kafka_eos::Error::Config("--card-velocity needs --sink postgres=<connection string>".into())
        })?;
        let late = format!("{out}-late");
        // Every second, so that the internal topics are purged under every fault of the
        // cell: a purge past a record its reader had not committed would stop the pipeline.
        let builder = builder.purge_interval(Duration::from_secs(1));
        crate::workloads::card_velocity::pipeline(builder, (&cfg.input, &out, &late), conn, &cfg.application_id)
            .map_err(|e| kafka_eos::Error::Config(format!("card velocity: {e}")))?
    } else if cfg.join {
        super::join::pipeline(builder.input_topic(&cfg.input), &out, before)?
    } else if let Some(spec) = &cfg.sink {
        super::sink::instance_pipeline(builder.input_topic(&cfg.input), spec, &cfg.application_id, before)?
    } else if cfg.financial_close_payments.is_some() {
        crate::workloads::financial_close::pipeline(builder, &cfg.financial_close_topics())
    } else if let Some(delay) = cfg.timer_delay {
        super::delayed::DelayedCopy::pipeline(builder.input_topic(&cfg.input), &cfg.input, &out, delay, before)
    } else {
        let mut builder = builder.input_topic(&cfg.input);
        let out = builder.output_topic(&out);
        let seen = cfg.keyed_state.then(|| builder.store::<Vec<u8>, u64>("seen"));
        let values = cfg.keyed_values.then(|| builder.store::<Vec<u8>, Vec<u8>>("values"));
        let by_key = cfg.by_key;
        builder.processor(move |ctx, r| {
            before(r)?;
            if let Some(seen) = &seen {
                let key = r.key.clone().unwrap_or_default();
                let mut store = ctx.store(seen);
                let n = store.get(&key)?.unwrap_or(0);
                store.put(&key, &(n + 1))?;
            }
            if let Some(values) = &values {
                ctx.store(values).put(&r.key.clone().unwrap_or_default(), &r.value.clone().unwrap_or_default())?;
            }
            let mut value = r.value.clone().unwrap_or_default();
            value.reverse();
            let mut o = OutputRecord::to(&out).value(value);
            match by_key {
                true => o.timestamp = r.timestamp,
                false => o = o.partition(r.partition),
            }
            o.key = r.key.clone();
            ctx.emit(o);
            Ok(())
        })
    };
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_probability_makes_one_transaction_in_k_fail() {
        for n in [1.0, 10.0, 500.0] {
            let p = AbortDice::per_record(3, n);
            let txn_fails = 1.0 - (1.0 - p).powf(n);
            assert!((txn_fails - 1.0 / 3.0).abs() < 1e-9, "n={n}: {txn_fails}");
        }
        let dice = AbortDice::new(0);
        assert!((0..1000).all(|_| !dice.roll()), "0 means never");
    }

    #[test]
    fn status_lines_round_trip() {
        let mut s = Summary::default();
        (s.records_in, s.records_out, s.transactions_committed) = (1, 2, 3);
        (s.transactions_aborted, s.producers_fenced, s.rebalances) = (4, 5, 6);
        s.restored_records = 7;
        assert_eq!(parse_status(&status_line("chaos-final", &s)), Some((true, s)));
        assert_eq!(parse_status(&status_line("chaos-status", &s)), Some((false, s)));
        assert_eq!(parse_status("something else"), None);
    }

    #[test]
    fn args_name_every_option() {
        let mut cfg = InstanceConfig {
            bootstrap: "b:1".into(),
            application_id: "a".into(),
            input: "i".into(),
            output: "o".into(),
            guarantee: Guarantee::ExactlyOncePerConsumer,
            rebalancing: Some(Rebalancing::Eager),
            abort_one_in: 3,
            session_timeout: Duration::from_secs(6),
            transaction_timeout: Duration::from_secs(8),
            status_interval: Duration::from_millis(500),
            financial_close_payments: Some(7),
            card_velocity: false,
            join: false,
            state_dir: None,
            sink: None,
            commit_log: Some("/tmp/c".into()),
            instance_id: Some("pod-1".into()),
            static_membership: true,
            keyed_state: true,
            timer_delay: Some(Duration::from_millis(1500)),
            standby_replicas: 0,
            keyed_values: false,
            by_key: true,
            zombie_for: Some(Duration::from_secs(25)),
            client_properties: Default::default(),
        };
        cfg.client_properties.set("sasl.password", "hunter2");
        let args = cfg.to_args().join(" ");
        assert!(args.contains("--guarantee exactly-once-per-consumer") && args.contains("--abort-one-in 3"), "{args}");
        assert!(args.contains("--transaction-timeout-ms 8000") && args.contains("--rebalancing eager"), "{args}");
        assert!(args.contains("--financial-close-payments 7 --commit-log /tmp/c"), "{args}");
        assert!(
            args.ends_with(
                "--instance-id pod-1 --static-membership --keyed-state --by-key --timer-delay-ms 1500 --zombie-for-ms 25000"
            ),
            "{args}"
        );
        assert!(!args.contains("hunter2"), "secrets never go on a command line: {args}");
    }
}
