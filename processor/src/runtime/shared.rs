//! What the consumer thread and the partition tasks share: the pipeline's configuration and
//! processor, the control channel a task reports on ([`Control`]), and the bounds on tasks
//! and transactions.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::TopicPartitionList;

use super::protocol::Control;
use super::shutdown::ShutdownHandle;
use super::slots;
use crate::acl::denied::refusal;
use crate::acl::Operation;
use crate::config::PipelineConfig;
use crate::observe::TransactionHook;
use crate::processor::driver::ProcessorFactory;

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
    /// with it: [`limits`](super::limits)).
    pub brokers: usize,
    /// Partitions of the first input topic at start-up: the repartition topics have as many
    /// ([`PipelineBuilder::repartition`](crate::PipelineBuilder::repartition)).
    pub input_partitions: i32,
    /// Per-partition mode's bound on concurrent transaction cycles
    /// ([`PipelineConfig::max_concurrent_transactions`]); `None` in the other guarantees.
    pub slots: Option<Arc<slots::Slots>>,
    /// Per-partition mode's bound on running partition tasks
    /// ([`PipelineConfig::max_partition_tasks`], or what the open-file limit holds);
    /// `None`: unbounded, and always in the other guarantees.
    pub max_tasks: Option<usize>,
    /// The instance's one copy of the global tables ([`crate::table::global`]), read to its
    /// end before the consumer starts; `None` without global tables.
    pub global: Option<Arc<crate::table::global::GlobalTables>>,
    /// Where the tasks offer their restored partitions to queries ([`crate::query`]).
    pub queries: Arc<crate::query::Registry>,
    /// The instance's standby copies ([`crate::state::standby`]), which a restore continues;
    /// `None` without standby replicas.
    pub standbys: Option<Arc<crate::state::standby::Standbys>>,
    /// The instance's reader of the group's committed offsets, made at its first use
    /// ([`Shared::stable_committed_offsets`]).
    pub offsets_reader: Mutex<Option<Arc<BaseConsumer>>>,
    /// Deletes the internal topics' committed records ([`super::purge`]); `None` without
    /// internal topics to purge.
    pub purger: Option<super::purge::Purger>,
}

impl Shared {
    /// The consumer's current group metadata; `None` before the consumer exists or after
    /// it is gone.
    pub(crate) fn group_metadata(&self) -> Option<Arc<rdkafka::consumer::ConsumerGroupMetadata>> {
        self.group.get().and_then(|read| read())
    }

    /// The group's committed offsets of `partitions`, read as stable
    /// ([`stable_committed_offsets`](crate::state::base::stable_committed_offsets)) by
    /// the instance's one reader, which the tasks share: one client however many tasks ask.
    pub(crate) fn stable_committed_offsets(
        &self,
        partitions: &TopicPartitionList,
        deadline: Instant,
    ) -> Result<TopicPartitionList, Unread> {
        let reader = self.offsets_reader().map_err(Unread::Failed)?;
        crate::state::base::stable_committed_offsets(&*reader, partitions, deadline).map_err(|e| {
            let topic = partitions.elements().first().map(|p| p.topic().to_string()).unwrap_or_default();
            let during = || format!("reading the committed offsets of group {}", self.cfg.application_id);
            let refused = refusal(&self.cfg, &self.cfg.consumer_properties, &e, (&topic, Operation::Read), during);
            match refused {
                Some(refused) => Unread::Refused(refused),
                None => Unread::Failed(self.renew_offsets_reader(&reader, e.to_string())),
            }
        })
    }

    /// Where `topic`'s `partition`'s log starts now (its low watermark), read by the same
    /// reader within `timeout`.
    pub(crate) fn log_start(&self, topic: &str, partition: i32, timeout: Duration) -> Result<i64, String> {
        if self.cfg.fault.as_ref().is_some_and(|f| f.on_log_start()) {
            return Err("fault injection: the log's start cannot be read".into());
        }
        let reader = self.offsets_reader()?;
        reader
            .fetch_watermarks(topic, partition, timeout)
            .map(|(low, _)| low)
            .map_err(|e| self.renew_offsets_reader(&reader, e.to_string()))
    }

    /// A read by `failed` failed with `error`: the next read makes a new reader. A client
    /// whose metadata went stale while a broker was down can go on answering "unknown
    /// partition" after the cluster is back; a new one fetches the metadata afresh.
    fn renew_offsets_reader(&self, failed: &Arc<BaseConsumer>, error: String) -> String {
        let mut slot = self.offsets_reader.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|current| Arc::ptr_eq(current, failed)) {
            *slot = None;
        }
        error
    }

    /// The instance's offsets reader, made at its first use, its pending events drained.
    fn offsets_reader(&self) -> Result<Arc<BaseConsumer>, String> {
        Ok({
            let mut slot = self.offsets_reader.lock().unwrap_or_else(|p| p.into_inner());
            let reader = match slot.as_ref() {
                Some(reader) => reader.clone(),
                None => {
                    let made: BaseConsumer = crate::state::changelog::group_reader_config(&self.cfg)
                        .create()
                        .map_err(|e| format!("offsets reader: {}", crate::config::client_error(&e)))?;
                    slot.insert(Arc::new(made)).clone()
                }
            };
            // It is never polled otherwise: its events (a broker down, say) would pile up.
            // Drained under the lock: one poller at a time.
            while reader.poll(Duration::ZERO).is_some() {}
            reader
        })
    }
}

/// Why the group's committed offsets could not be read.
pub(crate) enum Unread {
    /// The brokers refused this principal an ACL (the group's `Read`, an input's).
    Refused(crate::Error),
    /// Anything else, until the deadline: the last error.
    Failed(String),
}

/// How often the consumer thread checks for shutdown and control messages.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(50);
