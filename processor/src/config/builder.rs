//! The pipeline builder: every option with its default and trade-off, the declarations of
//! stores and output topics, and the validation that rejects unsafe combinations.

use std::time::Duration;

use super::group::{GroupSettings, Rebalancing};
use super::{Exhausted, Guarantee, PipelineConfig, ProcessorErrorPolicy, Properties};
use crate::error::{Error, Result};
use crate::observe::{TransactionEvent, TransactionHook};
use crate::processor::driver::ProcessorFactory;
use crate::processor::{AsyncFnProcessor, Context, FnProcessor, ProcessError, Processor};
use crate::record::{InputRecord, Topic};
use crate::sink::erased::SinkFactory;
use crate::sink::{Sink, SinkHandle};
use crate::state::StoreDef;
use crate::Pipeline;

/// Builds a [`Pipeline`](crate::Pipeline). Required: bootstrap servers, application id, at
/// least one input topic, a processor. Everything else has a default, given on its setter.
#[derive(Default)]
pub struct PipelineBuilder {
    bootstrap_servers: Option<String>,
    application_id: Option<String>,
    input_topics: Vec<String>,
    processor: Option<ProcessorFactory>,
    guarantee: Guarantee,
    commit_interval: Option<Duration>,
    max_records: Option<usize>,
    process_while_collecting: Option<bool>,
    skip_deleted_records: bool,
    purge_interval: Option<Duration>,
    transaction_timeout: Option<Duration>,
    task_timeout: Option<Duration>,
    slow_commit_warning: Option<Duration>,
    startup_timeout: Option<Duration>,
    shutdown_timeout: Option<Duration>,
    policy: ProcessorErrorPolicy,
    origin_header: Option<bool>,
    handle_signals: Option<bool>,
    instance_id: Option<String>,
    rebalancing: Option<Rebalancing>,
    static_membership: bool,
    workers: Option<usize>,
    max_concurrent_transactions: Option<usize>,
    max_partition_tasks: Option<usize>,
    standby_replicas: usize,
    ops_address: Option<std::net::SocketAddr>,
    health_threshold: Option<Duration>,
    statistics_interval: Option<Duration>,
    consumer_properties: Properties,
    producer_properties: Properties,
    hooks: Vec<TransactionHook>,
    stores: Vec<StoreDef>,
    state_backend: Option<crate::state::backend::BackendFactory>,
    output_topics: Vec<Topic>,
    /// Late-records topics of the window operators: (topic, the operator's store).
    late_topics: Vec<(String, String)>,
    changelog_replication: Option<i32>,
    pub(super) fault: super::fault::FaultSpec,
    sinks: Vec<SinkFactory>,
    timers: Vec<crate::timers::Timers>,
    tables: Vec<crate::table::TableDef>,
    global_tables: Vec<crate::table::TableDef>,
    advertise: Option<super::pipeline::Advertise>,
    partitioner: Option<crate::query::Partitioner>,
    /// Repartition topics: (the name given, the application id when it was declared, the
    /// topic), see [`PipelineBuilder::repartition`].
    repartitions: Vec<(String, Option<String>, Topic)>,
    /// Sinks behind an outbox topic ([`PipelineBuilder::outbox_sink`]).
    outboxes: Vec<crate::sink::outbox::OutboxSpec>,
}

impl Pipeline {
    /// Starts building a pipeline.
    pub fn builder() -> PipelineBuilder {
        PipelineBuilder::default()
    }
}

impl PipelineBuilder {
    /// Declares the pipeline's sink, a system outside Kafka its rows are written to
    /// ([`crate::sink`]): `connect` makes one connected instance per task, on the task's
    /// thread (a connection per input partition under [`Guarantee::ExactlyOncePerPartition`], one per
    /// instance otherwise). Processors write rows with the returned handle and
    /// [`Context::sink`]. At most one per pipeline. Default: none.
    pub fn sink<S, F, Fut>(&mut self, connect: F) -> SinkHandle<S::Row>
    where
        S: Sink,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<S, S::Error>> + Send + 'static,
    {
        self.sinks.push(SinkFactory::new(connect));
        SinkHandle::new()
    }

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

    /// The processor, as a sync closure: called with the record's
    /// [`Context`] (outputs, stores) and the record. It is cloned once per input partition
    /// (see [`crate::processor`]), so it must be `Clone`: capture handles, topics, codecs
    /// and `Arc`s.
    pub fn processor<F>(self, f: F) -> Self
    where
        F: FnMut(&mut Context<'_>, &InputRecord) -> Result<(), ProcessError> + Clone + Send + 'static,
    {
        let mut named = self.processor_impl(FnProcessor(f));
        named.processor = named.processor.map(|p| p.named("closure"));
        named
    }

    /// The processor, as an async closure (`async move |ctx, rec| { .. }`): it may await
    /// while holding the context. See [`crate::processor`] for how the future is driven.
    pub fn async_processor<F>(self, f: F) -> Self
    where
        F: AsyncFnMut(&mut Context<'_>, &InputRecord) -> Result<(), ProcessError> + Clone + Send + 'static,
    {
        let mut named = self.processor_impl(AsyncFnProcessor(f));
        named.processor = named.processor.map(|p| p.named("async closure"));
        named
    }

    /// The processor, as any [`Processor`] (async and stateful at once, with `init` and
    /// `close` hooks): one clone per input partition.
    pub fn processor_impl<P: Processor + Clone>(mut self, processor: P) -> Self {
        self.processor = Some(ProcessorFactory::new(processor));
        self
    }

    /// Declares an output topic and returns its handle, for
    /// [`OutputRecord::to`](crate::OutputRecord::to) and [`Context::forward`]: cloning it
    /// costs a reference count, where a topic `String` per output cost an allocation.
    /// Declared topics are listed in [`PipelineConfig::output_topics`]. Declaring the same
    /// name twice returns the same topic.
    pub fn output_topic(&mut self, name: impl AsRef<str>) -> Topic {
        let name = name.as_ref();
        if let Some(t) = self.output_topics.iter().find(|t| t.as_str() == name) {
            return t.clone();
        }
        let topic = Topic::new(name);
        self.output_topics.push(topic.clone());
        topic
    }

    /// Replication factor of the changelog topics the pipeline creates. Default: -1, the
    /// broker's `default.replication.factor` — set 3 in production clusters whose default is
    /// lower: a changelog that loses its only replica loses the state.
    pub fn changelog_replication(mut self, replication: i32) -> Self {
        self.changelog_replication = Some(replication);
        self
    }

    /// The delivery guarantee. Default [`Guarantee::ExactlyOncePerPartition`].
    pub fn guarantee(mut self, g: Guarantee) -> Self {
        self.guarantee = g;
        self
    }

    /// How often a task's batches close and commit: a batch closes one interval after the
    /// previous one closed, or, when that is already past (the first records after an idle
    /// spell), as soon as the records received are in. So a record waits at most one
    /// interval for its commit to begin, half of one on average, as under Kafka Streams'
    /// `commit.interval.ms`. Default 100 ms (Kafka Streams' default under exactly-once).
    /// Shorter lowers end-to-end latency but pays the fixed cost of a transaction (a few
    /// coordinator round trips) more often; longer raises throughput and latency.
    /// `docs/benchmarks.md` has the curve.
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

    /// Whether a batch is processed as it is collected. Default `true`: the batch's
    /// transaction begins at its first record, each record is processed and its outputs
    /// produced as it arrives, and the interval's end only waits for the last
    /// acknowledgements and commits — the producer sends while the batch fills, which raises
    /// throughput in every guarantee (`docs/benchmarks.md`). `false` collects the
    /// batch first and then runs its whole transaction, so the transaction is open only for
    /// the cycle and not the interval (a downstream `read_committed` consumer's last stable
    /// offset is held back for less time), at the cost of the producer idling while the
    /// batch fills. Replays after an abort always run in one go; per-partition mode does not
    /// stream while its [`max_concurrent_transactions`](Self::max_concurrent_transactions)
    /// bound is engaged (a slot would be held for the whole interval).
    pub fn process_while_collecting(mut self, on: bool) -> Self {
        self.process_while_collecting = Some(on);
        self
    }

    /// Whether a partition whose unprocessed records were deleted (its log now starts past
    /// the offset it resumes from: retention ran out while the pipeline was stopped or
    /// behind, or `DeleteRecords`) goes on from its log's start. Default `false`: the
    /// pipeline stops with [`Error::RecordsDeleted`](crate::Error::RecordsDeleted), naming
    /// the partition and the deleted offsets, instead of skipping them silently (librdkafka
    /// resets such a partition to its log's start). `true` skips them with a warning: input
    /// committed upstream is then lost to this pipeline. Checked in the exactly-once modes,
    /// at a partition's first record after it was assigned or rewound.
    pub fn skip_deleted_records(mut self, on: bool) -> Self {
        self.skip_deleted_records = on;
        self
    }

    /// How often the committed records of the internal topics (the [repartition
    /// topics](Self::repartition), the [outbox](Self::outbox_sink)'s) are deleted: records
    /// below the offset their reader committed are never read again, and the runtime
    /// creates these topics with no retention of their own (`retention.ms=-1`). Default
    /// 30 s (Kafka Streams' `repartition.purge.interval.ms`). With ACLs the principal
    /// needs `Delete` on them; refused, the records stay and a warning says so.
    pub fn purge_interval(mut self, d: Duration) -> Self {
        self.purge_interval = Some(d);
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

    /// A batch whose end takes longer than `d` is logged at `warn`, with its timeline: how
    /// long it collected, processed, waited for its acknowledgements, wrote its sink, sent
    /// its offsets and committed, and how it ended. A batch's end is what its records wait
    /// for after the commit interval: from the end of its collection to the end of its
    /// commit (a replay: its whole attempt). Default 1 s; [`Duration::MAX`] turns it off.
    pub fn slow_commit_warning(mut self, d: Duration) -> Self {
        self.slow_commit_warning = Some(d);
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

    /// Names this instance: in the per-consumer transactional.id
    /// (`<application-id>:<instance-id>`, [`Guarantee::ExactlyOncePerConsumer`]) and, with
    /// [`static_membership`](Self::static_membership), as the consumer's `group.instance.id`
    /// under every guarantee. Letters, digits, `.`, `_` and `-` only (a pod or host name
    /// fits). Default: a random id per process.
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// How the group moves partitions between instances. Default
    /// [`Rebalancing::Cooperative`]: only the partitions that move pause (see
    /// [`Rebalancing`] for the others and their trade-offs); under
    /// [`Guarantee::ExactlyOncePerConsumer`], [`Rebalancing::Eager`] (it accepts the others).
    pub fn rebalancing(mut self, r: Rebalancing) -> Self {
        self.rebalancing = Some(r);
        self
    }

    /// Worker tasks — each an OS thread with its own producer (and, under
    /// [`Guarantee::ExactlyOncePerConsumer`], its own transactional.id and transactions) —
    /// that share the instance's partitions under `ExactlyOncePerConsumer` and
    /// [`Guarantee::AtLeastOnce`]; a partition stays with one worker while assigned. Default:
    /// the machine's cores (`std::thread::available_parallelism`). More workers process
    /// more partitions at once and confine an abort's replay to one worker's partitions;
    /// each costs a producer (its librdkafka threads and a connection per broker) and,
    /// under exactly-once, a transaction per commit interval. Not used by
    /// [`Guarantee::ExactlyOncePerPartition`], which runs a task per partition.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// [`Guarantee::ExactlyOncePerPartition`] only: at most `n` partitions run a transaction cycle at
    /// once; the others wait, with their collected batch, for a free slot, first come first
    /// served. Default 32. The bound is *engaged* only while the instance runs more than
    /// `n` partition tasks: below that nobody ever waits, and batches are still
    /// [processed as they are collected](Self::process_while_collecting); past it, batches
    /// collect first and take a slot for their cycle alone. Why: hundreds of partitions
    /// per instance, each with its own producer, committing at once flood the brokers with
    /// small transactional requests and the machine with runnable threads until produce
    /// requests time out and batches abort and replay. The default of 32 keeps aborts near
    /// zero from 256 to 1,024 partitions on one broker sharing two cores with the pipeline,
    /// where no bound aborts most transactions (figures: `docs/scaling.md`, *Transaction
    /// slots*). Raise it for brokers with cores of their
    /// own. The trade-off: an engaged bound adds the wait for a slot to each partition's
    /// commit latency, and a smaller `n` makes each partition's transactions fewer and
    /// larger. A value at least
    /// the number of partitions an instance can hold turns the bound off. A waiting task
    /// gives up at the task timeout; when its partition is revoked (or the instance shuts
    /// down) it stops waiting at once and hands its batch, which began no transaction, back
    /// uncommitted for the next owner to read again (`Summary::records_handed_back`).
    pub fn max_concurrent_transactions(mut self, n: usize) -> Self {
        self.max_concurrent_transactions = Some(n);
        self
    }

    /// [`Guarantee::ExactlyOncePerPartition`] only: at most `n` partition tasks (each a producer, its
    /// librdkafka threads and a connection per broker) run in this instance at once. The
    /// partitions assigned past the bound stay assigned but *unserved*: paused, listed in
    /// [`HealthReport::unserved`](crate::health::HealthReport::unserved), and started as soon as a
    /// revocation makes room — so an instance given more partitions than it can hold keeps
    /// the ones it holds committing, instead of running out of open files (when every
    /// producer's connections fail at once) or threads. Default: as many as the process's
    /// open-file limit (`RLIMIT_NOFILE`) holds on this cluster, about 4 files per broker per
    /// partition (`docs/scaling.md`); no bound where the platform reports no limit. The
    /// trade-off: an unserved partition's lag grows until the group moves it (more
    /// instances) or room frees; `usize::MAX` turns the bound off, for a process whose
    /// limits were sized by hand.
    pub fn max_partition_tasks(mut self, n: usize) -> Self {
        self.max_partition_tasks = Some(n);
        self
    }

    /// How many other instances keep a warm copy of each partition's state stores (default
    /// 0): a standby replica follows the partition's changelogs while another instance owns
    /// it, so that when the partition moves to it — its owner crashed, stopped or lost it in
    /// a rebalance — it restores only the changelog's tail instead of the whole state. A
    /// copy is never read by the processor or by queries before its instance owns the
    /// partition and has read the changelog to its end.
    ///
    /// Placement: the members of the group, ordered by member id, form a ring, and a
    /// partition's copies are on the `n` members after its owner. The group's assignor picks
    /// where a partition moves, so a move lands on a copy always when `n` is at least the
    /// number of other instances (every other instance keeps every partition it does not
    /// own) and about `n / (instances - 1)` of the time otherwise. Each copy costs its
    /// instance the store's size (memory or disk) and a read of its changelog
    /// (`docs/scaling.md`, *Standby replicas*). Needs a store and a classic protocol
    /// ([`Rebalancing::Cooperative`] or [`Rebalancing::Eager`]): the placement reads the
    /// group's description, which KIP-848 groups do not give.
    pub fn standby_replicas(mut self, n: usize) -> Self {
        self.standby_replicas = n;
        self
    }

    /// Static membership (KIP-345): the [`instance_id`](Self::instance_id), which must then
    /// be set and stable across restarts (a pod or host name), becomes the consumer's
    /// `group.instance.id`. An instance restarted within the session timeout gets its own
    /// partitions back with no rebalance at all; the cost is that a *crashed* instance's
    /// partitions wait for the whole session timeout (librdkafka default 45 s) before the
    /// group moves them, since a static member does not leave the group when it stops.
    /// Default false.
    pub fn static_membership(mut self, on: bool) -> Self {
        self.static_membership = on;
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

    /// Validates for the test driver ([`crate::testing`]): the same checks, but a pipeline
    /// without bootstrap servers or an application id gets a placeholder, since the driver
    /// connects to nothing (the application id only names the changelog topics).
    pub(crate) fn validate_for_driver(mut self) -> Result<(PipelineConfig, ProcessorFactory, Vec<TransactionHook>)> {
        self.bootstrap_servers.get_or_insert_with(|| "test-driver:9092".into());
        self.application_id.get_or_insert_with(|| "test-driver".into());
        self.validate()
    }
}

impl PipelineBuilder {
    /// **Test-only fault injection; not part of the API.** Makes the `nth` transaction commit
    /// of this pipeline (counted from 1 across all its producers) end with an outcome the
    /// runtime does not know, as a commit that times out does: see [`UnknownOutcome`]. The
    /// integration tests use it to drive the fence-and-reconcile path on a real broker.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_unknown_outcome(mut self, nth: u64, fault: super::UnknownOutcome) -> Self {
        self.fault.unknown = Some((nth, fault, false));
        self
    }

    /// **Test-only fault injection; not part of the API.** As
    /// [`inject_unknown_outcome`](Self::inject_unknown_outcome), and the reconcile of that
    /// outcome fails too: the producer is given up, which drives the in-place replacement
    /// of a failed producer.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_unreconciled_outcome(mut self, nth: u64, fault: super::UnknownOutcome) -> Self {
        self.fault.unknown = Some((nth, fault, true));
        self
    }

    /// **Test-only fault injection; not part of the API.** The first `times`
    /// initialisations of the producer of input partition `partition` (per-partition
    /// exactly-once) fail, as an `init_transactions` that times out does.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_init_failures(mut self, partition: i32, times: u32) -> Self {
        self.fault.init_failures.insert(partition, times);
        self
    }

    /// **Test-only fault injection; not part of the API.** The first `times` reads of where
    /// a partition's log starts fail, as a read against stale metadata does. Drives the
    /// check that nothing past a committed offset was deleted unprocessed.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_log_start_failures(mut self, times: u32) -> Self {
        self.fault.log_start_failures = times;
        self
    }

    /// **Test-only fault injection; not part of the API.** When the group takes this
    /// instance's partitions without a revocation (its session expired), the consumer's
    /// poll thread waits `delay` before it tells their tasks, as a poll thread held up
    /// elsewhere does; the tasks run on meanwhile. Drives the fencing of a task that does
    /// not yet know its partitions are gone.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_slow_lost_relay(mut self, delay: Duration) -> Self {
        self.fault.lost_relay_delay = Some(delay);
        self
    }

    /// **Test-only fault injection; not part of the API.** With
    /// [`inject_slow_lost_relay`](Self::inject_slow_lost_relay): every other commit made
    /// while the poll thread holds back a lost assignment, the first included, ends with an
    /// outcome the runtime does not know ([`UnknownOutcome`]), so the zombie's tasks
    /// reconcile while the partitions' new owners commit, and their replays commit.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn inject_unknown_outcome_while_lost(mut self, fault: super::UnknownOutcome) -> Self {
        self.fault.unknown_while_lost = Some(fault);
        self
    }

    /// **Benchmark-only; not part of the API.** Transactional calls run on the task's own
    /// thread instead of a watchdog thread (`txn/watchdog.rs`), so a call that librdkafka
    /// never returns from (librdkafka#5456) hangs the task for good. For measuring what
    /// the watchdog's hand-over costs (`commit_latency --broker-breakdown`); never in
    /// production.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn unguarded_transactional_calls(mut self) -> Self {
        self.fault.unguarded_calls = true;
        self
    }
}

#[path = "builder_state.rs"]
mod state;

#[path = "builder_query.rs"]
mod queryable;

#[path = "builder_repartition.rs"]
mod repartition;

#[path = "builder_outbox.rs"]
mod outbox;

#[path = "validate.rs"]
mod validate;

#[cfg(test)]
#[path = "builder_tests.rs"]
mod tests;
