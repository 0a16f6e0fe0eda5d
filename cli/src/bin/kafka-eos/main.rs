//! `kafka-eos`: the command-line companion of the library.
//!
//! - `kafka-eos broker start|stop|status|install`: a local Apache Kafka cluster (KRaft,
//!   jars from Maven Central, cached) that outlives the command, for trying pipelines out;
//! - `kafka-eos verify`: proves exactly-once (or at-least-once) between an input and an
//!   output topic written by a kafka-eos pipeline; exits 1 on any violation;
//! - `kafka-eos topic create`, `produce`, `tail`, `lag` ([`data`]): topics, test input, a
//!   topic's committed records, a group's lag;
//! - `kafka-eos bench` ([`bench`]): the cost of each guarantee on your own cluster;
//! - `kafka-eos chaos` ([`chaos`]): exactly-once under injected faults;
//! - `kafka-eos describe` ([`topology`]): the topology of a workload `chaos` runs.

mod bench;
mod chaos;
mod data;
mod topology;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kafka_eos::config::Properties;
use kafka_eos_testkit::broker::{self, ClusterConfig};
use kafka_eos_testkit::verify::{verify, Expected, VerifyConfig};

#[derive(Parser)]
#[command(name = "kafka-eos", version, about = "Exactly-once stream processing on Apache Kafka")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start, stop or inspect a local Kafka cluster.
    Broker {
        #[command(subcommand)]
        action: BrokerAction,
    },
    /// Check that every input record has exactly one output (read_committed).
    Verify(VerifyArgs),
    /// Create a topic.
    Topic {
        #[command(subcommand)]
        action: data::TopicAction,
    },
    /// Write standard input's lines to a topic, one record per line.
    Produce(data::ProduceArgs),
    /// Print a topic's committed records, from the beginning to the end.
    Tail(data::TailArgs),
    /// Print a consumer group's lag (records not yet committed); optionally wait for 0.
    Lag(data::LagArgs),
    /// Measure what each guarantee costs against the no-transaction ceiling.
    Bench(bench::Args),
    /// Run pipelines under injected faults and verify exactly-once.
    Chaos(Box<chaos::Args>),
    /// Print the topology of a pipeline `chaos` runs (topics, stores, changelogs,
    /// transactional ids), as text or as a Mermaid flowchart; connects to nothing.
    Describe(topology::Args),
}

#[derive(Subcommand)]
enum BrokerAction {
    /// Start a local cluster in the background and print its bootstrap servers.
    Start {
        /// Number of combined broker+controller nodes (1 or 3).
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Where the cluster's state (PIDs, ports) and data live.
        #[arg(long, env = "KAFKA_EOS_STATE")]
        dir: Option<PathBuf>,
        #[command(flatten)]
        version: VersionArgs,
        /// The cluster's `transaction.version` feature level: 0 (classic protocol) or 2
        /// (KIP-890). Default: Kafka's own, 2 on Kafka 4.x.
        #[arg(long, env = "KAFKA_EOS_TRANSACTION_VERSION", value_parser = clap::value_parser!(u8).range(0..=2))]
        transaction_version: Option<u8>,
    },
    /// Stop the cluster started by `broker start` (by saved PID).
    Stop {
        #[arg(long, env = "KAFKA_EOS_STATE")]
        dir: Option<PathBuf>,
    },
    /// Print the running cluster's bootstrap servers, or say none is running.
    Status {
        #[arg(long, env = "KAFKA_EOS_STATE")]
        dir: Option<PathBuf>,
    },
    /// Fetch the Kafka jars into the cache (needs Maven and the network once per version).
    Install {
        #[command(flatten)]
        version: VersionArgs,
    },
}

#[derive(clap::Args)]
struct VersionArgs {
    /// Apache Kafka release to run, e.g. 4.4.0 (each version is fetched once into its own
    /// cache directory).
    #[arg(long, env = "KAFKA_EOS_KAFKA_VERSION", default_value = broker::KAFKA_VERSION)]
    kafka_version: String,
}

#[derive(clap::Args)]
struct VerifyArgs {
    /// Bootstrap servers.
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    bootstrap: String,
    /// Input topic (repeat for several).
    #[arg(long = "input", required = true)]
    inputs: Vec<String>,
    /// Output topic (repeat for several).
    #[arg(long = "output", required = true)]
    outputs: Vec<String>,
    /// Outputs expected per input record.
    #[arg(long, default_value_t = 1, conflicts_with = "max_outputs_per_input")]
    outputs_per_input: u32,
    /// For a filter or a fan-out of varying width: at most this many outputs per input record
    /// (only duplicates beyond it are found; a lost output cannot be told from a filtered one).
    #[arg(long)]
    max_outputs_per_input: Option<u32>,
    /// Only require at-least-once (duplicates allowed).
    #[arg(long)]
    at_least_once: bool,
    #[command(flatten)]
    client: ClientArgs,
    /// Longest time to read everything, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
}

/// Client properties for every client a command creates (security settings for a cluster
/// that needs them): `-X key=value` and/or `--client-config FILE`.
#[derive(clap::Args, Debug, Default)]
pub struct ClientArgs {
    /// librdkafka property for every client the command creates, `key=value` (security
    /// settings such as `security.protocol=SASL_SSL`, `sasl.mechanism=SCRAM-SHA-512`,
    /// `sasl.username=...`); repeatable; overrides the same key from --client-config.
    /// Prefer --client-config for secrets: a command line is visible to every user.
    #[arg(short = 'X', long = "property", value_name = "KEY=VALUE", value_parser = parse_kv)]
    property: Vec<(String, String)>,
    /// A Kafka `client.properties` (Java properties format: `key=value`, `#` comments, `\` continuations) passed to every
    /// client the command creates.
    #[arg(long, value_name = "FILE")]
    client_config: Option<PathBuf>,
}

impl ClientArgs {
    /// The file's properties, then the `-X` ones over them.
    pub fn properties(&self) -> Result<Properties, kafka_eos::Error> {
        let mut props = match &self.client_config {
            Some(path) => kafka_eos_cli::client_config::read(path)?,
            None => Properties::default(),
        };
        for (k, v) in &self.property {
            props.set(k, v);
        }
        Ok(props)
    }
}

/// The line that tells which client properties a command applies (secrets redacted).
pub fn describe(props: &Properties) -> Option<String> {
    props.iter().next().map(|_| format!("client properties: {props:?}"))
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    // Never quote the argument: it may be a secret.
    s.split_once('=')
        .filter(|(k, _)| !k.trim().is_empty())
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| "expected key=value".to_string())
}

fn state_dir(dir: Option<PathBuf>) -> PathBuf {
    dir.unwrap_or_else(|| broker::cache_dir().join("cluster"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kafka-eos: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match cli.command {
        Command::Broker { action } => {
            match action {
                BrokerAction::Start { nodes, dir, version, transaction_version } => {
                    let cfg = ClusterConfig {
                        kafka_version: Some(version.kafka_version),
                        transaction_version,
                        ..ClusterConfig::with_nodes(nodes)
                    };
                    let bootstrap = broker::start_detached(cfg, &state_dir(dir))?;
                    println!("{bootstrap}");
                }
                BrokerAction::Stop { dir } => {
                    broker::stop_detached(&state_dir(dir))?;
                    println!("stopped");
                }
                BrokerAction::Status { dir } => match broker::status_detached(&state_dir(dir))? {
                    Some(bootstrap) => println!("running: {bootstrap}"),
                    None => {
                        println!("not running");
                        return Ok(ExitCode::from(1));
                    }
                },
                BrokerAction::Install { version } => println!("{}", broker::install(&version.kafka_version)?.display()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Topic { action } => data::topic(action),
        Command::Produce(a) => data::produce(a),
        Command::Tail(a) => data::tail(a),
        Command::Lag(a) => data::lag(a),
        Command::Bench(a) => bench::run(a),
        Command::Chaos(a) => chaos::run(*a),
        Command::Describe(a) => topology::run(a),
        Command::Verify(a) => {
            let mut cfg = VerifyConfig::new(a.bootstrap, "", "");
            cfg.input_topics = a.inputs;
            cfg.output_topics = a.outputs;
            cfg.expected = match a.max_outputs_per_input {
                Some(most) => Expected::AtMost(most),
                None => Expected::Exactly(a.outputs_per_input),
            };
            cfg.timeout = Duration::from_secs(a.timeout_secs);
            cfg.client_properties = a.client.properties()?;
            let report = verify(&cfg)?;
            if report.order_violations > 0 || report.unexpected > 0 {
                println!("{} order violations, {} unexpected outputs", report.order_violations, report.unexpected);
            }
            println!("{report}");
            let ok = if a.at_least_once { report.is_at_least_once() } else { report.is_exactly_once() };
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}
