//! Pipeline configuration: the builder, every option's default and the trade-off behind it,
//! and the validation that rejects unsafe combinations before anything connects.
//!
//! ```no_run
//! use std::time::Duration;
//! use kafka_eos::{Guarantee, OutputRecord, Pipeline, ProcessorErrorPolicy};
//! # async fn demo() -> Result<(), kafka_eos::Error> {
//! let pipeline = Pipeline::builder()
//!     .bootstrap_servers("127.0.0.1:9092")
//!     .application_id("uppercase")
//!     .input_topic("words")
//!     .guarantee(Guarantee::ExactlyOnce)
//!     .commit_interval(Duration::from_millis(100))
//!     .on_processor_error(ProcessorErrorPolicy::retry(2).then_dead_letter("words-dlq"))
//!     .processor(|rec| {
//!         let upper = rec.value.as_deref().unwrap_or_default().to_ascii_uppercase();
//!         Ok(vec![OutputRecord::to("words-upper").value(upper)])
//!     })
//!     .build()?;
//! let summary = pipeline.run().await?;
//! println!("{summary:?}");
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;

use crate::error::{Error, Result};
use crate::observe::{TransactionEvent, TransactionHook};
use crate::processor::{ProcessResult, Processor};
use crate::record::InputRecord;
use crate::state::StoreSpec;

/// The delivery guarantee of a pipeline. Chosen per pipeline: exactly-once costs a
/// transaction per batch (a few milliseconds of coordinator round trips, amortised over
/// the commit interval); at-least-once costs nothing extra but may write an output twice
/// after a crash or rebalance. See `docs/semantics.md` for the full contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Guarantee {
    /// One transactional producer per assigned input partition, with
    /// `transactional.id = <application-id>:<topic>:<partition>`. Its `init_transactions` on
    /// assignment fences the partition's previous owner and resolves its open transaction
    /// before this instance reads the committed offset. Isolates failures per partition
    /// (one partition's abort does not touch the others); costs one librdkafka producer
    /// (threads, sockets, buffers) per partition. The default.
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

/// librdkafka properties whose values are secrets: never printed by `Debug` or logs. Any
/// key ending in `password`, `secret` or `passphrase` is treated as one too.
const SENSITIVE: &[&str] = &[
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "ssl_key",
];

/// Whether the value of librdkafka property `key` is a secret (see [`Properties`]).
pub fn is_sensitive(key: &str) -> bool {
    SENSITIVE.contains(&key) || ["password", "secret", "passphrase"].iter().any(|s| key.ends_with(s))
}

/// A librdkafka client-creation error as text, without the value of a sensitive property
/// (rust-rdkafka's `Display` of a rejected property includes its value).
pub fn client_error(e: &rdkafka::error::KafkaError) -> String {
    match e {
        rdkafka::error::KafkaError::ClientConfig(_, desc, key, _) if is_sensitive(key) => {
            format!("Client config error: {desc} {key} [redacted]")
        }
        e => e.to_string(),
    }
}

/// Properties passed to librdkafka verbatim, with secrets redacted in `Debug`: the values of
/// `sasl.password`, `ssl.key.password`, `ssl.keystore.password`, `ssl.key.pem`,
/// `sasl.oauthbearer.config`, `sasl.oauthbearer.client.secret` and the other keys
/// [`is_sensitive`] names print as `[redacted]`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Properties(BTreeMap<String, String>);

impl Properties {
    /// Sets `key` to `value`.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    /// Every property, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    /// `text` with the value of every sensitive property replaced by `[redacted]`: for
    /// quoting librdkafka's messages in errors and logs.
    pub fn redact(&self, text: &str) -> String {
        self.iter()
            .filter(|(k, v)| is_sensitive(k) && !v.is_empty())
            .fold(text.to_string(), |text, (_, v)| text.replace(v, "[redacted]"))
    }
    /// Sets every property on `cfg` (after what it has: a later value wins).
    pub fn apply(&self, cfg: &mut ClientConfig) {
        for (k, v) in self.iter() {
            cfg.set(k, v);
        }
    }

    /// Sets every property of `other`, overriding the ones set here.
    pub fn extend(&mut self, other: &Properties) {
        for (k, v) in other.iter() {
            self.set(k, v);
        }
    }

    /// Parses a client configuration file's text: one `key=value` a line, as in the
    /// `client.properties` files Kafka's own tools take (`--command-config`). Blank lines and
    /// lines starting with `#` or `!` are skipped; white space around the key and the value
    /// is trimmed; the value runs to the end of the line (it may contain `=`).
    ///
    /// # Errors
    /// [`Error::Config`] naming the line (never quoting it: it may hold a secret) when a
    /// line has no `=` or an empty key.
    pub fn parse(text: &str) -> Result<Properties> {
        let mut props = Properties::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            match line.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => props.set(k.trim(), v.trim()),
                _ => {
                    return Err(Error::Config(format!("line {} of the client configuration is not `key=value`", n + 1)))
                }
            }
        }
        Ok(props)
    }

    /// Reads and [parses](Self::parse) a client configuration file.
    ///
    /// # Errors
    /// [`Error::Config`] when the file cannot be read or a line is not `key=value`.
    pub fn from_file(path: &std::path::Path) -> Result<Properties> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read the client configuration {}: {e}", path.display())))?;
        Properties::parse(&text).map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{m} ({})", path.display())),
            e => e,
        })
    }

    /// The properties as the text [`parse`](Self::parse) reads, secrets included: for
    /// handing them to a child process through a private file, never for printing.
    pub fn to_file_text(&self) -> String {
        self.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }
}

impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter().map(|(k, v)| (k, if is_sensitive(k) { "[redacted]" } else { v }))).finish()
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
    /// Names this instance in the per-consumer transactional.id.
    pub instance_id: String,
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
    /// The state stores of a stateful processor.
    pub stores: Vec<StoreSpec>,
    /// Replication factor of changelog topics this pipeline creates (-1: the broker's
    /// `default.replication.factor`).
    pub changelog_replication: i32,
    /// Test-only fault injection ([`PipelineBuilder::inject_unknown_outcome`]); `None` in
    /// every real pipeline.
    pub(crate) fault: Option<std::sync::Arc<FaultInjection>>,
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
            .set("partition.assignment.strategy", "range,roundrobin")
            // librdkafka prefetches up to 64 MiB per consumer by default; our own channels
            // already buffer a transaction's worth per partition.
            .set("queued.max.messages.kbytes", "16384")
            .set("statistics.interval.ms", self.statistics_interval.as_millis().to_string());
        self.consumer_properties.apply(&mut c);
        c
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

    /// The transactional.id of this instance in [`Guarantee::ExactlyOncePerConsumer`]:
    /// `<application-id>:<instance-id>` (unambiguous for the reason given on
    /// [`partition_transactional_id`](Self::partition_transactional_id)).
    pub fn instance_transactional_id(&self) -> String {
        format!("{}:{}", self.application_id, self.instance_id)
    }
}

/// Builds a [`Pipeline`](crate::Pipeline). Required: bootstrap servers, application id, at
/// least one input topic, a processor. Everything else has a default, given on its setter.
#[derive(Default)]
pub struct PipelineBuilder {
    bootstrap_servers: Option<String>,
    application_id: Option<String>,
    input_topics: Vec<String>,
    processor: Option<Processor>,
    guarantee: Guarantee,
    commit_interval: Option<Duration>,
    max_records: Option<usize>,
    transaction_timeout: Option<Duration>,
    task_timeout: Option<Duration>,
    startup_timeout: Option<Duration>,
    shutdown_timeout: Option<Duration>,
    policy: ProcessorErrorPolicy,
    origin_header: Option<bool>,
    handle_signals: Option<bool>,
    instance_id: Option<String>,
    ops_address: Option<std::net::SocketAddr>,
    health_threshold: Option<Duration>,
    statistics_interval: Option<Duration>,
    consumer_properties: Properties,
    producer_properties: Properties,
    hooks: Vec<TransactionHook>,
    stores: Vec<StoreSpec>,
    changelog_replication: Option<i32>,
    fault: Option<std::sync::Arc<FaultInjection>>,
}

/// **Test-only fault injection** ([`PipelineBuilder::inject_unknown_outcome`]): how a commit
/// is made to end with an outcome unknown to the runtime. Either way the commit step
/// reports a timeout (`KafkaError::Flush(OperationTimedOut)`, retriable).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownOutcome {
    /// `commit_transaction` is called and succeeds; the task is told it timed out. The
    /// transaction is committed.
    CommittedButTimedOut,
    /// `commit_transaction` is not called (the offsets are already in the transaction, which
    /// stays open); the task is told it timed out. The transaction is never committed.
    TimedOutBeforeCommit,
}

/// The state of one [`UnknownOutcome`] injection: which commit, and how many so far.
#[doc(hidden)]
#[derive(Debug)]
pub struct FaultInjection {
    nth: u64,
    fault: UnknownOutcome,
    commits: std::sync::atomic::AtomicU64,
}

impl FaultInjection {
    /// Counts one commit; the fault to inject into it, if it is the chosen one.
    pub(crate) fn on_commit(&self) -> Option<UnknownOutcome> {
        let n = self.commits.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        (n == self.nth).then_some(self.fault)
    }
}

impl PipelineBuilder {
    /// `bootstrap.servers` for every client the pipeline creates. Required.
    pub fn bootstrap_servers(mut self, servers: impl Into<String>) -> Self {
        self.bootstrap_servers = Some(servers.into());
        self
    }

    /// The application id: the consumer `group.id`, and the prefix of every
    /// `transactional.id`. Two deployments sharing it fence each other. Required; letters,
    /// digits, `.`, `_` and `-` only.
    pub fn application_id(mut self, id: impl Into<String>) -> Self {
        self.application_id = Some(id.into());
        self
    }

    /// Adds an input topic (call again for more). It must exist.
    pub fn input_topic(mut self, topic: impl Into<String>) -> Self {
        self.input_topics.push(topic.into());
        self
    }

    /// The synchronous processor.
    pub fn processor<F>(mut self, f: F) -> Self
    where
        F: Fn(&InputRecord) -> ProcessResult + Send + Sync + 'static,
    {
        self.processor = Some(Processor::sync(f));
        self
    }

    /// The asynchronous processor; see [`Processor`] for how it is driven.
    pub fn async_processor<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(InputRecord) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ProcessResult> + Send + 'static,
    {
        self.processor = Some(Processor::from_async(f));
        self
    }

    /// The stateful processor: it also receives the [`Context`](crate::state::Context) of
    /// the record's input partition, to read and write the stores declared with
    /// [`store`](Self::store). See [`crate::state`] for how state commits with the
    /// transaction, and [`crate::operators`] for dedup, windows and aggregates.
    pub fn stateful_processor<F>(mut self, f: F) -> Self
    where
        F: Fn(&mut crate::state::Context<'_>, &InputRecord) -> ProcessResult + Send + Sync + 'static,
    {
        self.processor = Some(Processor::stateful(f));
        self
    }

    /// Declares a state store (e.g. `StoreSpec::memory("totals")`, or an operator's
    /// `.store()`). Its changelog topic `<application_id>-<name>-changelog` is created at
    /// start-up if missing: compacted, one partition per input partition. Requires a
    /// stateful processor and a single input topic.
    pub fn store(mut self, spec: StoreSpec) -> Self {
        self.stores.push(spec);
        self
    }

    /// Replication factor of the changelog topics the pipeline creates. Default: -1, the
    /// broker's `default.replication.factor` — set 3 in production clusters whose default is
    /// lower: a changelog that loses its only replica loses the state.
    pub fn changelog_replication(mut self, replication: i32) -> Self {
        self.changelog_replication = Some(replication);
        self
    }

    /// The delivery guarantee. Default [`Guarantee::ExactlyOnce`].
    pub fn guarantee(mut self, g: Guarantee) -> Self {
        self.guarantee = g;
        self
    }

    /// Longest time a batch collects records before it is processed and committed.
    /// Default 100 ms (Kafka Streams' default under exactly-once). Shorter lowers
    /// end-to-end latency but pays the fixed cost of a transaction (a few coordinator round
    /// trips) more often; longer raises throughput and latency. `docs/benchmarks.md` has
    /// the curve.
    pub fn commit_interval(mut self, d: Duration) -> Self {
        self.commit_interval = Some(d);
        self
    }

    /// Most input records in one transaction. Default 10,000. Bounds the memory a task
    /// keeps to replay its batch after an abort (records x their size) and the work lost
    /// to an abort.
    pub fn max_records_per_transaction(mut self, n: usize) -> Self {
        self.max_records = Some(n);
        self
    }

    /// The producer's `transaction.timeout.ms`: how long the coordinator lets a transaction
    /// stay open before aborting it (which fences a stalled producer). Default 10 s (Kafka
    /// Streams' default). Must exceed the commit interval; shorter fences zombies sooner,
    /// too short aborts slow but healthy batches.
    pub fn transaction_timeout(mut self, d: Duration) -> Self {
        self.transaction_timeout = Some(d);
        self
    }

    /// How long one batch may keep failing with retriable or abortable errors, and how long
    /// a revocation waits for a task to finish its transaction, before the runtime gives up
    /// (stopping the pipeline, or abandoning the task to fencing). Default 300 s (Kafka
    /// Streams' `task.timeout.ms`): long enough to ride out a broker restart.
    pub fn task_timeout(mut self, d: Duration) -> Self {
        self.task_timeout = Some(d);
        self
    }

    /// How long `run` waits for the cluster to answer its first metadata request before
    /// failing with [`Error::Unreachable`]. Default 30 s.
    pub fn startup_timeout(mut self, d: Duration) -> Self {
        self.startup_timeout = Some(d);
        self
    }

    /// How long a graceful shutdown (the shutdown handle, or the first SIGINT/SIGTERM) may
    /// take: every task commits the batch it collected, then the consumer leaves the group.
    /// Default 30 s. A task still retrying a failing batch drops it (aborted, uncommitted:
    /// the next run resumes from the committed offset) within four fifths of this; a task
    /// still busy at the deadline (a processor call or a librdkafka call that does not
    /// return) is abandoned — its open transaction is aborted by the coordinator's timeout
    /// or fenced by the next owner, so nothing half-done becomes visible — and `run` returns.
    ///
    /// Also bounds a *revocation*: a task still retrying a failing batch when its
    /// partitions are revoked drops the batch after this long at most, because the whole
    /// group's rebalance waits for it (lost partitions: at once).
    pub fn shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = Some(d);
        self
    }

    /// What to do when the processor fails. Default: 2 retries, then stop.
    pub fn on_processor_error(mut self, policy: ProcessorErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Whether every output carries the `kafka-eos.origin` header (`topic/partition/offset`
    /// of its input), which the verifier needs for an exact 1:1 check. Default true; costs
    /// about 40 bytes per output.
    pub fn origin_header(mut self, on: bool) -> Self {
        self.origin_header = Some(on);
        self
    }

    /// Whether `run` installs SIGINT/SIGTERM handlers (Ctrl-C on Windows): every signal
    /// asks for a graceful shutdown, as [`ShutdownHandle::shutdown`](crate::ShutdownHandle::shutdown)
    /// does; the process never exits on its own. Default **false**: signals belong to the
    /// application, which may stop the pipeline through the handle, or by dropping the
    /// `run` future. `true` is the one call a small service needs.
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.handle_signals = Some(on);
        self
    }

    /// Names this instance in the per-consumer transactional.id
    /// (`<application-id>:<instance-id>`). Letters, digits, `.`, `_` and `-` only (a pod or
    /// host name fits). Default: a random id per process. Only used by
    /// [`Guarantee::ExactlyOncePerConsumer`].
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Serves Prometheus `/metrics` and `/health` on this address while the pipeline runs
    /// (see [`ops`](crate::ops); feature `ops-server`); port 0 picks a free port, which
    /// [`ShutdownHandle::ops_address`](crate::ShutdownHandle::ops_address) then tells. Default:
    /// no server (metrics still go to any recorder the application installed). The first
    /// pipeline with an address installs the process's global Prometheus recorder.
    #[cfg(feature = "ops-server")]
    pub fn ops_address(mut self, addr: std::net::SocketAddr) -> Self {
        self.ops_address = Some(addr);
        self
    }

    /// How long input may wait without a commit before `/health` reports the pipeline
    /// unhealthy. Default 60 s: above a broker restart's pause, far above the commit
    /// interval. An idle partition stays healthy.
    pub fn health_threshold(mut self, d: Duration) -> Self {
        self.health_threshold = Some(d);
        self
    }

    /// librdkafka's `statistics.interval.ms`, which feeds the consumer-lag and
    /// producer-epoch metrics. Default 5 s when an ops address is set, else off (parsing
    /// statistics costs CPU on every client).
    pub fn statistics_interval(mut self, d: Duration) -> Self {
        self.statistics_interval = Some(d);
        self
    }

    /// A librdkafka consumer property, passed verbatim (e.g. `session.timeout.ms`).
    pub fn consumer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.consumer_properties.set(key, value);
        self
    }

    /// A librdkafka producer property, passed verbatim (e.g. `compression.type`).
    pub fn producer_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.producer_properties.set(key, value);
        self
    }

    /// A property for every client (consumer and producers): security settings such as
    /// `security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`.
    pub fn client_property(self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let (key, value) = (key.into(), value.into());
        self.consumer_property(key.clone(), value.clone()).producer_property(key, value)
    }

    /// [`client_property`](Self::client_property) for each of `properties`: e.g. security
    /// settings kept in one [`Properties`] for the pipeline, the
    /// [admin client](crate::admin::Client) and the test kit's verifier.
    pub fn client_properties(mut self, properties: &Properties) -> Self {
        for (k, v) in properties.iter() {
            self = self.client_property(k, v);
        }
        self
    }

    /// **Test-only fault injection; not part of the API.** Makes the `nth` transaction commit
    /// of this pipeline (counted from 1 across all its producers) end with an outcome the
    /// runtime does not know, as a commit that times out does: see [`UnknownOutcome`]. The
    /// integration tests use it to drive the fence-and-reconcile path on a real broker.
    /// Costs one branch per commit when unset.
    #[doc(hidden)]
    pub fn inject_unknown_outcome(mut self, nth: u64, fault: UnknownOutcome) -> Self {
        self.fault = Some(std::sync::Arc::new(FaultInjection { nth, fault, commits: Default::default() }));
        self
    }

    /// Calls `hook` after every transaction cycle with its timings and outcome (see
    /// [`observe`](crate::observe)). Hooks run on the partition task's thread: keep them quick.
    pub fn on_transaction<F>(mut self, hook: F) -> Self
    where
        F: Fn(&TransactionEvent) + Send + Sync + 'static,
    {
        self.hooks.push(std::sync::Arc::new(hook));
        self
    }

    /// Validates and builds. Fails with [`Error::Config`] naming the option and the fix.
    pub fn build(self) -> Result<crate::Pipeline> {
        Ok(crate::Pipeline::new(self.validate()?))
    }

    fn validate(self) -> Result<(PipelineConfig, Processor, Vec<TransactionHook>)> {
        let cfg_err = |m: String| Err(Error::Config(m));
        let Some(bootstrap_servers) = self.bootstrap_servers.filter(|s| !s.trim().is_empty()) else {
            return cfg_err("bootstrap_servers is required (e.g. \"127.0.0.1:9092\")".into());
        };
        let Some(application_id) = self.application_id else {
            return cfg_err("application_id is required: it is the group.id and the transactional.id prefix".into());
        };
        if application_id.is_empty() || !application_id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return cfg_err(format!(
                "application_id {application_id:?} must be non-empty and use only letters, digits, '.', '_' and '-'"
            ));
        }
        if self.input_topics.is_empty() {
            return cfg_err("at least one input_topic is required".into());
        }
        let Some(processor) = self.processor else {
            return cfg_err("a processor is required: call .processor(|record| ...) or .async_processor(...)".into());
        };
        let commit_interval = self.commit_interval.unwrap_or(Duration::from_millis(100));
        if commit_interval.is_zero() {
            return cfg_err("commit_interval must be positive".into());
        }
        let max_records = self.max_records.unwrap_or(10_000);
        if max_records == 0 {
            return cfg_err("max_records_per_transaction must be at least 1".into());
        }
        let mut transaction_timeout = self.transaction_timeout.unwrap_or(Duration::from_secs(10));
        if let Some(ms) = self.producer_properties.get("transaction.timeout.ms") {
            let Ok(ms) = ms.parse::<u64>() else {
                return cfg_err(format!(
                    "producer property transaction.timeout.ms={ms:?} is not a number of milliseconds"
                ));
            };
            transaction_timeout = Duration::from_millis(ms);
        }
        if self.guarantee.is_transactional() && transaction_timeout <= commit_interval {
            return cfg_err(format!(
                "transaction.timeout.ms ({}) must exceed the commit interval ({} ms), or every \
                 transaction risks being aborted by the coordinator; raise transaction_timeout \
                 or lower commit_interval",
                transaction_timeout.as_millis(),
                commit_interval.as_millis()
            ));
        }
        let c = &self.consumer_properties;
        if c.get("enable.auto.commit").is_some_and(|v| v != "false") {
            return cfg_err("consumer property enable.auto.commit must stay false: offsets are committed by the runtime, after the outputs".into());
        }
        if c.get("group.id").is_some() {
            return cfg_err("do not set group.id: the application_id is the group id".into());
        }
        if self.guarantee.is_transactional() && c.get("isolation.level").is_some_and(|v| v != "read_committed") {
            return cfg_err("consumer property isolation.level must be read_committed under exactly-once: a read_uncommitted consumer would process aborted records and fetch offsets that are not stable".into());
        }
        if c.get("partition.assignment.strategy").is_some_and(|v| v.contains("cooperative")) {
            return cfg_err(
                "cooperative-sticky assignment is not supported yet: use range or roundrobin (eager rebalancing)"
                    .into(),
            );
        }
        // The KIP-848 consumer protocol rebalances incrementally too (the broker revokes
        // only what moves); the runtime's rebalance handling assumes eager revocation.
        if c.get("group.protocol").is_some_and(|v| !v.trim().eq_ignore_ascii_case("classic")) {
            return cfg_err(
                "group.protocol=consumer (KIP-848) is not supported yet: leave group.protocol unset or classic (eager rebalancing)"
                    .into(),
            );
        }
        let p = &self.producer_properties;
        if p.get("transactional.id").is_some() {
            return cfg_err("do not set transactional.id: the runtime derives one per partition (or per instance) from the application_id".into());
        }
        if p.get("enable.idempotence").is_some_and(|v| v != "true") {
            return cfg_err("producer property enable.idempotence must stay true: without it retries can duplicate or reorder outputs".into());
        }
        if let Exhausted::DeadLetter(t) = &self.policy.then {
            if self.input_topics.contains(t) {
                return cfg_err(format!("the dead-letter topic {t:?} cannot also be an input topic"));
            }
        }
        if processor.is_stateful() || !self.stores.is_empty() {
            if !processor.is_stateful() {
                return cfg_err(
                    "stores are declared but the processor is not stateful: use .stateful_processor(|ctx, record| ...)"
                        .into(),
                );
            }
            if self.stores.is_empty() {
                return cfg_err("a stateful processor needs at least one store: declare it with .store(StoreSpec::memory(\"name\")) or an operator's .store()".into());
            }
            if self.input_topics.len() != 1 {
                return cfg_err(format!(
                    "state stores need exactly one input topic (changelog partition n belongs to input partition n), not {:?}",
                    self.input_topics
                ));
            }
            let mut names = std::collections::HashSet::new();
            for s in &self.stores {
                if s.name.is_empty() || !s.name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
                    return cfg_err(format!("store name {:?} must be non-empty and use only letters, digits, '.', '_' and '-' (it names a topic)", s.name));
                }
                if !names.insert(s.name.as_str()) {
                    return cfg_err(format!("store {:?} is declared twice", s.name));
                }
            }
        }
        let instance_id = self.instance_id.unwrap_or_else(random_instance_id);
        if instance_id.is_empty() || !instance_id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            return cfg_err(format!(
                "instance_id {instance_id:?} must be non-empty and use only letters, digits, '.', '_' and '-' (it is part of the transactional.id)"
            ));
        }
        Ok((
            PipelineConfig {
                bootstrap_servers,
                application_id,
                input_topics: self.input_topics,
                guarantee: self.guarantee,
                commit_interval,
                max_records_per_transaction: max_records,
                transaction_timeout,
                task_timeout: self.task_timeout.unwrap_or(Duration::from_secs(300)),
                startup_timeout: self.startup_timeout.unwrap_or(Duration::from_secs(30)),
                shutdown_timeout: self.shutdown_timeout.unwrap_or(Duration::from_secs(30)),
                processor_error_policy: self.policy,
                origin_header: self.origin_header.unwrap_or(true),
                handle_signals: self.handle_signals.unwrap_or(false),
                instance_id,
                statistics_interval: self.statistics_interval.unwrap_or(if self.ops_address.is_some() {
                    Duration::from_secs(5)
                } else {
                    Duration::ZERO
                }),
                ops_address: self.ops_address,
                health_threshold: self.health_threshold.unwrap_or(Duration::from_secs(60)),
                consumer_properties: self.consumer_properties,
                producer_properties: self.producer_properties,
                stores: self.stores,
                changelog_replication: self.changelog_replication.unwrap_or(-1),
                fault: self.fault,
            },
            processor,
            self.hooks,
        ))
    }
}

fn random_instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pipeline;

    fn base() -> PipelineBuilder {
        Pipeline::builder()
            .bootstrap_servers("127.0.0.1:1")
            .application_id("app")
            .input_topic("in")
            .processor(|_| Ok(vec![]))
    }

    fn err(b: PipelineBuilder) -> String {
        match b.build() {
            Err(Error::Config(m)) => m,
            Err(e) => panic!("expected a config error, got {e}"),
            Ok(_) => panic!("expected a config error, got a pipeline"),
        }
    }

    #[test]
    fn rejects_what_would_break_the_guarantee() {
        assert!(err(base().consumer_property("enable.auto.commit", "true")).contains("enable.auto.commit"));
        assert!(err(base().consumer_property("isolation.level", "read_uncommitted")).contains("read_committed"));
        assert!(err(base().transaction_timeout(Duration::from_millis(50))).contains("must exceed the commit interval"));
        assert!(err(base().producer_property("transaction.timeout.ms", "100")).contains("must exceed"));
        assert!(err(base().producer_property("transactional.id", "x")).contains("transactional.id"));
        assert!(err(base().application_id("bad id!")).contains("application_id"));
        assert!(err(base().consumer_property("partition.assignment.strategy", "cooperative-sticky"))
            .contains("cooperative"));
        assert!(err(base().consumer_property("group.protocol", "consumer")).contains("KIP-848"));
        assert!(err(base().client_property("group.protocol", "CONSUMER")).contains("KIP-848"));
        assert!(
            err(Pipeline::builder().bootstrap_servers("x").application_id("a").input_topic("t")).contains("processor")
        );
        assert!(
            err(base().on_processor_error(ProcessorErrorPolicy::stop().then_dead_letter("in"))).contains("dead-letter")
        );
        // at-least-once does not care about the transaction timeout
        assert!(base()
            .guarantee(Guarantee::AtLeastOnce)
            .transaction_timeout(Duration::from_millis(50))
            .build()
            .is_ok());
    }

    /// Item 7 of issue 10: `a-b` + topic `c` and `a` + topic `b-c` used to share
    /// `a-b-c-0`, so two pipelines fenced each other forever.
    #[test]
    fn transactional_ids_are_unambiguous() {
        let cfg = |app: &str| base().application_id(app).instance_id("c-0").build().unwrap().config().clone();
        let (ab, a) = (cfg("a-b"), cfg("a"));
        assert_ne!(ab.partition_transactional_id("c", 0), a.partition_transactional_id("b-c", 0));
        assert_eq!(ab.partition_transactional_id("c", 0), "a-b:c:0", "readable: application, topic, partition");
        assert_eq!(a.partition_transactional_id("b-c", 0), "a:b-c:0");
        // Per-consumer ids: neither across application ids nor against per-partition ids.
        assert_ne!(ab.instance_transactional_id(), a.instance_transactional_id());
        assert_eq!(cfg("a-b").instance_transactional_id(), "a-b:c-0");
        let other = base().application_id("a").instance_id("b-c-0").build().unwrap();
        assert_ne!(other.config().instance_transactional_id(), ab.instance_transactional_id());
        assert_ne!(a.instance_transactional_id(), cfg("a").partition_transactional_id("c", 0));
        // Every id splits back into its parts in one way only.
        for (id, parts) in [(ab.partition_transactional_id("c", 0), 3), (a.instance_transactional_id(), 2)] {
            assert_eq!(id.split(':').count(), parts, "{id}");
        }
        assert!(err(base().instance_id("host:8080")).contains("instance_id"));
        assert!(err(base().instance_id("")).contains("instance_id"));
    }

    #[test]
    fn debug_redacts_secrets() {
        let mut p = Properties::default();
        p.set("sasl.password", "hunter2");
        p.set("sasl.username", "alice");
        p.set("ssl.keystore.password", "ks-pass");
        p.set("sasl.oauthbearer.client.secret", "oauth-secret");
        p.set("some.future.secret", "future-secret");
        let s = format!("{p:?}");
        assert!(!s.contains("hunter2") && s.contains("alice") && s.contains("[redacted]"), "{s}");
        assert!(!s.contains("ks-pass") && !s.contains("oauth-secret") && !s.contains("future-secret"), "{s}");
        let cfg = base().client_property("sasl.password", "hunter2").build().unwrap();
        let s = format!("{:?}", cfg.config());
        assert!(!s.contains("hunter2") && s.contains("sasl.password"), "{s}");
        assert_eq!(p.redact("user alice, password hunter2"), "user alice, password [redacted]");
    }

    #[test]
    fn client_configuration_files_parse_and_round_trip() {
        let text = "# SASL over TLS\n\nsecurity.protocol = SASL_SSL\n! also a comment\nsasl.jaas.config=a=b c=d\n  sasl.password=hunter2  \n";
        let p = Properties::parse(text).unwrap();
        assert_eq!(p.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(p.get("sasl.jaas.config"), Some("a=b c=d"), "the value runs to the end of the line");
        assert_eq!(p.get("sasl.password"), Some("hunter2"));
        assert_eq!(p.iter().count(), 3);
        assert_eq!(Properties::parse(&p.to_file_text()).unwrap(), p);
        let e = Properties::parse("security.protocol=SSL\nhunter2\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && !e.contains("hunter2"), "names the line, never quotes it: {e}");
        assert!(Properties::parse("=value").is_err());
        let mut q = Properties::default();
        q.set("security.protocol", "PLAINTEXT");
        q.set("linger.ms", "1");
        q.extend(&p);
        assert_eq!((q.get("security.protocol"), q.get("linger.ms")), (Some("SASL_SSL"), Some("1")));
    }

    #[test]
    fn client_errors_redact_secrets() {
        // librdkafka refuses `ssl_key` as a string, and rust-rdkafka quotes the value.
        let create = |k: &str, v: &str| {
            ClientConfig::new().set(k, v).create::<rdkafka::consumer::BaseConsumer>().err().expect("rejected")
        };
        let e = create("ssl_key", "hunter2");
        assert!(e.to_string().contains("hunter2"), "{e}");
        let s = client_error(&e);
        assert!(!s.contains("hunter2") && s.contains("ssl_key"), "{s}");
        assert!(client_error(&create("linger.ms", "soon")).contains("soon"));
    }
}
