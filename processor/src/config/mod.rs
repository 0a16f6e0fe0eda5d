//! Pipeline configuration: the builder, every option's default and the trade-off behind it,
//! and the validation that rejects unsafe combinations before anything connects.
//!
//! ```no_run
//! use std::time::Duration;
//! use kafka_eos::{Guarantee, OutputRecord, Pipeline, ProcessorErrorPolicy};
//! # async fn demo() -> Result<(), kafka_eos::Error> {
//! let mut builder = Pipeline::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .application_id("uppercase")
//!     .input_topic("words")
//!     .guarantee(Guarantee::ExactlyOnce)
//!     .commit_interval(Duration::from_millis(100))
//!     .on_processor_error(ProcessorErrorPolicy::retry(2).then_dead_letter("words-dlq"));
//! let upper = builder.output_topic("words-upper");
//! let pipeline = builder
//!     .processor(move |ctx, rec| {
//!         let value = rec.value.as_deref().unwrap_or_default().to_ascii_uppercase();
//!         ctx.emit(OutputRecord::to(&upper).value(value));
//!         Ok(())
//!     })
//!     .build()?;
//! assert_eq!(pipeline.config().output_topics, ["words-upper"]);
//! let summary = pipeline.run().await?;
//! println!("{summary:?}");
//! # Ok(()) }
//! ```

mod builder;
mod fault;
mod group;
mod properties;

use std::time::Duration;

use rdkafka::ClientConfig;

pub use builder::PipelineBuilder;
#[doc(hidden)]
pub use fault::{FaultInjection, UnknownOutcome};
pub(crate) use group::GroupSettings;
pub use group::Rebalancing;
pub use properties::{client_error, is_sensitive, Properties};

use crate::error::{Error, Result};
use crate::state::StoreDef;

/// [`PipelineBuilder::max_concurrent_transactions`]'s default (measured in `docs/scaling.md`).
pub(crate) const DEFAULT_MAX_CONCURRENT_TRANSACTIONS: usize = 32;

/// The delivery guarantee of a pipeline. Chosen per pipeline: exactly-once costs a
/// transaction per batch (a few milliseconds of coordinator round trips, amortised over
/// the commit interval); at-least-once costs nothing extra but may write an output twice
/// after a crash or rebalance. See `docs/semantics.md` for the full contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Guarantee {
    /// One transactional producer per assigned input partition, with
    /// `transactional.id = <application-id>:<topic>:<partition>`. Its `init_transactions` on
    /// assignment fences the partition's previous owner and resolves its open transaction
    /// before this instance reads the committed offset; so its offsets name the consumer
    /// group alone, not the member's generation, and a rebalance never refuses the
    /// transactions of partitions that stay put (`docs/semantics.md`). Isolates failures
    /// per partition (one partition's abort does not touch the others); costs one
    /// librdkafka producer (threads, sockets, buffers) per partition. The default.
    #[default]
    ExactlyOnce,
    /// One transactional producer per instance, committing all its partitions' offsets in
    /// one transaction and fenced by consumer-group generation (KIP-447,
    /// `transactional.id = <application-id>:<instance-id>`). Fewer producers and
    /// transactions; an abort replays every partition's batch.
    ExactlyOncePerConsumer,
    /// An idempotent producer and no transaction: a batch's offsets are committed only after
    /// every one of its outputs is acknowledged, so nothing is lost, but a crash between the
    /// two writes the batch's outputs again.
    AtLeastOnce,
}

impl Guarantee {
    /// Whether this guarantee uses Kafka transactions.
    pub fn is_transactional(self) -> bool {
        !matches!(self, Guarantee::AtLeastOnce)
    }

    /// `exactly-once`, `exactly-once-per-consumer` or `at-least-once`.
    pub fn as_str(self) -> &'static str {
        match self {
            Guarantee::ExactlyOnce => "exactly-once",
            Guarantee::ExactlyOncePerConsumer => "exactly-once-per-consumer",
            Guarantee::AtLeastOnce => "at-least-once",
        }
    }
}

impl std::str::FromStr for Guarantee {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "exactly-once" | "eos" => Ok(Guarantee::ExactlyOnce),
            "exactly-once-per-consumer" | "eos-per-consumer" => Ok(Guarantee::ExactlyOncePerConsumer),
            "at-least-once" | "alo" => Ok(Guarantee::AtLeastOnce),
            _ => Err(Error::Config(format!(
                "unknown guarantee {s:?}; use exactly-once, exactly-once-per-consumer or at-least-once"
            ))),
        }
    }
}

/// What to do when the processor returns an error or panics on a record.
///
/// Whatever the policy, the transaction holding the failing record is aborted first, so
/// none of its outputs become visible, and the batch is replayed from the last committed
/// offset. The policy then decides the failing record's fate once it has failed
/// `retries + 1` times. Default: 2 retries (100 ms apart), then stop the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessorErrorPolicy {
    /// Replays of the batch before the record is given up on. Default 2.
    pub retries: u32,
    /// Pause before each replay. Default 100 ms.
    pub backoff: Duration,
    /// What happens to a record that failed every attempt.
    pub then: Exhausted,
}

/// The fate of a record that failed every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exhausted {
    /// Stop the pipeline with [`Error::Processor`]; nothing of the failing batch is
    /// committed, so a restart resumes at that batch. Right when every record matters
    /// (a financial close) and a human should look.
    Stop,
    /// Write the input record, unchanged, to this topic **inside the transaction** (with
    /// headers `kafka-eos.error`, `kafka-eos.origin`, `kafka-eos.attempts`) and go on. Right
    /// when one poison record must not stall the partition.
    DeadLetter(String),
}

impl ProcessorErrorPolicy {
    /// Stop at the first failure (no retries).
    pub fn stop() -> Self {
        ProcessorErrorPolicy { retries: 0, backoff: Duration::from_millis(100), then: Exhausted::Stop }
    }

    /// Retry `n` times, then stop (chain [`then_dead_letter`](Self::then_dead_letter) to
    /// dead-letter instead).
    pub fn retry(n: u32) -> Self {
        ProcessorErrorPolicy { retries: n, ..Self::stop() }
    }

    /// After the retries, route the record to `topic` instead of stopping.
    pub fn then_dead_letter(mut self, topic: impl Into<String>) -> Self {
        self.then = Exhausted::DeadLetter(topic.into());
        self
    }

    /// Sets the pause before each replay.
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }
}

impl Default for ProcessorErrorPolicy {
    fn default() -> Self {
        ProcessorErrorPolicy::retry(2)
    }
}

/// A validated pipeline configuration. Build it with [`PipelineBuilder`].
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// `bootstrap.servers` of every client.
    pub bootstrap_servers: String,
    /// The consumer `group.id` and the prefix of every `transactional.id`.
    pub application_id: String,
    /// Topics consumed.
    pub input_topics: Vec<String>,
    /// The delivery guarantee.
    pub guarantee: Guarantee,
    /// Longest time a batch collects records before its transaction commits.
    pub commit_interval: Duration,
    /// Most input records in one transaction.
    pub max_records_per_transaction: usize,
    /// Whether a batch's first attempt is processed as the batch is collected.
    pub process_while_collecting: bool,
    /// Producer `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
    /// Longest time a batch may keep failing (or a revocation wait) before giving up.
    pub task_timeout: Duration,
    /// Longest time the startup checks wait for the cluster.
    pub startup_timeout: Duration,
    /// Longest time a graceful shutdown waits for in-flight transactions.
    pub shutdown_timeout: Duration,
    /// What a processor failure leads to.
    pub processor_error_policy: ProcessorErrorPolicy,
    /// Whether outputs carry the [`ORIGIN_HEADER`](crate::record::ORIGIN_HEADER).
    pub origin_header: bool,
    /// Whether `run` stops on SIGINT/SIGTERM.
    pub handle_signals: bool,
    /// Names this instance in the per-consumer transactional.id (and, with static
    /// membership, in the group).
    pub instance_id: String,
    /// The rebalance protocol and static membership.
    pub(crate) group: GroupSettings,
    /// Worker tasks sharing the instance's partitions under
    /// [`Guarantee::ExactlyOncePerConsumer`] and [`Guarantee::AtLeastOnce`].
    pub workers: usize,
    /// [`Guarantee::ExactlyOnce`]: at most this many partitions run a transaction at once,
    /// once more partition tasks than this run. See [`PipelineBuilder::max_concurrent_transactions`](crate::PipelineBuilder::max_concurrent_transactions).
    pub max_concurrent_transactions: usize,
    /// [`Guarantee::ExactlyOnce`]: at most this many partition tasks run at once (`None`: as
    /// many as the open-file limit holds). See [`PipelineBuilder::max_partition_tasks`](crate::PipelineBuilder::max_partition_tasks).
    pub max_partition_tasks: Option<usize>,
    /// Where `/metrics` and `/health` are served, if anywhere.
    pub ops_address: Option<std::net::SocketAddr>,
    /// How long input may wait without a commit before `/health` reports unhealthy.
    pub health_threshold: Duration,
    /// librdkafka `statistics.interval.ms` (consumer lag, producer epoch metrics); zero = off.
    pub statistics_interval: Duration,
    /// Extra consumer properties, verbatim.
    pub consumer_properties: Properties,
    /// Extra producer properties, verbatim.
    pub producer_properties: Properties,
    /// The state stores, in declaration order ([`PipelineBuilder::store`]).
    pub stores: Vec<StoreDef>,
    /// The output topics declared with [`PipelineBuilder::output_topic`] (in declaration
    /// order, without repeats), for checking at start-up that they exist. Topics a
    /// processor builds per record are not listed.
    pub output_topics: Vec<String>,
    /// Replication factor of changelog topics this pipeline creates (-1: the broker's
    /// `default.replication.factor`).
    pub changelog_replication: i32,
    /// Test-only fault injection ([`PipelineBuilder::inject_unknown_outcome`]); `None` in
    /// every real pipeline.
    pub(crate) fault: Option<std::sync::Arc<FaultInjection>>,
    /// The pipeline's sink, if one was declared ([`PipelineBuilder::sink`]).
    pub(crate) sink: Option<crate::sink::erased::SinkFactory>,
    /// The pipeline's timers, if declared ([`crate::timers`]).
    pub(crate) timers: Option<crate::timers::Timers>,
    /// The tables, in declaration order ([`PipelineBuilder::table`]).
    pub tables: Vec<crate::table::TableDef>,
}

impl PipelineConfig {
    /// The consumer's librdkafka configuration: ours, then the user's verbatim properties
    /// (validation has already refused the ones that would break the guarantee).
    pub(crate) fn consumer_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("group.id", &self.application_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            // librdkafka prefetches up to 64 MiB per consumer by default; our own channels
            // already buffer a transaction's worth per partition.
            .set("queued.max.messages.kbytes", "16384")
            // When its prefetch queue is over those thresholds, librdkafka postpones the
            // partition's next fetch by this long (default 1,000 ms). Our tasks drain in
            // bursts (a batch of up to `max_records_per_transaction` at once), so the queue
            // is over the thresholds often, and every postponement left the partition's task
            // idle for up to a second: in the timeline bench (docs/benchmarks.md) per-partition
            // tasks spent 52 % of their time idle with the default, 4 % with 10 ms, and
            // exactly-once went from 118k to 200k records/s. Cost: a re-check every 10 ms
            // while the queue is full, local to the client.
            .set("fetch.queue.backoff.ms", "10")
            .set("statistics.interval.ms", self.statistics_interval.as_millis().to_string());
        self.group.apply(&mut c);
        self.consumer_properties.apply(&mut c);
        c
    }

    /// How the group moves partitions between instances.
    pub fn rebalancing(&self) -> Rebalancing {
        self.group.rebalancing
    }

    /// The consumer's `group.instance.id`, with static membership.
    pub fn group_instance_id(&self) -> Option<&str> {
        self.group.static_member.as_deref()
    }

    /// A producer's librdkafka configuration; `transactional_id` is `None` for at-least-once.
    pub(crate) fn producer_config(&self, transactional_id: Option<&str>) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap_servers)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("transaction.timeout.ms", self.transaction_timeout.as_millis().to_string())
            .set("statistics.interval.ms", self.statistics_interval.as_millis().to_string());
        self.producer_properties.apply(&mut c);
        if let Some(id) = transactional_id {
            c.set("transactional.id", id);
        }
        c
    }

    /// The transactional.id of an input partition in [`Guarantee::ExactlyOnce`]:
    /// `<application-id>:<topic>:<partition>`.
    ///
    /// # Why `:`
    /// Application ids, instance ids and Kafka topic names are all limited to letters,
    /// digits, `.`, `_` and `-`, so `:` can never occur inside a part: an id splits back into
    /// its parts in exactly one way, and two pipelines can only share an id if they share the
    /// application id (the old `-` separator let `a-b` + topic `c` and `a` + topic `b-c` both
    /// give `a-b-c-0`, and the two pipelines fenced each other forever). A per-partition id
    /// has two `:`, a [per-consumer](Self::instance_transactional_id) one has one, so the two
    /// modes never share an id either. Changing the format changes every id: see
    /// `docs/operations.md` ("Upgrading across a transactional.id change").
    pub fn partition_transactional_id(&self, topic: &str, partition: i32) -> String {
        format!("{}:{}:{}", self.application_id, topic, partition)
    }

    /// Whether input partition *n* of every input topic is one unit of state: a stateful
    /// pipeline (stores or timers) over several input topics, e.g. the two sides of a
    /// stream–stream join. One task then owns them together (per-partition mode: one
    /// producer and transactional.id for partition *n* of all inputs; otherwise one worker),
    /// and validation has required a range assignor, which puts them on one instance.
    pub(crate) fn co_partitioned(&self) -> bool {
        self.input_topics.len() > 1 && (!self.stores.is_empty() || self.timers.is_some())
    }

    /// What groups input partitions into one per-partition task: the partition itself, or,
    /// [co-partitioned](Self::co_partitioned), its number under the first input topic.
    pub(crate) fn task_of(&self, topic: &str, partition: i32) -> (String, i32) {
        let topic = if self.co_partitioned() { &self.input_topics[0] } else { topic };
        (topic.to_string(), partition)
    }

    /// The transactional.id of this instance in [`Guarantee::ExactlyOncePerConsumer`]:
    /// `<application-id>:<instance-id>` (unambiguous for the reason given on
    /// [`partition_transactional_id`](Self::partition_transactional_id)).
    pub fn instance_transactional_id(&self) -> String {
        format!("{}:{}", self.application_id, self.instance_id)
    }

    /// The transactional.id of worker `k` of this instance in
    /// [`Guarantee::ExactlyOncePerConsumer`]: the [instance's](Self::instance_transactional_id)
    /// for worker 0, `<application-id>:<instance-id>#<k>` for the others (`#` never occurs
    /// in an instance id, and there is still one `:`).
    pub fn worker_transactional_id(&self, k: usize) -> String {
        match k {
            0 => self.instance_transactional_id(),
            _ => format!("{}#{k}", self.instance_transactional_id()),
        }
    }
}
