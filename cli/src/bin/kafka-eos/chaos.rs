//! `kafka-eos chaos`: exactly-once under injected faults (see `kafka_eos_cli::chaos` and
//! `docs/reliability.md`).
//!
//! `kafka-eos chaos [--records N] [--scenario NAME]... [--workload W] [--guarantee G] [--soak]
//! [--fault-scale K] [--seed S] [--bootstrap B [--client-config FILE] [-X key=value]...]`
//! runs the suite; `kafka-eos chaos --matrix ci|long [--list]` runs (or lists) the fault
//! matrix's cells of that tier (narrowed by `--workload`, `--guarantee`, `--scenario`). It prints one
//! row per scenario with its table of anomaly classes (concurrent reader / final checks),
//! then the summary table (one column per class) and
//! `chaos: <k> scenarios, <n> faults, <d> duplicates, <m> missing, <o> order violations,
//! <a> aborted reads, <s> skipped offsets, <u> unseen, <x> other`; it exits 1 on any
//! anomaly of any class. `kafka-eos chaos instance ...` (hidden) is one pipeline
//! instance: the suite starts it as a child process of this same binary.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kafka_eos::{Guarantee, Rebalancing};
use kafka_eos_cli::chaos::matrix::{self, Tier, Workload};
use kafka_eos_cli::chaos::{self, InstanceConfig, Progress, Scenario, ScenarioResult, Subject, SuiteConfig};

/// Arguments of `kafka-eos chaos`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    instance: Option<Sub>,
    /// Input records per scenario [default: 100000; 2000000 with --soak].
    #[arg(long)]
    records: Option<u64>,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Run only this scenario (repeatable): process-kill, process-bounce, broker-kill,
    /// broker-bounce, rebalance-storm, random-aborts, stall, financial-close, endtxn-held,
    /// produce-held, coordinator-cut, coordinator-kill, group-coord-cut, slow-broker, postgres-sink, redis-sink,
    /// redis-no-dedup, sink-kill, member-cut [default: all].
    #[arg(long = "scenario")]
    scenarios: Vec<Scenario>,
    /// The workload of the scenarios that are a fault alone: copy, timers (outputs sent by
    /// wall-clock timers, most in transactions of timers alone), close, close-disk,
    /// postgres, redis, redis-no-dedup [default: copy]; repeatable with --matrix. The
    /// presets (financial-close, the sink scenarios) run their own.
    #[arg(long = "workload")]
    workloads: Vec<Workload>,
    /// Run the fault matrix's cells of this tier: `ci` (the merge gate's slice) or `long`
    /// (every cell that applies); --workload, --guarantee and --scenario narrow it.
    #[arg(long, value_parser = ["ci", "long"])]
    matrix: Option<String>,
    /// With --matrix: print the matrix (every cell's verdict, as Markdown) and the cells the
    /// run would take, and run nothing.
    #[arg(long, requires = "matrix")]
    list: bool,
    /// With --matrix: only this cell, by its label as --list prints it (repeatable), e.g.
    /// `close-disk-eopc-stall`.
    #[arg(long = "cell", requires = "matrix")]
    cells: Vec<String>,
    /// How long after its record the timers workload sends its output, in ms.
    #[arg(long, default_value_t = 1000)]
    timer_delay_ms: u64,
    /// Soak: ten times the faults of every scenario (hundreds in all) over millions of records.
    #[arg(long)]
    soak: bool,
    /// Multiply every scenario's fault count by this [default: 1; 10 with --soak]; e.g.
    /// `--scenario coordinator-kill --fault-scale 67` for 201 aimed coordinator kills.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    fault_scale: Option<u16>,
    /// Seed of every random choice; a failing run prints its seed to replay it.
    #[arg(long)]
    seed: Option<u64>,
    /// Run against this cluster instead of a local 3-node one (broker scenarios are skipped).
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    bootstrap: Option<String>,
    /// Replication factor of the topics [default: 3].
    #[arg(long)]
    replication: Option<i32>,
    /// The guarantee under test: exactly-once-per-partition (or exactly-once), exactly-once-per-consumer or at-least-once
    /// (whose duplicates are reported, not failures) [default: exactly-once-per-partition; every one
    /// with --matrix].
    #[arg(long)]
    guarantee: Option<Guarantee>,
    /// The instances' rebalance protocol: cooperative, consumer (KIP-848: the broker's
    /// 45 s session timeout applies, so crash scenarios run slower) or eager [default: the
    /// guarantee's default].
    #[arg(long)]
    rebalancing: Option<Rebalancing>,
    /// Keep the instances' logs here (default: a temporary directory, removed on success).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// When a scenario fails, copy the local cluster's data directories (every partition's
    /// log segments, `__transaction_state` and `__consumer_offsets` included) into its log
    /// directory, for Kafka's log dump tool: what a duplicate or a loss is read back from.
    /// Hundreds of MiB per failed scenario of a large run; off by default.
    #[arg(long)]
    keep_data_on_failure: bool,
    /// Restart a crashed broker when the plan says, even before the controller has fenced it
    /// (by default the restart waits for that, as docs/operations.md asks of a deployment).
    /// Reproduces the broker-side split transaction of docs/reliability.md; not for CI.
    #[arg(long, conflicts_with = "restart_delay_secs")]
    restart_unfenced: bool,
    /// Restart a crashed broker this many seconds after its crash, as a supervisor would
    /// (systemd's RestartSec; docs/operations.md), instead of once the controller has fenced it.
    #[arg(long)]
    restart_delay_secs: Option<u64>,
    /// The instances' transaction.timeout.ms, in seconds (default 8: a stalled instance's
    /// transaction is aborted within seconds). A longer one outlasts a coordinator's failover.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=900))]
    transaction_timeout_secs: Option<u64>,
    /// In the aimed coordinator kill after an EndTxn, SIGSTOP the other brokers from the
    /// EndTxn's release to the kill, so that the coordinator's PrepareCommit is never
    /// replicated (with --restart-unfenced: the split transaction's precondition, every time).
    #[arg(long)]
    unreplicated_prepare: bool,
    /// Who runs the copy: kafka-eos (this runtime, default), java-txn (a read-process-write
    /// loop on Kafka's Java transactional producer and consumer) or kafka-streams (Kafka
    /// Streams, exactly_once_v2). The Java subjects take --guarantee
    /// exactly-once-per-consumer (one producer per process, as theirs) and the copy
    /// workload; their jars come from Maven Central once (Java 17+ and Maven needed).
    #[arg(long, value_enum, default_value_t)]
    subject: Subject,
    /// Security settings for a cluster given with --bootstrap, applied to every client the
    /// suite creates (instances, topic creation, input producer, readers, verifier).
    #[command(flatten)]
    client: super::ClientArgs,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// One pipeline instance (started by the suite).
    #[command(hide = true)]
    Instance(InstanceArgs),
}

#[derive(clap::Args)]
struct InstanceArgs {
    #[arg(long)]
    bootstrap: String,
    #[arg(long)]
    app: String,
    #[arg(long)]
    input: String,
    #[arg(long)]
    output: String,
    #[arg(long, default_value = "exactly-once-per-partition")]
    guarantee: Guarantee,
    #[arg(long)]
    rebalancing: Option<Rebalancing>,
    /// Abort about one transaction in this many on purpose (0: never).
    #[arg(long, default_value_t = 0)]
    abort_one_in: u32,
    #[arg(long, default_value_t = 6000)]
    session_timeout_ms: u64,
    #[arg(long, default_value_t = 8000)]
    transaction_timeout_ms: u64,
    #[arg(long, default_value_t = 500)]
    status_interval_ms: u64,
    /// Run the financial-close workload (input: payments, output: revenue) with these many
    /// payments in its sequence, instead of the 1:1 copy.
    #[arg(long)]
    financial_close_payments: Option<u64>,
    /// Run the card-velocity workload (input: payments, output: merchant totals, alerts to
    /// the PostgreSQL of --sink postgres=...) instead of the 1:1 copy.
    #[arg(long, requires = "sink")]
    card_velocity: bool,
    /// Run the join workload (input: orders and shipments, output: their pairs, poison
    /// orders dead-lettered to `<output>-dlq`) instead of the 1:1 copy.
    #[arg(long)]
    join: bool,
    /// Write to a sink instead of the output topic: `postgres=<connection string>`,
    /// `redis=<url>` (with dedup) or `redis-plain=<url>` (without).
    #[arg(long)]
    sink: Option<String>,
    /// Keep the stores on disk under this directory (kafka-eos-disk).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
    /// Append every committed transaction to `<dir>/commits-<pid>.log` (the scale study).
    #[arg(long)]
    commit_log: Option<std::path::PathBuf>,
    /// The instance's id, stable across its restarts (a pod name); default: the runtime's,
    /// new for every process.
    #[arg(long)]
    instance_id: Option<String>,
    /// Static membership (KIP-345) under --instance-id.
    #[arg(long, requires = "instance_id")]
    static_membership: bool,
    /// The copy also counts every key in a store, so the instance has state to restore.
    #[arg(long)]
    keyed_state: bool,
    /// The copy also keeps every record's value in a store by its key.
    #[arg(long)]
    keyed_values: bool,
    /// The copy sends each output to its key's partition, with its input's timestamp.
    #[arg(long)]
    by_key: bool,
    /// Send each output by a wall-clock timer this long after its record (the timers
    /// workload).
    #[arg(long)]
    timer_delay_ms: Option<u64>,
    /// Standby replicas of each partition's stores on other instances.
    #[arg(long, default_value_t = 0)]
    standby_replicas: usize,
    /// A zombie (test-only faults): tasks told of partitions lost to a session expiry this
    /// long late, their commits meanwhile ending with outcomes unknown.
    #[arg(long)]
    zombie_for_ms: Option<u64>,
    /// The suite passes its client properties in a private file (--client-config).
    #[command(flatten)]
    client: super::ClientArgs,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if let Some(Sub::Instance(a)) = args.instance {
        return run_instance(a);
    }
    let mut cfg = SuiteConfig::new(std::env::current_exe()?);
    cfg.records = args.records.unwrap_or(if args.soak { 2_000_000 } else { 100_000 });
    cfg.partitions = args.partitions;
    if !args.scenarios.is_empty() {
        cfg.scenarios = args.scenarios.clone();
    }
    cfg.fault_scale = args.fault_scale.map_or(if args.soak { 10 } else { 1 }, usize::from);
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    cfg.bootstrap = args.bootstrap.filter(|b| !b.trim().is_empty());
    cfg.replication = args.replication;
    cfg.guarantee = args.guarantee.unwrap_or(Guarantee::ExactlyOncePerPartition);
    cfg.rebalancing = args.rebalancing;
    cfg.log_dir = args.log_dir;
    cfg.keep_data_on_failure = args.keep_data_on_failure;
    cfg.restart_unfenced = args.restart_unfenced;
    cfg.restart_delay = args.restart_delay_secs.map(Duration::from_secs);
    cfg.unreplicated_prepare = args.unreplicated_prepare;
    if let Some(s) = args.transaction_timeout_secs {
        cfg.transaction_timeout = Duration::from_secs(s);
    }
    cfg.subject = args.subject;
    cfg.client_properties = args.client.properties()?;
    cfg.timer_delay = Duration::from_millis(args.timer_delay_ms);
    let cells = match args.matrix.as_deref() {
        Some(tier) => {
            let tier = if tier == "ci" { Tier::Ci } else { Tier::Long };
            let picked: Vec<matrix::Cell> = matrix::runs_in(tier)
                .into_iter()
                .filter(|c| args.workloads.is_empty() || args.workloads.contains(&c.workload))
                .filter(|c| args.guarantee.is_none_or(|g| g == c.guarantee))
                .filter(|c| args.scenarios.is_empty() || args.scenarios.contains(&c.fault))
                .filter(|c| args.cells.is_empty() || args.cells.contains(&c.label()))
                .collect();
            if let Some(unknown) = args.cells.iter().find(|l| !picked.iter().any(|c| c.label() == **l)) {
                return Err(format!("--cell {unknown}: no such cell runs in tier {} (see --list)", tier.name()).into());
            }
            if args.list {
                for line in matrix::markdown() {
                    println!("{line}");
                }
                println!("\n{} cells in tier {}:", picked.len(), tier.name());
                for c in &picked {
                    println!("  {}", c.label());
                }
                return Ok(ExitCode::SUCCESS);
            }
            picked
        }
        None => {
            if args.workloads.len() > 1 {
                return Err("several --workload values need --matrix".into());
            }
            cfg.workload = args.workloads.first().copied();
            cfg.cells()
        }
    };
    println!(
        "chaos: {} records x {} partitions per scenario, {} cell(s), subject {}, workload {}, guarantee {}, rebalancing {}, seed {}{}{}",
        cfg.records,
        cfg.partitions,
        cells.len(),
        cfg.subject,
        if args.matrix.is_some() { "per cell".to_string() } else { cfg.workload.map_or("copy".into(), |w| w.to_string()) },
        if args.matrix.is_some() { "per cell" } else { cfg.guarantee.as_str() },
        cfg.rebalancing.map_or("default", |r| r.as_str()),
        cfg.seed,
        match cfg.fault_scale {
            1 => String::new(),
            k => format!(", {k}x the faults"),
        },
        match (cfg.restart_unfenced, cfg.restart_delay) {
            (true, _) => ", crashed brokers restarted before they are fenced".to_string(),
            (false, Some(d)) => format!(", crashed brokers restarted {d:?} after their crash"),
            (false, None) => String::new(),
        }
    );
    if let Some(line) = super::describe(&cfg.client_properties) {
        println!("{line}");
    }
    let started = Instant::now();
    let mut header = false;
    let report = chaos::run_cells(&cfg, &cells, &mut |p| match p {
        Progress::Message(m) => eprintln!("{m}"),
        Progress::Result(r) => print_result(r, &mut header),
    })?;
    if let Some(dir) = &report.logs {
        println!("instance logs: {}", dir.display());
    }
    println!("total elapsed: {:.0?}", Duration::from_secs(started.elapsed().as_secs()));
    println!();
    for line in report.table() {
        println!("{line}");
    }
    if !report.passed() {
        println!("FAILED (replay with --seed {})", report.seed);
    }
    println!("{}", report.summary_line());
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_result(r: &ScenarioResult, header: &mut bool) {
    if !*header {
        println!("{}", ScenarioResult::header());
        *header = true;
    }
    println!("{}", r.row());
    for line in r.anomalies.table() {
        println!("    {line}");
    }
    for n in &r.notes {
        println!("    {n}");
    }
    if let Some(e) = &r.error {
        println!("    error: {e}");
    }
}

fn run_instance(a: InstanceArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let cfg = InstanceConfig {
        bootstrap: a.bootstrap,
        application_id: a.app,
        input: a.input,
        output: a.output,
        guarantee: a.guarantee,
        rebalancing: a.rebalancing,
        abort_one_in: a.abort_one_in,
        session_timeout: Duration::from_millis(a.session_timeout_ms),
        transaction_timeout: Duration::from_millis(a.transaction_timeout_ms),
        status_interval: Duration::from_millis(a.status_interval_ms),
        financial_close_payments: a.financial_close_payments,
        card_velocity: a.card_velocity,
        join: a.join,
        sink: a.sink,
        state_dir: a.state_dir,
        commit_log: a.commit_log,
        instance_id: a.instance_id,
        static_membership: a.static_membership,
        keyed_state: a.keyed_state,
        keyed_values: a.keyed_values,
        by_key: a.by_key,
        timer_delay: a.timer_delay_ms.map(Duration::from_millis),
        standby_replicas: a.standby_replicas,
        zombie_for: a.zombie_for_ms.map(Duration::from_millis),
        client_properties: a.client.properties()?,
    };
    match chaos::run_instance(cfg) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("chaos instance: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
