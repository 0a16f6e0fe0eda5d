//! A validated pipeline configuration and the client configurations made from it.

use std::time::Duration;

use rdkafka::ClientConfig;

use super::{FaultInjection, GroupSettings, Guarantee, ProcessorErrorPolicy, Properties, Rebalancing};
use crate::state::StoreDef;

/// [`PipelineBuilder::max_concurrent_transactions`](crate::PipelineBuilder::max_concurrent_transactions)'s
/// default (its measurements: `docs/scaling.md`, *Transaction slots*).
pub(crate) const DEFAULT_MAX_CONCURRENT_TRANSACTIONS: usize = 32;

/// A validated pipeline configuration. Build it with [`PipelineBuilder`](crate::PipelineBuilder).
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// `bootstrap.servers` of every client.
    pub bootstrap_servers: String,
    /// The consumer `group.id` and the prefix of every `transactional.id`.
    pub application_id: String,
    /// Topics consumed: the input topics, then the [repartition
    /// topics](crate::PipelineBuilder::repartition).
    pub input_topics: Vec<String>,
    /// The repartition topics, among the input and the output topics.
    pub repartition_topics: Vec<String>,
    /// The delivery guarantee.
    pub guarantee: Guarantee,
    /// How often a task's batches close: one interval after the previous close (`Batch::add`).
    pub commit_interval: Duration,
    /// Most input records in one transaction.
    pub max_records_per_transaction: usize,
    /// Whether a batch's first attempt is processed as the batch is collected.
    pub process_while_collecting: bool,
    /// Producer `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
    /// Longest time a batch may keep failing (or a revocation wait) before giving up.
    pub task_timeout: Duration,
    /// A batch whose end takes longer than this is logged at `warn` with its timeline
    /// ([`PipelineBuilder::slow_commit_warning`](crate::PipelineBuilder::slow_commit_warning)).
    pub slow_commit_warning: Duration,
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
    /// [`Guarantee::ExactlyOncePerPartition`]: at most this many partitions run a transaction at once,
    /// once more partition tasks than this run. See [`PipelineBuilder::max_concurrent_transactions`](crate::PipelineBuilder::max_concurrent_transactions).
    pub max_concurrent_transactions: usize,
    /// [`Guarantee::ExactlyOncePerPartition`]: at most this many partition tasks run at once (`None`: as
    /// many as the open-file limit holds). See [`PipelineBuilder::max_partition_tasks`](crate::PipelineBuilder::max_partition_tasks).
    pub max_partition_tasks: Option<usize>,
    /// Warm copies of each partition's stores kept on other instances
    /// ([`PipelineBuilder::standby_replicas`](crate::PipelineBuilder::standby_replicas)).
    pub standby_replicas: usize,
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
    /// The state stores, in declaration order
    /// ([`PipelineBuilder::store`](crate::PipelineBuilder::store)).
    pub stores: Vec<StoreDef>,
    /// The output topics declared with
    /// [`PipelineBuilder::output_topic`](crate::PipelineBuilder::output_topic) (in
    /// declaration order, without repeats), for checking at start-up that they exist.
    /// Topics a processor builds per record are not listed.
    pub output_topics: Vec<String>,
    /// The window operators' late-records topics, among the output topics: (topic, the
    /// operator's store).
    pub(crate) late_topics: Vec<(String, String)>,
    /// Replication factor of changelog topics this pipeline creates (-1: the broker's
    /// `default.replication.factor`).
    pub changelog_replication: i32,
    /// Test-only fault injection
    /// ([`PipelineBuilder::inject_unknown_outcome`](crate::PipelineBuilder::inject_unknown_outcome));
    /// `None` in every real pipeline.
    pub(crate) fault: Option<std::sync::Arc<FaultInjection>>,
    /// [`PipelineBuilder::skip_deleted_records`](crate::PipelineBuilder::skip_deleted_records).
    pub(crate) skip_deleted_records: bool,
    /// Internal topics whose records this pipeline deletes once it committed past them
    /// ([`crate::runtime::purge`]): its repartition topics; the outbox applier's input.
    pub(crate) purged_topics: Vec<String>,
    /// [`PipelineBuilder::purge_interval`](crate::PipelineBuilder::purge_interval).
    pub(crate) purge_interval: Duration,
    /// The pipeline's sink, if one was declared
    /// ([`PipelineBuilder::sink`](crate::PipelineBuilder::sink)).
    pub(crate) sink: Option<crate::sink::erased::SinkFactory>,
    /// The pipeline's sink behind an outbox topic, if declared
    /// ([`PipelineBuilder::outbox_sink`](crate::PipelineBuilder::outbox_sink)).
    pub(crate) outbox: Option<crate::sink::outbox::Outbox>,
    /// The pipeline's timers, if declared ([`crate::timers`]).
    pub(crate) timers: Option<crate::timers::Timers>,
    /// The tables, in declaration order
    /// ([`PipelineBuilder::table`](crate::PipelineBuilder::table)).
    pub tables: Vec<crate::table::TableDef>,
    /// The global tables, in declaration order
    /// ([`PipelineBuilder::global_table`](crate::PipelineBuilder::global_table)).
    pub global_tables: Vec<crate::table::TableDef>,
    /// The endpoint this instance advertises for queries of its state, if any
    /// ([`PipelineBuilder::advertised_endpoint`](crate::PipelineBuilder::advertised_endpoint)).
    pub(crate) advertise: Option<Advertise>,
    /// How the input's producers partition by key: what finds the owner of a key
    /// ([`PipelineBuilder::input_partitioner`](crate::PipelineBuilder::input_partitioner)).
    pub(crate) partitioner: crate::query::Partitioner,
}

/// The endpoint an instance advertises to the others for queries of its state
/// ([`crate::query`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Advertise {
    /// `host:port`, as given.
    Endpoint(String),
    /// The address the ops server is bound to (its port chosen at run time).
    #[cfg(feature = "ops-server")]
    OpsAddress,
}

impl PipelineConfig {
    /// How long one transactional librdkafka call waits for its answer: the transaction
    /// timeout, and at least 5 s.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.transaction_timeout.max(Duration::from_secs(5))
    }

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
            // librdkafka prefetches up to 64 MiB per consumer and 100,000 records per
            // partition by default, each fetched record costing a few hundred bytes besides
            // its payload; our own queues already hold a transaction's worth per partition.
            .set("queued.max.messages.kbytes", "16384")
            .set("queued.min.messages", "10000")
            // When its prefetch queue is over those thresholds, librdkafka postpones the
            // partition's next fetch by this long (default 1,000 ms). Our tasks drain in
            // bursts (a batch of up to `max_records_per_transaction` at once), so the queue
            // is over the thresholds often, and the default postponement leaves the
            // partition's task idle for up to a second each time (docs/benchmarks.md, *Where
            // the time goes*). Cost: a re-check every 10 ms while the queue is full, local
            // to the client.
            .set("fetch.queue.backoff.ms", "10")
            .set("statistics.interval.ms", self.statistics_interval.as_millis().to_string());
        if self.guarantee == Guarantee::AtLeastOnce {
            // At-least-once: the runtime stores each batch's offsets once its outputs are
            // acknowledged, and librdkafka commits what is stored and not yet committed every
            // commit interval. A commit that fails (sent in a rebalance's window, or while
            // the coordinator moves) is so sent again, even when no record follows.
            c.set("enable.auto.commit", "true")
                .set("auto.commit.interval.ms", self.commit_interval.as_millis().max(1).to_string());
        }
        self.group.apply(&mut c);
        self.consumer_properties.set_on(&mut c);
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
            // librdkafka queues up to 100,000 records per producer by default. A batch's
            // outputs are sent as they are produced and awaited at its end, so a deep queue
            // holds memory without sending faster: a full queue makes the task serve
            // delivery reports until there is room.
            .set("queue.buffering.max.messages", "20000")
            .set("transaction.timeout.ms", self.transaction_timeout.as_millis().to_string())
            .set("statistics.interval.ms", self.statistics_interval.as_millis().to_string());
        self.producer_properties.set_on(&mut c);
        if let Some(id) = transactional_id {
            c.set("transactional.id", id);
        }
        c
    }

    /// The transactional.id of an input partition in [`Guarantee::ExactlyOncePerPartition`]:
    /// `<application-id>:<topic>:<partition>`.
    ///
    /// # Why `:`
    /// Application ids, instance ids and Kafka topic names are all limited to letters,
    /// digits, `.`, `_` and `-`, so `:` can never occur inside a part: an id splits back into
    /// its parts in exactly one way, and two pipelines can only share an id if they share the
    /// application id (with `-`, `a-b` + topic `c` and `a` + topic `b-c` would both give
    /// `a-b-c-0`, and the two pipelines would fence each other forever). A per-partition id
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
