//! The data subcommands: what a user trying a pipeline needs around it.
//!
//! - `kafka-eos topic create NAME --partitions N` (idempotent for the same partition count);
//! - `kafka-eos produce TOPIC`: one record per line of standard input, `key<TAB>value` with
//!   `--key-separator`, a tombstone for an empty value with `--tombstones`;
//! - `kafka-eos tail TOPIC`: the committed records (read_committed) from the beginning to
//!   the end, one `partition/offset key value` line each;
//! - `kafka-eos lag --group G --topic T`: what the group has not committed yet; `--wait`
//!   waits until it is 0.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kafka_eos::admin::Client;
use kafka_eos::OutputRecord;
use kafka_eos_testkit::admin::ClientExt;
use kafka_eos_testkit::read::{describe, read_to_end};
use kafka_eos_testkit::write::Writer;

use super::ClientArgs;

/// Bootstrap servers and client properties, shared by every data subcommand.
#[derive(clap::Args)]
pub struct Cluster {
    /// Bootstrap servers.
    #[arg(long, env = "KAFKA_BOOTSTRAP")]
    bootstrap: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Cluster {
    fn client(&self) -> Result<Client, kafka_eos::Error> {
        Ok(Client::new(&self.bootstrap).properties(self.client.properties()?))
    }
}

/// `kafka-eos topic ...`
#[derive(clap::Subcommand)]
pub enum TopicAction {
    /// Create a topic (an existing one with the same partition count is accepted).
    Create {
        /// Topic name.
        name: String,
        /// Partitions.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Replication factor (-1: the broker's default).
        #[arg(long, default_value_t = -1)]
        replication: i32,
        /// Topic config, `key=value` (repeatable), e.g. `cleanup.policy=compact`.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = super::parse_kv)]
        configs: Vec<(String, String)>,
        #[command(flatten)]
        cluster: Cluster,
    },
}

/// `kafka-eos produce`
#[derive(clap::Args)]
pub struct ProduceArgs {
    /// Topic to write to.
    topic: String,
    /// Split each line into key and value at the first occurrence of this string (no
    /// key without it).
    #[arg(long)]
    key_separator: Option<String>,
    /// Write an empty value as a tombstone (a null value: a delete on a compacted topic).
    #[arg(long)]
    tombstones: bool,
    /// Partition for every record (default: by key).
    #[arg(long)]
    partition: Option<i32>,
    /// Header for every record, `key=value` (repeatable).
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = super::parse_kv)]
    headers: Vec<(String, String)>,
    #[command(flatten)]
    cluster: Cluster,
}

/// `kafka-eos tail`
#[derive(clap::Args)]
pub struct TailArgs {
    /// Topic to read.
    topic: String,
    /// Stop after this many records.
    #[arg(long)]
    max: Option<usize>,
    /// Longest time to read to the end, in seconds.
    #[arg(long, default_value_t = 60)]
    timeout_secs: u64,
    #[command(flatten)]
    cluster: Cluster,
}

/// `kafka-eos lag`
#[derive(clap::Args)]
pub struct LagArgs {
    /// Consumer group (a pipeline's application id).
    #[arg(long)]
    group: String,
    /// Input topic of the group (repeatable).
    #[arg(long = "topic", required = true)]
    topics: Vec<String>,
    /// Wait up to this many seconds for the lag to reach 0 (exit 1 if it does not).
    #[arg(long)]
    wait: Option<u64>,
    #[command(flatten)]
    cluster: Cluster,
}

type Outcome = Result<ExitCode, Box<dyn std::error::Error>>;

/// `kafka-eos topic create`: prints `created NAME (N partitions)`.
pub fn topic(action: TopicAction) -> Outcome {
    let TopicAction::Create { name, partitions, replication, configs, cluster } = action;
    let configs: Vec<(&str, &str)> = configs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    cluster.client()?.create_topic_with(&name, partitions, replication, &configs)?;
    println!("created {name} ({partitions} partitions)");
    Ok(ExitCode::SUCCESS)
}

/// `kafka-eos produce`: prints `produced N records to TOPIC`.
pub fn produce(a: ProduceArgs) -> Outcome {
    let writer = Writer::new(&a.cluster.client()?)?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (key, value) = match &a.key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.to_string()), v.to_string()),
                None => (None, line),
            },
            None => (None, line),
        };
        let mut rec = OutputRecord::to(a.topic.as_str());
        rec.partition = a.partition;
        rec.key = key.map(String::into_bytes);
        rec.value = (!(a.tombstones && value.is_empty())).then(|| value.into_bytes());
        rec.headers = a.headers.iter().map(|(k, v)| (k.clone(), Some(v.clone().into_bytes()))).collect();
        writer.send(&rec)?;
    }
    let sent = writer.flush_all_delivered(Duration::from_secs(60))?;
    println!("produced {sent} records to {}", a.topic);
    Ok(ExitCode::SUCCESS)
}

/// `kafka-eos tail`: one line per committed record, then `N records`.
pub fn tail(a: TailArgs) -> Outcome {
    let client = a.cluster.client()?;
    let mut lines = Vec::new();
    read_to_end(&client, &a.topic, Instant::now() + Duration::from_secs(a.timeout_secs), |m| {
        if a.max.is_none_or(|max| lines.len() < max) {
            lines.push(((rdkafka::Message::partition(m), rdkafka::Message::offset(m)), describe(m)));
        }
    })?;
    lines.sort();
    for (_, line) in &lines {
        println!("{line}");
    }
    println!("{} records", lines.len());
    Ok(ExitCode::SUCCESS)
}

/// `kafka-eos lag`: prints `lag N`; with `--wait`, exit 1 if it is not 0 in time.
pub fn lag(a: LagArgs) -> Outcome {
    let client = a.cluster.client()?;
    if let Some(secs) = a.wait {
        if let Err(e) = client.wait_for_catch_up(&a.group, &a.topics, Duration::from_secs(secs)) {
            println!("{e}");
            return Ok(ExitCode::from(1));
        }
    }
    println!("lag {}", client.group_lag(&a.group, &a.topics)?);
    Ok(ExitCode::SUCCESS)
}
