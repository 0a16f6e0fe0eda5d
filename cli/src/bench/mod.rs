//! Measuring what each guarantee costs: the one implementation behind `cargo bench`
//! (`benches/batch_throughput/`, `benches/commit_latency.rs`) and `kafka-eos bench`.
//!
//! # What is measured
//!
//! A *copy* reads a pre-produced input topic and writes every record, unchanged, to an
//! output topic (same key, value and partition, plus the `kafka-eos.origin` header the
//! verifier joins on). The subject doing the copy is either a kafka-eos [`Pipeline`](kafka_eos::Pipeline) under
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
//!   [`Guarantee::ExactlyOncePerPartition`]) runs in the assignment callback and so falls inside it,
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

pub mod broker_log;
mod copy;
pub mod latency_guard;
mod measure;
mod table;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use kafka_eos::config::Properties;
use kafka_eos::observe::TransactionEvent;
use kafka_eos::Guarantee;
use kafka_eos::Result;
use kafka_eos_testkit::admin::ClientExt;

pub use copy::{check, copy, delete_topics};
pub use measure::*;
pub use table::{fmt_opt, median, overhead_table, parse_producer_performance, table};

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
    /// The per-partition exactly-once pipeline through a repartition topic: each record is
    /// sent to the topic by its key, and its copy is sent from there (a second batch, a
    /// second transaction): what one hop costs.
    Repartition,
}

impl Subject {
    /// `ceiling`, `exactly-once`, `exactly-once-per-consumer` or `at-least-once`. The
    /// per-partition mode keeps its short name `exactly-once` here: the benches' tables,
    /// `benches/baseline.json` and `docs/benchmarks.md` name their rows by it.
    pub fn name(self) -> &'static str {
        match self {
            Subject::Ceiling => "ceiling",
            Subject::Pipeline(Guarantee::ExactlyOncePerPartition) => "exactly-once",
            Subject::Pipeline(g) => g.as_str(),
            Subject::Stateful(Guarantee::ExactlyOncePerPartition) => "exactly-once+state",
            Subject::Stateful(Guarantee::ExactlyOncePerConsumer) => "exactly-once-per-consumer+state",
            Subject::Stateful(Guarantee::AtLeastOnce) => "at-least-once+state",
            Subject::Repartition => "exactly-once+repartition",
        }
    }

    /// The subject [`name`](Self::name) names.
    pub fn from_name(name: &str) -> Option<Subject> {
        match name {
            "ceiling" => return Some(Subject::Ceiling),
            "exactly-once+repartition" => return Some(Subject::Repartition),
            _ => {}
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
            Subject::Pipeline(Guarantee::ExactlyOncePerPartition),
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
    /// [`PipelineBuilder::max_concurrent_transactions`](kafka_eos::PipelineBuilder::max_concurrent_transactions).
    pub max_concurrent_transactions: Option<usize>,
    /// [`PipelineBuilder::workers`](kafka_eos::PipelineBuilder::workers); `None`: its default.
    pub workers: Option<usize>,
    /// [`PipelineBuilder::process_while_collecting`](kafka_eos::PipelineBuilder::process_while_collecting).
    /// Default `true`.
    pub process_while_collecting: bool,
    /// Transactional calls without their watchdog (`PipelineBuilder::unguarded_transactional_calls`,
    /// benchmark-only): to measure the watchdog's cost. Default `false`.
    pub unguarded_calls: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            commit_interval: Duration::from_millis(100),
            max_records_per_transaction: 10_000,
            max_concurrent_transactions: None,
            workers: None,
            process_while_collecting: true,
            unguarded_calls: false,
        }
    }
}

/// What the verifier found, against what the guarantee promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
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

/// A `read_committed` consumer of every partition of `topic` from the beginning, assigned
/// (no group join), under a group named after `prefix` that never commits. A fetch waits at
/// most 10 ms for data (librdkafka's default is 500 ms), so the reader adds little to the
/// latency it measures even if the broker did not answer a waiting fetch as soon as the
/// last stable offset moves.
pub fn output_reader(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    prefix: &str,
) -> std::result::Result<rdkafka::consumer::BaseConsumer, String> {
    use rdkafka::consumer::Consumer;
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique_name(prefix))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        .set("log_level", "3")
        .create()
        .map_err(|e| format!("output reader: {e}"))?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| format!("assigning the output: {e}"))?;
    Ok(consumer)
}

/// A name no earlier run uses: `<prefix>-<pid>-<time>`.
pub fn unique_name(prefix: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("{prefix}-{}-{:x}", std::process::id(), now.as_micros() & 0x00ff_ffff_ffff)
}
