//! The follower thread: places this instance's standby copies from the group's description
//! and keeps them current from their changelogs (see [`super`]).
//!
//! Its librdkafka calls block, so it runs on a thread of its own. One consumer per store:
//! an end-of-partition event names only the partition number, which every store's
//! changelog shares, and it is what dates a copy as caught up.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::placement::{assigned_partitions, standby_partitions, Member};
use super::{Standbys, Warm};
use crate::admin::QuietEof;
use crate::config::PipelineConfig;
use crate::error::{Error, Result};
use crate::state::backend::{Change, Location};
use crate::state::changelog::{decode_change, group_reader_config, position};
use crate::state::{changelog_topic, checkpoint, PartitionState};

/// How often the group is described again: how late a copy follows a membership change.
const REFRESH: Duration = Duration::from_secs(2);
/// How often read records are written to the copies.
const FLUSH: Duration = Duration::from_millis(200);
/// Records per copy and store that are written at once, whatever the time.
const FLUSH_RECORDS: usize = 5_000;

/// What the follower reports: changelog records applied to copies.
pub(crate) type Applied = Box<dyn Fn(u64) + Send>;

/// Starts the follower of `standbys` on its own thread; it ends when `stopping` says so,
/// dropping (closing) its copies.
pub(crate) fn start(standbys: Arc<Standbys>, stopping: Box<dyn Fn() -> bool + Send>, applied: Applied) -> Result<()> {
    let name = format!("kafka-eos-standby-{}", standbys.cfg.application_id);
    std::thread::Builder::new()
        .name(name)
        .spawn(move || match Follower::new(standbys.clone(), applied) {
            Ok(mut f) => f.run(&*stopping),
            Err(e) => tracing::error!(error = %e, "standby replicas cannot start; partitions that move here restore their state from the changelog"),
        })
        .map(|_| ())
        .map_err(|e| Error::Internal(format!("cannot spawn the standby thread: {e}")))
}

struct Follower {
    standbys: Arc<Standbys>,
    cfg: Arc<PipelineConfig>,
    /// One read_committed consumer per store, with partition EOF events.
    readers: Vec<BaseConsumer<QuietEof>>,
    /// Sees the high watermark (read_uncommitted): where a new copy's checkpoint is checked.
    watermarks: BaseConsumer<QuietEof>,
    /// Per (store, partition): records read and not yet written, and the offset they reach.
    pending: HashMap<(usize, i32), (Vec<Change>, i64)>,
    /// Per (store, partition): the time the read was last at the end, not yet written.
    ends: HashMap<(usize, i32), SystemTime>,
    applied: Applied,
}

impl Follower {
    fn new(standbys: Arc<Standbys>, applied: Applied) -> Result<Follower> {
        let cfg = standbys.cfg.clone();
        let client = |isolation: &str, eof: bool| -> Result<BaseConsumer<QuietEof>> {
            let mut cc = group_reader_config(&cfg);
            cc.set("isolation.level", isolation)
                .set("enable.partition.eof", if eof { "true" } else { "false" })
                .set("auto.offset.reset", "earliest");
            cc.create_with_context(QuietEof)
                .map_err(|e| Error::Config(format!("standby consumer: {}", crate::config::client_error(&e))))
        };
        let readers = cfg.stores.iter().map(|_| client("read_committed", true)).collect::<Result<Vec<_>>>()?;
        let watermarks = client("read_uncommitted", false)?;
        Ok(Follower { standbys, cfg, readers, watermarks, pending: HashMap::new(), ends: HashMap::new(), applied })
    }

    fn run(&mut self, stopping: &dyn Fn() -> bool) {
        let (mut described, mut flushed) = (Instant::now() - REFRESH, Instant::now());
        // The first failure in a row is a warning, the rest debug: a group description
        // fails now and then (a coordinator moving), and may keep failing (no permission).
        let mut failing = false;
        while !stopping() {
            if described.elapsed() >= REFRESH {
                described = Instant::now();
                match self.place() {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, "standby copies not placed; retrying every few seconds");
                    }
                    Err(e) => tracing::debug!(error = %e, "standby copies not placed"),
                }
            }
            let mut read = 0;
            for store in 0..self.readers.len() {
                read += self.read(store);
            }
            if flushed.elapsed() >= FLUSH || self.pending.values().any(|(b, _)| b.len() >= FLUSH_RECORDS) {
                flushed = Instant::now();
                self.flush();
            }
            if read == 0 && self.standbys.warm_partitions().is_empty() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.flush();
        let all = self.standbys.warm_partitions();
        drop(self.standbys.remove(&all));
    }

    /// Describes the group and moves the copies to where the placement puts them.
    fn place(&mut self) -> Result<()> {
        let Some(me) = self.standbys.member() else { return Ok(()) };
        let group = &self.cfg.application_id;
        let list = self.watermarks.fetch_group_list(Some(group), Duration::from_secs(5)).map_err(|e| {
            Error::kafka_failure(
                format!("describing group {group}"),
                crate::error::KafkaError::new(e),
                "standby replicas need to describe the pipeline's group",
            )
        })?;
        let topic = &self.cfg.input_topics[0];
        let mut members = Vec::new();
        for g in list.groups().iter().filter(|g| g.name() == group.as_str()) {
            for m in g.members() {
                let Some(partitions) = assigned_partitions(m.assignment().unwrap_or_default(), topic) else {
                    return Err(Error::Internal(format!("member {} has an assignment of another encoding", m.id())));
                };
                members.push(Member { id: m.id().to_string(), partitions });
            }
        }
        let owned: BTreeSet<i32> = members.iter().flat_map(|m| m.partitions.iter().copied()).collect();
        let placed = standby_partitions(&me, &members, self.cfg.standby_replicas);
        let warm = self.standbys.warm_partitions();
        // A copy whose partition nobody owns (moving) or this instance owns (not restored
        // yet) is kept: the partition may land here, or its task take it.
        let mine: BTreeSet<i32> = members.iter().filter(|m| m.id == me).flat_map(|m| m.partitions.clone()).collect();
        let drop_: BTreeSet<i32> =
            warm.iter().copied().filter(|p| !placed.contains(p) && owned.contains(p) && !mine.contains(p)).collect();
        let add: Vec<i32> =
            placed.iter().copied().filter(|p| !warm.contains(p) && !self.standbys.is_active(*p)).collect();
        if drop_.is_empty() && add.is_empty() {
            return Ok(());
        }
        self.flush();
        drop(self.standbys.remove(&drop_));
        for p in add {
            match self.open(p) {
                Ok(copy) => {
                    if let Some(taken) = self.standbys.add(p, copy) {
                        drop(taken);
                    }
                }
                Err(e) => tracing::warn!(partition = p, error = %e, "standby copy not opened"),
            }
        }
        self.assign();
        let warm = self.standbys.warm_partitions();
        tracing::info!(partitions = ?warm, "standby replicas placed");
        Ok(())
    }

    /// Opens `partition`'s stores for a copy: from each store's local checkpoint when its
    /// backend keeps one that is trusted, else empty from the changelog's start.
    fn open(&self, partition: i32) -> Result<Warm> {
        let cfg = &self.cfg;
        let topics: Vec<String> = cfg.stores.iter().map(|s| changelog_topic(&cfg.application_id, &s.name)).collect();
        // Asked before any store is opened: a disk store stays locked while it is open, and
        // a task that takes the partition meanwhile waits for it.
        let mut ends = Vec::with_capacity(topics.len());
        for topic in &topics {
            let (low, high) = self
                .watermarks
                .fetch_watermarks(topic, partition, Duration::from_secs(10))
                .map_err(|e| Error::Internal(format!("end offsets of {topic} [{partition}]: {e}")))?;
            ends.push((low, high));
        }
        let mut state = PartitionState::new(&cfg.application_id, &cfg.stores, partition);
        let (mut next, mut dated) = (Vec::new(), Vec::new());
        for (store, (spec, topic)) in cfg.stores.iter().zip(&topics).enumerate() {
            let (low, high) = ends[store];
            let location = Location { application_id: &cfg.application_id, store: &spec.name, partition };
            let backend = state.backend_mut(store);
            let now = SystemTime::now();
            let admin =
                || crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
            let resumed = match backend.open(&location) {
                Ok(Some(cp)) => {
                    checkpoint::resume_from(&cp, low, high, now, || checkpoint::delete_retention(admin, topic))
                        .ok()
                        .map(|from| (from, cp.written_at))
                }
                _ => None,
            };
            let (from, date) = match resumed {
                Some(r) => r,
                None => {
                    backend.clear().map_err(|e| Error::Internal(format!("clearing a standby copy: {e}")))?;
                    (low, now)
                }
            };
            next.push(from);
            dated.push(date);
        }
        Ok(Warm { state, next, dated })
    }

    /// Points every store's reader at its copies' offsets.
    fn assign(&mut self) {
        self.pending.clear();
        self.ends.clear();
        let positions = self.standbys.positions();
        for (store, spec) in self.cfg.stores.iter().enumerate() {
            let topic = changelog_topic(&self.cfg.application_id, &spec.name);
            let mut tpl = TopicPartitionList::new();
            for (p, next) in &positions {
                let _ = tpl.add_partition_offset(&topic, *p, Offset::Offset(next[store]));
            }
            if let Err(e) = self.readers[store].assign(&tpl) {
                tracing::warn!(store = &*spec.name, error = %e, "standby reader not assigned");
            }
        }
    }

    /// Reads what store `store`'s reader has, up to a batch; returns the records read.
    fn read(&mut self, store: usize) -> usize {
        let spec = &self.cfg.stores[store];
        let topic = changelog_topic(&self.cfg.application_id, &spec.name);
        let mut read = 0;
        let mut wait = Duration::from_millis(20);
        while read < FLUSH_RECORDS {
            let msg = self.readers[store].poll(wait);
            wait = Duration::ZERO;
            match msg {
                None => break,
                Some(Ok(m)) => {
                    let p = m.partition();
                    let Some(base) = self.cursor(store, p) else { continue };
                    if m.offset() < base {
                        continue; // already in the copy
                    }
                    let entry = self.pending.entry((store, p)).or_insert_with(|| (Vec::new(), base));
                    entry.1 = m.offset() + 1;
                    if let Some(key) = m.key() {
                        match decode_change(spec, &topic, p, m.offset(), key, m.payload()) {
                            Ok(change) => entry.0.push(change),
                            Err(e) => {
                                // The owner's restore meets the same record and stops.
                                tracing::warn!(partition = p, error = %e, "standby copy dropped");
                                self.pending.remove(&(store, p));
                                drop(self.standbys.remove(&BTreeSet::from([p])));
                            }
                        }
                    }
                    read += 1;
                }
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    if let (Some(base), Some(at)) = (self.cursor(store, p), position(&self.readers[store], &topic, p)) {
                        let entry = self.pending.entry((store, p)).or_insert_with(|| (Vec::new(), base));
                        entry.1 = entry.1.max(at);
                        self.ends.insert((store, p), SystemTime::now());
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "standby reader error; retrying");
                    break;
                }
            }
        }
        read
    }

    /// Where store `store`'s read of `partition` is: past what is pending, else the copy's
    /// offset. `None`: the partition has no copy.
    fn cursor(&self, store: usize, partition: i32) -> Option<i64> {
        match self.pending.get(&(store, partition)) {
            Some((_, at)) => Some(*at),
            None => self.standbys.with(partition, |w| w.next[store]),
        }
    }

    /// Writes what was read to the copies, each store's records with their offset in one
    /// local transaction.
    fn flush(&mut self) {
        let mut applied = 0u64;
        for ((store, p), (batch, next)) in std::mem::take(&mut self.pending) {
            let ended = self.ends.remove(&(store, p));
            let n = batch.len() as u64;
            let written = self.standbys.with(p, |w| {
                if next < w.next[store] {
                    return Ok(());
                }
                w.state.backend_mut(store).write_checkpointed(batch, Some(next))?;
                w.next[store] = next;
                if let Some(at) = ended {
                    w.dated[store] = at;
                }
                Ok::<_, crate::state::backend::BackendError>(())
            });
            match written {
                Some(Ok(())) => applied += n,
                Some(Err(e)) => {
                    tracing::warn!(partition = p, error = %e, "standby copy failed to write; dropped");
                    drop(self.standbys.remove(&BTreeSet::from([p])));
                }
                None => {}
            }
        }
        self.ends.clear();
        if applied > 0 {
            (self.applied)(applied);
        }
    }
}
