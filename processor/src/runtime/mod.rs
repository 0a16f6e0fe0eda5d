//! The runtime: a consumer thread, partition tasks, and the glue between them and async code.
//!
//! ```text
//!   async caller ── Pipeline::run ──> [consumer thread] ── records, assign/revoke ──> [task thread] x N
//!        ^                                │   ^                                            │
//!        └──── Summary / Error ───────────┘   └──── control: commit offsets, fenced, fatal ┘
//! ```
//!
//! - The **consumer thread** ([`consumer`]) owns the librdkafka consumer, polls it, routes
//!   each record to the task owning its partition, and runs the rebalance callbacks. On
//!   assignment it starts the partitions' tasks and waits until their producers are
//!   initialised *before* librdkafka fetches the committed offsets; on revocation it waits,
//!   bounded by the task timeout, until the tasks have committed their batches.
//! - A task busy with a failing batch is **interrupted** ([`interrupt`]) on revocation,
//!   lost partitions and shutdown: it drops the batch by a short deadline instead of
//!   replaying it until the task timeout while the consumer thread (and the group's
//!   rebalance) waits for it.
//! - Each **task** ([`task`]) owns a producer and runs the transaction cycle
//!   ([`crate::txn`]) on its own OS thread: blocking librdkafka calls never run on an async
//!   worker thread. A transaction whose outcome is unknown is fenced and reconciled by the
//!   task itself ([`reconcile`]), without a rebalance.
//! - Deadlock freedom: tasks never wait for the consumer thread (they write to an unbounded
//!   control channel), so the consumer thread may wait for them; every wait has a timeout.

pub(crate) mod consumer;
pub(crate) mod interrupt;
pub(crate) mod limits;
mod pending;
pub(crate) mod preflight;
pub(crate) mod reconcile;
mod registry;
pub(crate) mod slots;
pub(crate) mod task;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::config::PipelineConfig;
use crate::counters::Counter;
use crate::error::{Error, Result};
use crate::health::{Health, HealthReport};
use crate::observe::TransactionHook;
use crate::partition::TopicPartition;
use crate::processor::driver::ProcessorFactory;

/// What a task tells the consumer thread.
pub(crate) enum Control {
    /// At-least-once: these next offsets are acknowledged; commit them.
    CommitOffsets(Vec<(TopicPartition, i64)>),
    /// The task's producer was fenced, or its member left the group: give its partitions up.
    Fenced { task: u64, error: String },
    /// The task dropped a batch (or replaced a failed producer in place): move its
    /// partitions back to the offsets `resume` gives (an exactly-once sink's), the others to
    /// their committed offsets, then send it [`task::TaskMsg::Rewound`].
    Rewind { task: u64, partitions: Vec<TopicPartition>, resume: task::Resume },
    /// Stop the pipeline with this error.
    Fatal(Error),
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub records_in: Counter,
    pub records_out: Counter,
    pub transactions_committed: Counter,
    pub transactions_aborted: Counter,
    pub dead_lettered: Counter,
    pub producers_fenced: Counter,
    pub rebalances: Counter,
    pub changelog_records: Counter,
    pub restored_records: Counter,
    pub duplicates_dropped: Counter,
    pub late_records: Counter,
    pub window_corrections: Counter,
    pub records_handed_back: Counter,
}

/// What a pipeline did, as counted when `run` returned (or so far, from
/// [`ShutdownHandle::summary`]). New counters may be added, so it cannot be built with a
/// struct literal outside this crate.
///
/// The counts are of batches this instance *knows* committed. A batch whose commit ended
/// in an unknown state is fenced and reconciled (see `docs/semantics.md`): counted once if
/// the committed offsets show it committed. Only if that reconcile cannot finish is the
/// producer given up and the batch not counted, although the coordinator may still have
/// committed it: then the outputs hold more than the counts say, never less.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Input records whose batch committed (replays after aborts are not counted twice).
    pub records_in: u64,
    /// Output records committed (dead-letter records included).
    pub records_out: u64,
    /// Committed transactions (at-least-once: acknowledged batches).
    pub transactions_committed: u64,
    /// Aborted transactions (at-least-once: failed batches that were re-sent).
    pub transactions_aborted: u64,
    /// Input records routed to the dead-letter topic.
    pub dead_lettered: u64,
    /// Producers given up (partitions sent back to the group): fenced by a newer owner, or
    /// an unknown outcome that could not be reconciled.
    pub producers_fenced: u64,
    /// Rebalances (assignments) this instance went through.
    pub rebalances: u64,
    /// Changelog records committed (state changes: one per key changed per transaction).
    pub changelog_records: u64,
    /// Changelog records read to restore state on assignment.
    pub restored_records: u64,
    /// Records dropped as duplicates by [`Dedup`](crate::operators::Dedup), committed.
    pub duplicates_dropped: u64,
    /// Records routed to a late-records topic by a window operator
    /// ([`TumblingWindows`](crate::operators::TumblingWindows) and the other kinds), or refused
    /// as late by a [`StreamJoin`](crate::operators::StreamJoin), committed.
    pub late_records: u64,
    /// Window results changed after their window had closed, committed: corrections (a
    /// late record within the window's retention, see `docs/state.md`) and session results
    /// retracted because a late record merged their session into an earlier one.
    pub window_corrections: u64,
    /// Input records of revoked partitions handed back uncommitted, for their next owner to
    /// read again (per-partition mode past the transaction slot bound: a batch that had
    /// begun no transaction is not committed inside the rebalance; `docs/scaling.md`).
    pub records_handed_back: u64,
}

impl Stats {
    fn summary(&self) -> Summary {
        Summary {
            records_in: self.records_in.get(),
            records_out: self.records_out.get(),
            transactions_committed: self.transactions_committed.get(),
            transactions_aborted: self.transactions_aborted.get(),
            dead_lettered: self.dead_lettered.get(),
            producers_fenced: self.producers_fenced.get(),
            rebalances: self.rebalances.get(),
            changelog_records: self.changelog_records.get(),
            restored_records: self.restored_records.get(),
            duplicates_dropped: self.duplicates_dropped.get(),
            late_records: self.late_records.get(),
            window_corrections: self.window_corrections.get(),
            records_handed_back: self.records_handed_back.get(),
        }
    }
}

/// The group metadata a transaction's offsets carry (`crate::txn`'s `offsets` module says
/// which): the consumer's current one (member id, generation or member epoch), or the group
/// id alone in per-partition mode.
pub(crate) type GroupMetadataSource =
    Box<dyn Fn() -> Option<Arc<rdkafka::consumer::ConsumerGroupMetadata>> + Send + Sync>;

/// What the consumer thread and every task share.
pub(crate) struct Shared {
    pub cfg: Arc<PipelineConfig>,
    /// Set by the consumer thread once its consumer exists. A transaction reads the
    /// metadata afresh before it sends its offsets: in per-consumer mode the generation
    /// moves on with every rebalance, incremental ones included, and offsets sent with a
    /// stale one are refused (KIP-447 checks it).
    pub group: OnceLock<GroupMetadataSource>,
    pub processor: ProcessorFactory,
    pub hooks: Vec<TransactionHook>,
    pub rt: tokio::runtime::Handle,
    pub control: std::sync::mpsc::Sender<Control>,
    pub shutdown: ShutdownHandle,
    /// Brokers in the cluster's metadata at start-up (per-partition mode's open files scale
    /// with it: [`limits`]).
    pub brokers: usize,
    /// Per-partition mode's bound on concurrent transaction cycles
    /// ([`PipelineConfig::max_concurrent_transactions`]); `None` in the other guarantees.
    pub slots: Option<Arc<slots::Slots>>,
    /// Per-partition mode's bound on running partition tasks
    /// ([`PipelineConfig::max_partition_tasks`], or what the open-file limit holds);
    /// `None`: unbounded, and always in the other guarantees.
    pub max_tasks: Option<usize>,
}

impl Shared {
    /// The consumer's current group metadata; `None` before the consumer exists or after
    /// it is gone.
    pub(crate) fn group_metadata(&self) -> Option<Arc<rdkafka::consumer::ConsumerGroupMetadata>> {
        self.group.get().and_then(|read| read())
    }
}

/// Stops a running pipeline gracefully from anywhere (cheap to clone), and reads its
/// counters and health while it runs.
#[derive(Clone)]
pub struct ShutdownHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    flag: AtomicBool,
    stats: Stats,
    health: Health,
    ops_address: OnceLock<SocketAddr>,
}

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownHandle")
            .field("shutdown", &self.is_shutdown())
            .field("summary", &self.summary())
            .finish()
    }
}

impl ShutdownHandle {
    fn new(health_threshold: Duration) -> ShutdownHandle {
        ShutdownHandle {
            inner: Arc::new(HandleInner {
                flag: AtomicBool::new(false),
                stats: Stats::default(),
                health: Health::new(health_threshold),
                ops_address: OnceLock::new(),
            }),
        }
    }

    /// Asks the pipeline to stop: every task commits its collected batch, the consumer
    /// leaves the group, and `run` returns. Idempotent.
    pub fn shutdown(&self) {
        self.inner.flag.store(true, Ordering::SeqCst);
    }

    /// Whether shutdown was requested.
    pub fn is_shutdown(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// The counters so far.
    pub fn summary(&self) -> Summary {
        self.inner.stats.summary()
    }

    /// The health report `/health` serves (assignment, last commit age per partition).
    pub fn health(&self) -> HealthReport {
        self.inner.health.report()
    }

    /// The address `/metrics` and `/health` are served on, once bound.
    pub fn ops_address(&self) -> Option<SocketAddr> {
        self.inner.ops_address.get().copied()
    }

    pub(crate) fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    pub(crate) fn health_state(&self) -> &Health {
        &self.inner.health
    }
}

/// A configured pipeline; [`run`](Pipeline::run) it.
pub struct Pipeline {
    cfg: Arc<PipelineConfig>,
    processor: ProcessorFactory,
    hooks: Vec<TransactionHook>,
    handle: ShutdownHandle,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("config", &self.cfg).finish_non_exhaustive()
    }
}

impl Pipeline {
    pub(crate) fn new((cfg, processor, hooks): (PipelineConfig, ProcessorFactory, Vec<TransactionHook>)) -> Pipeline {
        let handle = ShutdownHandle::new(cfg.health_threshold);
        Pipeline { cfg: Arc::new(cfg), processor, hooks, handle }
    }

    /// The validated configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.cfg
    }

    /// A handle that stops the pipeline and reads its counters.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Runs until the [`ShutdownHandle`] (or, with
    /// [`handle_signals`](crate::PipelineBuilder::handle_signals), SIGINT/SIGTERM) stops it,
    /// or until an unrecoverable error. Must be called from a multi-thread Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Unreachable`] and [`Error::UnknownTopics`] within the startup timeout; then
    /// whatever stopped the pipeline (see [`Error`]). Whatever the error, nothing
    /// uncommitted becomes visible, and a restart resumes from the committed offsets.
    pub async fn run(self) -> Result<Summary> {
        let application_id = self.cfg.application_id.clone();
        let result = self.run_to_end().await;
        if let Err(e) = &result {
            // Also returned; logged because the result of a spawned pipeline is easily never read.
            tracing::error!(%application_id, error = %e, "pipeline failed");
        }
        result
    }

    async fn run_to_end(self) -> Result<Summary> {
        let cfg = self.cfg.clone();
        let cluster = tokio::task::spawn_blocking(move || preflight::preflight(&cfg))
            .await
            .map_err(|e| Error::Internal(format!("preflight task: {e}")))??;

        // Dropping this future (a `select!` that lost, a cancelled task) stops the pipeline
        // as `shutdown` does: the consumer thread and the tasks commit what they collected
        // and leave the group, in the background.
        let _stop_on_drop = StopOnDrop(self.handle.clone());
        #[cfg(feature = "ops-server")]
        let ops = match self.cfg.ops_address {
            Some(addr) => {
                let (bound, task) = crate::ops::serve(addr, self.handle.clone()).await?;
                let _ = self.handle.inner.ops_address.set(bound);
                Some(task)
            }
            None => None,
        };
        #[cfg(not(feature = "ops-server"))]
        let ops: Option<tokio::task::JoinHandle<()>> = None;
        let (control_tx, control_rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            cfg: self.cfg.clone(),
            group: OnceLock::new(),
            processor: self.processor,
            hooks: self.hooks,
            rt: tokio::runtime::Handle::current(),
            control: control_tx,
            shutdown: self.handle.clone(),
            brokers: cluster.brokers,
            max_tasks: limits::task_bound(&self.cfg, cluster.brokers),
            slots: match self.cfg.guarantee {
                crate::Guarantee::ExactlyOnce => {
                    Some(Arc::new(slots::Slots::new(self.cfg.max_concurrent_transactions)))
                }
                _ => None,
            },
        });
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("kafka-eos-consumer-{}", self.cfg.application_id))
            .spawn(move || {
                let _ = done_tx.send(consumer::run(thread_shared, control_rx));
            })
            .map_err(|e| Error::Internal(format!("cannot spawn the consumer thread: {e}")))?;

        let watcher = self.cfg.handle_signals.then(|| {
            let handle = self.handle.clone();
            tokio::spawn(async move { watch_signals(handle).await })
        });
        let result = done_rx.await.map_err(|_| Error::Internal("the consumer thread panicked".into()));
        for task in watcher.into_iter().chain(ops) {
            task.abort();
        }
        result?.map(|()| self.handle.summary())
    }
}

/// Calls [`ShutdownHandle::shutdown`] when dropped: with [`Pipeline::run`]'s future.
struct StopOnDrop(ShutdownHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// Every SIGINT or SIGTERM (Ctrl-C, Ctrl-Break on Windows) asks for a graceful shutdown. A
/// second signal does not exit the process: a library must not, and a supervisor such as
/// GNU `timeout` may deliver its one SIGTERM twice (to the process and to its group). An
/// application that wants a hard stop on a second signal installs its own handler.
async fn watch_signals(handle: ShutdownHandle) {
    loop {
        if let Err(e) = next_signal().await {
            tracing::warn!(error = %e, "cannot install signal handlers; use the ShutdownHandle");
            return;
        }
        if handle.is_shutdown() {
            tracing::info!("signal received: already shutting down gracefully");
        } else {
            tracing::info!("signal received: shutting down gracefully");
            handle.shutdown();
        }
    }
}

#[cfg(unix)]
async fn next_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut int, mut term) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
    tokio::select! {
        _ = int.recv() => {},
        _ = term.recv() => {},
    }
    Ok(())
}

#[cfg(not(unix))]
async fn next_signal() -> std::io::Result<()> {
    tokio::signal::ctrl_c().await
}

/// How often the consumer thread checks for shutdown and control messages.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(50);
