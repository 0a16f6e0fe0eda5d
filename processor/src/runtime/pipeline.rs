//! A configured pipeline and its run: preflight, the ops server, the endpoints thread of
//! queryable state, the consumer thread, the signal watcher, and the stop when its future
//! is dropped.

use std::sync::{Arc, OnceLock};

use super::shared::Shared;
use super::shutdown::ShutdownHandle;
use super::stats::Summary;
use super::{consumer, limits, preflight, slots};
use crate::config::pipeline::Advertise;
use crate::config::{PipelineConfig, TopologyDescription};
use crate::error::{Error, Result};
use crate::observe::TransactionHook;
use crate::processor::driver::ProcessorFactory;
use crate::query::StateQuery;

/// A configured pipeline; [`run`](Pipeline::run) it.
pub struct Pipeline {
    cfg: Arc<PipelineConfig>,
    processor: ProcessorFactory,
    hooks: Vec<TransactionHook>,
    handle: ShutdownHandle,
    query: StateQuery,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("config", &self.cfg).finish_non_exhaustive()
    }
}

impl Pipeline {
    pub(crate) fn new((cfg, processor, hooks): (PipelineConfig, ProcessorFactory, Vec<TransactionHook>)) -> Pipeline {
        let handle = ShutdownHandle::new(cfg.health_threshold);
        let cfg = Arc::new(cfg);
        let query = StateQuery::new(cfg.clone(), handle.clone());
        Pipeline { cfg, processor, hooks, handle, query }
    }

    /// The validated configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.cfg
    }

    /// The pipeline's topology — input topics, processor, stores with their changelog
    /// topics and backends, tables, output, late-records and dead-letter topics, sink,
    /// guarantee and transactional ids — to print (`Display`) or draw
    /// ([`mermaid`](TopologyDescription::mermaid)). Connects to nothing.
    pub fn describe(&self) -> TopologyDescription {
        TopologyDescription::of(&self.cfg, self.processor.name())
    }

    /// The ACLs the pipeline's principal needs on a cluster with an authorizer: every topic
    /// it reads, writes, creates or purges, its consumer group and its transactional ids
    /// ([`crate::acl`]; [`Acl::kafka_acls_command`](crate::acl::Acl::kafka_acls_command)
    /// prints the command that grants one). Connects to nothing.
    pub fn acls(&self) -> Vec<crate::acl::Acl> {
        crate::config::acls::required(&self.cfg)
    }

    /// A handle that stops the pipeline and reads its counters.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// A handle that reads the committed state of the pipeline's stores while it runs, and
    /// finds the instance that owns a key ([`crate::query`]). Taking one makes the pipeline
    /// restore a partition's stores as soon as the partition is assigned, so that a
    /// partition without new input answers too.
    pub fn state_query(&self) -> StateQuery {
        self.query.want();
        self.query.clone()
    }

    /// Runs until the [`ShutdownHandle`] (or, with
    /// [`handle_signals`](crate::PipelineBuilder::handle_signals), SIGINT/SIGTERM) stops it,
    /// or until an unrecoverable error. Must be called from a multi-thread Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Unreachable`], [`Error::UnknownTopics`] and [`Error::NotAuthorized`] (a
    /// topic ACL the brokers say the principal lacks) within the startup timeout; then
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
        let applier = self.start_outbox()?;
        self.query.started(cluster.input_partitions);
        let _stop_queries = StopQueries(self.query.clone());
        #[cfg(feature = "ops-server")]
        let ops = match self.cfg.ops_address {
            Some(addr) => {
                let (bound, task) = crate::ops::serve(addr, self.handle.clone(), self.query.clone()).await?;
                let _ = self.handle.inner.ops_address.set(bound);
                Some(task)
            }
            None => None,
        };
        #[cfg(not(feature = "ops-server"))]
        let ops: Option<tokio::task::JoinHandle<()>> = None;
        if let Err(e) = self.advertise().await {
            if let Some(task) = ops {
                task.abort();
            }
            return Err(e);
        }
        // The global tables are read whole before the group is joined: no partition is
        // held while its records cannot be processed yet.
        let global = match self.cfg.global_tables.is_empty() {
            true => Ok(Some(None)),
            false => {
                let handle = self.handle.clone();
                let stopping = Box::new(move || handle.is_shutdown());
                crate::table::global_reader::start(self.cfg.clone(), stopping).await.map(|g| g.map(Some))
            }
        };
        let global = match global {
            Ok(Some(global)) => global,
            // Shut down while reading them (`None`), or failed.
            ended => {
                if let Some(task) = ops {
                    task.abort();
                }
                return ended.map(|_| self.handle.summary());
            }
        };
        let _stop_reader = StopReader(global.clone());
        let standbys = self.standbys()?;
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
            input_partitions: cluster.input_partitions,
            max_tasks: limits::task_bound(&self.cfg, cluster.brokers),
            queries: self.query.registry(),
            slots: match self.cfg.guarantee {
                crate::Guarantee::ExactlyOncePerPartition => {
                    Some(Arc::new(slots::Slots::new(self.cfg.max_concurrent_transactions)))
                }
                _ => None,
            },
            global,
            standbys,
            offsets_reader: std::sync::Mutex::new(None),
            purger: super::purge::Purger::start(&self.cfg),
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
        let summary = result?.map(|()| self.handle.summary())?;
        match applier {
            Some(applier) => applier.finish().await.map(|()| summary),
            None => Ok(summary),
        }
    }
}

impl Pipeline {
    /// An outbox sink: starts its applier ([`crate::sink::outbox`]), which stops this
    /// pipeline if it fails, and is stopped with it.
    fn start_outbox(&self) -> Result<Option<OutboxApplier>> {
        let Some(outbox) = &self.cfg.outbox else { return Ok(None) };
        let applier = Pipeline::new((applier_config(&self.cfg, outbox), outbox.spec().applier.clone(), Vec::new()));
        let handle = applier.shutdown_handle();
        let main = self.handle.clone();
        let join = tokio::spawn(async move {
            let ended = applier.run().await.map_err(crate::sink::outbox::refusal_as_config);
            if ended.is_err() {
                main.shutdown();
            }
            ended
        });
        tracing::info!(topic = %outbox.topic, "outbox applier started");
        Ok(Some(OutboxApplier { handle, join: Some(join) }))
    }

    /// Standby replicas: starts the thread that keeps this instance's copies, if the
    /// pipeline has any. It ends with the pipeline.
    fn standbys(&self) -> Result<Option<Arc<crate::state::standby::Standbys>>> {
        if self.cfg.standby_replicas == 0 || self.cfg.stores.is_empty() {
            return Ok(None);
        }
        let standbys = crate::state::standby::Standbys::new(self.cfg.clone());
        let shutdown = self.handle.clone();
        let stopping = Box::new(move || shutdown.is_shutdown());
        let stats = self.handle.clone();
        let applied = Box::new(move |n| stats.stats().standby_records.add(n));
        crate::state::standby::follower::start(standbys.clone(), stopping, applied)?;
        Ok(Some(standbys))
    }

    /// Queryable state: starts advertising this instance's endpoint and reading the others'
    /// ([`crate::query`]), if it advertises one. The ops address is known once bound.
    async fn advertise(&self) -> Result<()> {
        let endpoint = match &self.cfg.advertise {
            None => return Ok(()),
            Some(Advertise::Endpoint(endpoint)) => endpoint.clone(),
            #[cfg(feature = "ops-server")]
            Some(Advertise::OpsAddress) => match self.handle.ops_address() {
                Some(bound) => bound.to_string(),
                None => return Err(Error::Internal("the ops address to advertise is not bound".into())),
            },
        };
        tracing::info!(%endpoint, "advertising this instance's endpoint for queries of its state");
        self.query.advertise(endpoint.clone());
        let (assignment, input) = (self.handle.clone(), self.cfg.input_topics[0].clone());
        let assigned = Box::new(move || assignment.health_state().assigned_partitions(&input));
        let shutdown = self.handle.clone();
        let stopping = Box::new(move || shutdown.is_shutdown());
        crate::query::endpoints::start(self.cfg.clone(), endpoint, self.query.adverts(), assigned, stopping).await
    }
}

/// The outbox applier's configuration: `cfg`'s cluster, client properties, timeouts, group
/// protocol and error policy, reading the outbox at-least-once into the sink (whose stored
/// offsets make it exactly once), with no state, tables, outputs or ops server.
fn applier_config(cfg: &PipelineConfig, outbox: &crate::sink::outbox::Outbox) -> PipelineConfig {
    let topic = outbox.topic.to_string();
    PipelineConfig {
        application_id: topic.clone(),
        input_topics: vec![topic.clone()],
        repartition_topics: Vec::new(),
        // Below the offsets the sink stored, the applier never reads the outbox again.
        purged_topics: vec![topic],
        guarantee: crate::Guarantee::AtLeastOnce,
        handle_signals: false,
        standby_replicas: 0,
        ops_address: None,
        stores: Vec::new(),
        output_topics: Vec::new(),
        late_topics: Vec::new(),
        fault: None,
        sink: Some(outbox.spec().sink.clone()),
        outbox: None,
        timers: None,
        tables: Vec::new(),
        global_tables: Vec::new(),
        advertise: None,
        ..cfg.clone()
    }
}

/// A running outbox applier; stopped when dropped (the pipeline ended early).
struct OutboxApplier {
    handle: ShutdownHandle,
    join: Option<tokio::task::JoinHandle<Result<Summary>>>,
}

impl OutboxApplier {
    /// Stops the applier after the pipeline stopped (what it has not applied, its next
    /// start applies) and returns its error, if it failed.
    async fn finish(mut self) -> Result<()> {
        self.handle.shutdown();
        let join = self.join.take().expect("joined once");
        match join.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(Error::Internal(format!("the outbox applier panicked: {e}"))),
        }
    }
}

impl Drop for OutboxApplier {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Calls [`ShutdownHandle::shutdown`] when dropped: with [`Pipeline::run`]'s future.
struct StopOnDrop(ShutdownHandle);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// Ends the queries when dropped, with [`Pipeline::run`]'s future: nothing is served from
/// a pipeline that stopped, and the endpoints thread withdraws this instance's advert.
struct StopQueries(StateQuery);

impl Drop for StopQueries {
    fn drop(&mut self) {
        self.0.stopped();
    }
}

/// Stops the global tables' reader when dropped: with [`Pipeline::run`]'s future.
struct StopReader(Option<Arc<crate::table::global::GlobalTables>>);

impl Drop for StopReader {
    fn drop(&mut self) {
        if let Some(global) = &self.0 {
            global.stop();
        }
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

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
