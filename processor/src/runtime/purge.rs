//! Deleting an internal topic's records once their reader has committed past them.
//!
//! A repartition topic is read by this pipeline and an outbox topic by its applier; below
//! the offset its reader committed (in the group, or in the sink's stored offsets), no
//! record is ever read again. So the runtime creates both with no retention of their own
//! (`retention.ms=-1`) and deletes (`DeleteRecords`) up to the committed offsets, every
//! [`purge_interval`](crate::PipelineBuilder::purge_interval): a reader that falls behind
//! loses nothing, however long it lags, and the topics do not grow without bound. Kafka
//! Streams purges its repartition topics the same way.
//!
//! The tasks [`offer`](Purger::offer) the offsets their commits reached; one thread per
//! pipeline deletes, so a slow or refused `DeleteRecords` never holds up a transaction. A
//! failure is logged and the offsets are offered again by the next commits.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::PipelineConfig;
use crate::partition::TopicPartition;

/// Per partition, the offset below which its records may be deleted.
type Offsets = BTreeMap<TopicPartition, i64>;

/// What the tasks and the purge thread share.
#[derive(Default)]
struct State {
    /// Offsets offered since the last purge.
    offered: Offsets,
    stopping: bool,
}

/// The pipeline's purge of its internal topics; see the [module docs](self). Tells its
/// thread to stop when dropped, without waiting: it may be inside a `DeleteRecords` call,
/// and the last owner may be on an async worker.
pub(crate) struct Purger {
    topics: Vec<String>,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Purger {
    /// Starts the purge of `cfg`'s purged topics; `None` if it has none.
    pub(crate) fn start(cfg: &PipelineConfig) -> Option<Purger> {
        if cfg.purged_topics.is_empty() {
            return None;
        }
        let state: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let (shared, cfg_for_thread) = (state.clone(), cfg.clone());
        std::thread::Builder::new()
            .name("kafka-eos-purge".into())
            .spawn(move || run(&cfg_for_thread, &shared))
            .map_err(
                |e| tracing::warn!(error = %e, "cannot start the internal topics' purge thread; they are not purged"),
            )
            .ok()?;
        Some(Purger { topics: cfg.purged_topics.clone(), state })
    }

    /// `partition`'s records below `next` are committed by their reader: deleted at the
    /// next purge if its topic is one the pipeline purges.
    pub(crate) fn offer(&self, partition: &TopicPartition, next: i64) {
        if !self.topics.iter().any(|t| t.as_str() == partition.0.as_str()) {
            return;
        }
        let mut state = self.state.0.lock().unwrap_or_else(|p| p.into_inner());
        let at = state.offered.entry(partition.clone()).or_insert(next);
        *at = (*at).max(next);
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        self.state.0.lock().unwrap_or_else(|p| p.into_inner()).stopping = true;
        self.state.1.notify_all();
    }
}

/// The purge thread: every interval, deletes what was offered past what it deleted before.
fn run(cfg: &PipelineConfig, state: &(Mutex<State>, Condvar)) {
    let admin = crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
    let admin: AdminClient<DefaultClientContext> = match admin.client_config().create() {
        Ok(admin) => admin,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create the internal topics' purge client; they are not purged");
            return;
        }
    };
    let mut deleted = Offsets::new();
    loop {
        let offered = {
            let guard = state.0.lock().unwrap_or_else(|p| p.into_inner());
            let (mut guard, _) = state
                .1
                .wait_timeout_while(guard, cfg.purge_interval, |s| !s.stopping)
                .unwrap_or_else(|p| p.into_inner());
            if guard.stopping {
                return;
            }
            std::mem::take(&mut guard.offered)
        };
        let due = due(&offered, &deleted);
        if due.is_empty() {
            continue;
        }
        match delete(&admin, &due, cfg.call_timeout()) {
            Ok(done) => deleted.extend(done),
            Err(e) => tracing::warn!(
                error = %e,
                partitions = due.len(),
                "cannot delete committed records of the internal topics (DeleteRecords; with ACLs it needs \
                 Delete on the topic): they stay until the next purge"
            ),
        }
    }
}

/// The offsets of `offered` past those `deleted` already reached: what a purge deletes up
/// to. Offsets never go back: a lower offer (a late commit of an older batch) deletes
/// nothing.
pub(crate) fn due(offered: &Offsets, deleted: &Offsets) -> Offsets {
    offered
        .iter()
        .filter(|(tp, at)| deleted.get(*tp).is_none_or(|d| *at > d))
        .map(|(tp, at)| (tp.clone(), *at))
        .collect()
}

/// `DeleteRecords` below each offset of `due`; returns those each partition reached.
fn delete(admin: &AdminClient<DefaultClientContext>, due: &Offsets, timeout: Duration) -> Result<Offsets, String> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), at) in due {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*at)).map_err(|e| e.to_string())?;
    }
    let opts = AdminOptions::new().operation_timeout(Some(timeout)).request_timeout(Some(timeout));
    let result = futures::executor::block_on(admin.delete_records(&tpl, &opts)).map_err(|e| e.to_string())?;
    let mut reached = Offsets::new();
    let mut failed = Vec::new();
    for e in result.elements() {
        match (e.error(), e.offset()) {
            (Ok(()), Offset::Offset(low)) => {
                reached.insert((e.topic().into(), e.partition()), low);
            }
            (Err(err), _) => failed.push(format!("{}-{}: {err}", e.topic(), e.partition())),
            (Ok(()), _) => {}
        }
    }
    if !failed.is_empty() {
        tracing::warn!(failed = failed.join(", "), "some internal topic partitions were not purged");
    }
    tracing::debug!(partitions = reached.len(), "internal topics purged");
    Ok(reached)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("r".into(), p)
    }

    /// Over every pair of offer and deleted maps on two partitions (absent, 0..=3 each), empty
    /// ones included: a partition is due exactly when offered past what was deleted, at the
    /// offer, and nothing else is.
    #[test]
    fn a_partition_is_due_exactly_when_offered_past_what_was_deleted() {
        let values = [None, Some(0), Some(1), Some(2), Some(3)];
        let map = |a: Option<i64>, b: Option<i64>| -> Offsets {
            [(tp(0), a), (tp(1), b)].into_iter().filter_map(|(tp, v)| v.map(|v| (tp, v))).collect()
        };
        for oa in values {
            for ob in values {
                for da in values {
                    for db in values {
                        let (offered, deleted) = (map(oa, ob), map(da, db));
                        let got = due(&offered, &deleted);
                        for (p, o, d) in [(0, oa, da), (1, ob, db)] {
                            let expected = match (o, d) {
                                (Some(o), Some(d)) if o > d => Some(o),
                                (Some(o), None) => Some(o),
                                _ => None,
                            };
                            assert_eq!(got.get(&tp(p)).copied(), expected, "offered {offered:?} deleted {deleted:?}");
                        }
                        assert!(got.keys().all(|k| offered.contains_key(k)));
                    }
                }
            }
        }
    }
}
