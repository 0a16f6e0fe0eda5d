//! The consumer's context, librdkafka's callbacks on the consumer's poll thread: the
//! rebalance callback applies each assignment and revocation to librdkafka and hands the
//! partitions to the [`TaskManager`], which starts, stops and waits for their tasks; the
//! statistics callback reports consumer lag.

use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::partition::TopicPartition;
use crate::runtime::task_manager::TaskManager;

/// The consumer's context: delegates every rebalance step to the [`TaskManager`].
pub(super) struct Rebalancer {
    pub(super) tasks: TaskManager,
    application_id: String,
    rebalancing: crate::Rebalancing,
}

impl Rebalancer {
    pub(super) fn new(tasks: TaskManager, cfg: &crate::config::PipelineConfig) -> Rebalancer {
        Rebalancer { tasks, application_id: cfg.application_id.clone(), rebalancing: cfg.rebalancing() }
    }

    /// The group protocol the consumer was configured with.
    pub(super) fn rebalancing(&self) -> crate::Rebalancing {
        self.rebalancing
    }
}

impl ClientContext for Rebalancer {
    /// librdkafka statistics (when `statistics.interval.ms` is set): consumer lag.
    fn stats(&self, stats: rdkafka::Statistics) {
        let app = &self.application_id;
        for (topic, t) in &stats.topics {
            for (p, s) in &t.partitions {
                if *p >= 0 && s.consumer_lag >= 0 {
                    crate::metrics::consumer_lag(app, topic, *p, s.consumer_lag);
                }
            }
        }
    }
}

impl ConsumerContext for Rebalancer {
    /// rust-rdkafka's own `rebalance`, with two steps added: after `on_assign` started the
    /// partitions' tasks (which claimed them in the sink), the assignment gets the sink's
    /// offsets, so the partitions are fetched from there and never from the group's offset;
    /// and under incremental protocols (cooperative-sticky, KIP-848) the lists are the
    /// partitions that move, applied with `incremental_assign`/`incremental_unassign` while
    /// every other partition keeps its task.
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let tps = |tpl: &TopicPartitionList| -> Vec<TopicPartition> {
            tpl.elements().iter().map(|e| (self.tasks.topic(e.topic()), e.partition())).collect()
        };
        let incremental = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        // Under the incremental protocols librdkafka pauses every assigned partition while
        // this callback runs, so its duration is a pause of the partitions that stay put.
        let started = Instant::now();
        let step = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => "assign",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => "revoke",
            _ => "error",
        };
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let mut resume = Vec::new();
                if tpl.count() > 0 {
                    self.tasks.on_assign(tps(tpl), &mut resume);
                }
                for ((topic, partition), offset) in resume {
                    if let Err(e) = tpl.set_partition_offset(&topic, partition, Offset::Offset(offset)) {
                        tracing::warn!(%topic, partition, offset, error = %e, "cannot set the sink's resume offset");
                    }
                }
                let applied = if incremental { consumer.incremental_assign(tpl) } else { consumer.assign(tpl) };
                if let Err(e) = &applied {
                    // Tasks were started for partitions librdkafka did not take: stop them,
                    // so the registry matches the assignment.
                    tracing::error!(error = %e, "applying the assignment failed: dropping its tasks");
                    self.tasks.on_revoke(consumer, tps(tpl), true);
                } else {
                    self.tasks.pause_unstarted(consumer);
                }
                self.tasks.set_member(member_id(consumer));
                applied
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if tpl.count() > 0 {
                    self.tasks.on_revoke(consumer, tps(tpl), consumer.assignment_lost());
                }
                if incremental {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                // The registry follows what librdkafka is told: the callback's partitions
                // (incremental) or the whole assignment (eager `unassign`) are dropped.
                tracing::warn!(error = ?other, "rebalance error: giving up the partitions");
                let dropped = if incremental { tps(tpl) } else { self.tasks.routed() };
                self.tasks.on_revoke(consumer, dropped, true);
                if incremental {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
        };
        let took = started.elapsed();
        crate::metrics::rebalance_callback(&self.application_id, step, took);
        tracing::info!(step, partitions = tpl.count(), took_ms = took.as_millis() as u64, "rebalance callback done");
        match result {
            Err(e) => tracing::error!(error = %e, "applying the rebalance failed"),
            // librdkafka paused every assigned partition for the callback and has just
            // resumed them (those this runtime paused stay paused): wake their fetchers.
            Ok(()) if incremental => self.tasks.wake_routed(),
            Ok(()) => {}
        }
    }
}

/// The consumer's group member id, `None` while it has none: librdkafka clears it as it
/// sends the LeaveGroup, and closing the consumer from then on waits for the request to be
/// answered.
pub(super) fn member_id<C: rdkafka::consumer::ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<String> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live handle `consumer` owns. `rd_kafka_memberid` returns NULL or a
    // NUL-terminated copy that the caller frees with `rd_kafka_mem_free`, done here once read.
    unsafe {
        let id = rdkafka::bindings::rd_kafka_memberid(rk);
        if id.is_null() {
            return None;
        }
        let read = std::ffi::CStr::from_ptr(id).to_string_lossy().into_owned();
        rdkafka::bindings::rd_kafka_mem_free(rk, id.cast());
        Some(read).filter(|s| !s.is_empty())
    }
}
