//! `kafka-eos describe`: the topology of a pipeline this command line runs — the chaos
//! suite's workloads, the financial close among them — as `Pipeline::describe()` prints it.
//!
//! A pipeline is Rust code (its processor is compiled in), so the command line can only
//! describe the pipelines it is built with: it builds the one a `kafka-eos chaos` instance
//! would run with these options, connects to nothing, and prints it. Your own pipeline:
//! print `pipeline.describe()` (or `.mermaid()`) from your program.

use std::process::ExitCode;
use std::time::Duration;

use kafka_eos::{Guarantee, Rebalancing};
use kafka_eos_cli::chaos::{describe_instance, InstanceConfig};

/// Arguments of `kafka-eos describe`.
#[derive(clap::Args)]
pub struct Args {
    /// The workload: the chaos suite's 1:1 copy, the copy that also counts every key in a
    /// store, the copy whose outputs wall-clock timers send, or the financial close
    /// (payments → daily revenue per merchant).
    #[arg(value_enum, default_value_t)]
    workload: Workload,
    /// Print a Mermaid flowchart instead of text.
    #[arg(long)]
    mermaid: bool,
    /// The application id (group.id, transactional.id prefix).
    #[arg(long, default_value = "chaos")]
    app: String,
    /// The input topic (the financial close's payments; its merchant table is
    /// `<input>-merchants`).
    #[arg(long, default_value = "input")]
    input: String,
    /// The output topic (the financial close's revenue; its late payments go to
    /// `<output>-late`).
    #[arg(long, default_value = "output")]
    output: String,
    /// exactly-once-per-partition (or exactly-once), exactly-once-per-consumer or at-least-once.
    #[arg(long, default_value = "exactly-once-per-partition")]
    guarantee: Guarantee,
    /// cooperative, consumer or eager (default: the guarantee's).
    #[arg(long)]
    rebalancing: Option<Rebalancing>,
    /// The copy writes to a sink instead of the output topic: `postgres=<connection
    /// string>`, `redis=<url>` (with dedup) or `redis-plain=<url>` (without). Nothing is
    /// connected.
    #[arg(long)]
    sink: Option<String>,
    /// Keep the stores on disk under this directory (kafka-eos-disk).
    #[arg(long)]
    state_dir: Option<std::path::PathBuf>,
}

/// The workloads `kafka-eos chaos` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
enum Workload {
    /// Each input record copied to the output, reversed.
    #[default]
    Copy,
    /// The copy, counting every key in a store.
    KeyedCopy,
    /// The copy, each output sent by a wall-clock timer a second after its record.
    TimerCopy,
    /// Payments → daily revenue per merchant: dedup, windows, timers, a merchant table.
    FinancialClose,
}

pub fn run(a: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if a.sink.is_some() && a.workload != Workload::Copy {
        return Err("--sink replaces the copy's output topic: use it with the copy workload".into());
    }
    // Only built, never run: nothing connects to it.
    let cfg = InstanceConfig {
        rebalancing: a.rebalancing,
        transaction_timeout: Duration::from_secs(8),
        financial_close_payments: (a.workload == Workload::FinancialClose).then_some(0),
        sink: a.sink,
        state_dir: a.state_dir,
        keyed_state: a.workload == Workload::KeyedCopy,
        timer_delay: (a.workload == Workload::TimerCopy).then_some(Duration::from_secs(1)),
        ..InstanceConfig::copy("127.0.0.1:9092", &a.app, &a.input, &a.output, a.guarantee)
    };
    let topology = describe_instance(&cfg)?;
    match a.mermaid {
        true => print!("{}", topology.mermaid()),
        false => print!("{topology}"),
    }
    Ok(ExitCode::SUCCESS)
}
