//! `kafka-eos bench`: what each guarantee costs on *your* cluster.
//!
//! The benchmark suite (`cargo bench`) measures on a local one-node broker; a production
//! cluster has other round-trip times, replication and security, and the transaction cost
//! moves with all of them. This command runs the same measurement (`kafka_eos_cli::bench`, one
//! implementation for both) against any cluster: it writes an input topic, copies it with
//! the no-transaction ceiling and then with every guarantee, verifies each copy
//! (read_committed) and prints each guarantee's throughput, CPU and memory against the
//! ceiling. Its topics are named `kafka-eos-bench-*` and deleted at the end
//! (`--keep-topics` keeps them).

use std::process::ExitCode;
use std::time::Duration;

use kafka_eos_cli::bench::{copy, delete_topics, overhead_table, unique_name, CopyOptions, Input, Subject, Tuning};

/// Arguments of `kafka-eos bench`.
#[derive(clap::Args)]
pub struct Args {
    /// Bootstrap servers of the cluster to measure.
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    bootstrap: String,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Replication factor of the topics (use your production value: it changes the cost of
    /// every write, transactional or not).
    #[arg(long, default_value_t = 1)]
    replication: i32,
    /// Bytes per record value.
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// The pipelines' commit interval, in milliseconds.
    #[arg(long, default_value_t = 100)]
    commit_interval_ms: u64,
    /// Longest time each subject copies; a copy stopped by it is measured but not verified.
    #[arg(long, default_value_t = 30)]
    duration_secs: u64,
    /// Records written to the input topic (each subject copies all of them, or as many as
    /// it can within the duration).
    #[arg(long, default_value_t = 500_000)]
    records: u64,
    #[command(flatten)]
    client: super::ClientArgs,
    /// Keep the input and output topics instead of deleting them.
    #[arg(long)]
    keep_topics: bool,
    /// Measure only these subjects (repeatable): ceiling, at-least-once, exactly-once,
    /// exactly-once-per-consumer [default: all four].
    #[arg(long = "subject", value_parser = parse_subject)]
    subjects: Vec<Subject>,
    /// Exactly-once's bound on partitions in a transaction at once
    /// (`PipelineBuilder::max_concurrent_transactions`) [default: the library's, 32].
    #[arg(long)]
    max_concurrent_transactions: Option<usize>,
    /// Worker threads of the per-consumer and at-least-once pipelines
    /// (`PipelineBuilder::workers`) [default: the machine's cores].
    #[arg(long)]
    workers: Option<usize>,
}

fn parse_subject(s: &str) -> Result<Subject, String> {
    Subject::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Subject::all().iter().map(|s| s.name()).collect();
        format!("unknown subject {s:?}; one of: {}", names.join(", "))
    })
}

/// Runs the comparison; exit code 1 if a verified copy broke its guarantee.
pub fn run(a: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let props = a.client.properties()?;
    if let Some(line) = super::describe(&props) {
        eprintln!("{line}");
    }
    let topic = unique_name("kafka-eos-bench-in");
    eprintln!(
        "writing {} records of {} B to {topic} ({} partitions, replication {}) on {}",
        a.records, a.record_size, a.partitions, a.replication, a.bootstrap
    );
    let input = Input::create(&a.bootstrap, &topic, a.partitions, a.replication, a.records, a.record_size, props)?;
    let mut topics = vec![topic];
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let opts = CopyOptions {
        tuning: Tuning {
            commit_interval: Duration::from_millis(a.commit_interval_ms),
            max_records_per_transaction: 10_000,
            max_concurrent_transactions: a.max_concurrent_transactions,
            workers: a.workers,
            ..Tuning::default()
        },
        time_limit: Some(Duration::from_secs(a.duration_secs)),
        verify: true,
        hook: None,
    };
    let mut results = Vec::new();
    let mut broken = false;
    let subjects = if a.subjects.is_empty() { Subject::all().to_vec() } else { a.subjects };
    for subject in subjects {
        let output = unique_name(&format!("kafka-eos-bench-out-{}", subject.name()));
        topics.push(output.clone());
        eprintln!("copying with {} ...", subject.name());
        let outcome = if a.replication == 1 {
            copy(rt.handle(), &input, &output, subject, &opts)
        } else {
            input.create_topic(&output, a.replication).and_then(|()| copy(rt.handle(), &input, &output, subject, &opts))
        };
        match outcome {
            Ok(r) => {
                broken |= r.verified.is_some_and(|v| !v.ok);
                if r.records_copied < input.records {
                    eprintln!(
                        "  stopped after {} s with {} of {} records copied (not verified)",
                        a.duration_secs, r.records_copied, input.records
                    );
                }
                results.push(r);
            }
            Err(e) => eprintln!("  {} failed: {e}", subject.name()),
        }
    }
    if !a.keep_topics {
        delete_topics(&input.bootstrap, &input.client_properties, &topics);
    }
    println!(
        "\n{} partitions, {} B values, commit interval {} ms; throughput and CPU from partitions assigned to the last commit:",
        a.partitions, a.record_size, a.commit_interval_ms
    );
    print!("{}", overhead_table(&results));
    println!("CPU = this process's user+system time in that window; peak RSS = this process's high-water mark.");
    Ok(if broken { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
