//! Changelog topics: created (or checked) at start-up, read back on assignment.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::backend::{Change, Checkpoint, Location};
use super::base::{self, stable_committed_offsets, Base};
use super::{changelog_topic, checkpoint, PartitionState, StateError, StoreDef};
use crate::acl::Operation;
use crate::admin::QuietEof;
use crate::config::PipelineConfig;
use crate::error::{Error, Result};
use crate::partition::TopicPartition;

/// Creates every store's changelog topic that is missing — compacted, one partition per
/// input partition — and refuses to start if one exists with another partition count
/// (another partition count would mix partitions' state). [`check_topics`] then checks their
/// configuration.
pub(crate) fn create_topics(cfg: &PipelineConfig, input_partitions: i32) -> Result<()> {
    let admin = crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
    for spec in &cfg.stores {
        let topic = changelog_topic(&cfg.application_id, &spec.name);
        match admin.create_topic_with(
            &topic,
            input_partitions,
            cfg.changelog_replication,
            &[("cleanup.policy", "compact")],
        ) {
            Ok(()) => {}
            Err(Error::Config(m)) if m.contains("exists with") => {
                return Err(layout_error(cfg, spec, &topic, input_partitions, m))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Refuses to start if a store's changelog topic is not compacted: a `delete` policy would
/// eventually drop live state.
pub(crate) fn check_topics(cfg: &PipelineConfig, input_partitions: i32) -> Result<()> {
    let admin = crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
    for spec in &cfg.stores {
        let topic = changelog_topic(&cfg.application_id, &spec.name);
        let layout = |detail: String| layout_error(cfg, spec, &topic, input_partitions, detail);
        // Right after a creation (ours, or another instance's racing with it) the broker may
        // describe the topic before its configuration is known: only a policy it reports
        // counts, and an empty answer is asked again for a few seconds.
        let deadline = Instant::now() + Duration::from_secs(15);
        let policy = loop {
            match admin.topic_config(&topic, "cleanup.policy")?.filter(|p| !p.is_empty()) {
                Some(p) => break p,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
                None => return Err(layout("reports no cleanup.policy".into())),
            }
        };
        if !policy.split(',').any(|p| p.trim() == "compact") {
            return Err(layout(format!("has cleanup.policy={policy}")));
        }
        // Read now, once: a restore from a local checkpoint needs it (see `checkpoint`).
        checkpoint::delete_retention(|| admin.clone(), &topic);
    }
    Ok(())
}

/// A changelog `topic` of store `spec` unfit for its state, as `detail` says.
fn layout_error(cfg: &PipelineConfig, spec: &StoreDef, topic: &str, input_partitions: i32, detail: String) -> Error {
    Error::Config(format!(
        "changelog topic {topic} of store {:?} {detail}; it must be compacted with one partition per \
         partition of input topic {} ({input_partitions}). Delete it (its state is rebuilt only if the \
         input is reprocessed) or give the store another name",
        spec.name, cfg.input_topics[0]
    ))
}

/// Rebuilds the stores of input `partitions` from their changelogs and returns them, with
/// the number of changelog records read: from each store's local checkpoint when its
/// backend keeps one that is trusted (see [`checkpoint`]), else from the start.
///
/// First the partitions' committed offsets are fetched as *stable* (the consumer is
/// read_committed, so librdkafka sets `require_stable`): that waits out any transaction of a
/// previous owner that carried these partitions' offsets, and with them their changelog
/// records. Then each store's changelog partitions are read with read_committed up to the
/// high watermark seen at the start ([`restore_end`]), not to the last stable offset: a
/// transaction that wrote changes and never sent offsets (its instance crashed in between)
/// holds the LSO below changes committed after it, and stopping there would go back in
/// time while the input resumes past them. Such a transaction ends at its transaction
/// timeout; the read waits for it, within `deadline`. The committed offsets are read again
/// at the end: the states reflect the first read, their [base](super::base), only if no
/// transaction committed these partitions meanwhile ([`Restored::moved`] says which did).
/// Several partitions are restored in one pass (an instance task gets them together on
/// assignment): one client, two offset fetches, one read per store.
///
/// With `handover`, each partition's state is first asked of it ([`Handed`]: a guard the
/// state keeps while it lives, and maybe a warm [standby](super::standby) copy, continued
/// from its stores' checkpoints like a local store).
pub(crate) fn restore(
    cfg: &PipelineConfig,
    partitions: &[i32],
    deadline: Instant,
    handover: Option<&dyn Fn(i32) -> Handed>,
) -> Result<Restored> {
    let started = Instant::now();
    let mut states: Vec<PartitionState> = Vec::with_capacity(partitions.len());
    // Per partition: each store's checkpoint in its warm copy, if it had one.
    let mut warm: Vec<Option<Vec<Checkpoint>>> = Vec::with_capacity(partitions.len());
    for p in partitions {
        let handed = handover.map(|h| h(*p)).unwrap_or_default();
        let (mut state, checkpoints) = match handed.warm {
            Some((state, checkpoints)) => (state, Some(checkpoints)),
            None => (PartitionState::new(&cfg.application_id, &cfg.stores, *p), None),
        };
        if let Some(guard) = handed.guard {
            state.hold(guard);
        }
        warm.push(checkpoints);
        states.push(state);
    }
    let mut cc = group_reader_config(cfg);
    cc.set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        // The end of a changelog is usually a transaction marker, which is never delivered:
        // the read ends on the end-of-partition event, which comes with an empty fetch, so
        // keep the broker from holding that fetch for the default 500 ms.
        .set("fetch.wait.max.ms", "10");
    let consumer: BaseConsumer<QuietEof> = cc
        .create_with_context(QuietEof)
        .map_err(|e| Error::Config(format!("state restore consumer: {}", crate::config::client_error(&e))))?;
    // Watermarks follow the client's isolation level: this one sees the high watermark.
    let mut uc = group_reader_config(cfg);
    uc.set("isolation.level", "read_uncommitted");
    let watermarks: BaseConsumer<QuietEof> = uc
        .create_with_context(QuietEof)
        .map_err(|e| Error::Config(format!("state restore consumer: {}", crate::config::client_error(&e))))?;
    let timeout = |what: String, last: String| Error::TaskTimeout { what, timeout: cfg.task_timeout, last };
    // Every input topic's partitions: co-partitioned inputs share partition n's state, and
    // a previous owner's transaction may have carried the offsets of any of them.
    let mut input = TopicPartitionList::new();
    for topic in &cfg.input_topics {
        for p in partitions {
            let _ = input.add_partition(topic, *p);
        }
    }
    // A refusal (the group's `Read`, a topic's) stops the pipeline naming the ACL; anything
    // else is a failure of the call.
    let failed = |e: KafkaError, (topic, during): (&str, String)| {
        let refused =
            crate::acl::denied::refusal(cfg, &cfg.consumer_properties, &e, (topic, Operation::Read), || during.clone());
        refused.unwrap_or_else(|| {
            let hint = "check that the changelog topic exists and is readable by this principal";
            Error::kafka_failure(during, crate::error::KafkaError::new(e), hint)
        })
    };
    let committed = stable_committed_offsets(&consumer, &input, deadline).map_err(|e| {
        let topics = &cfg.input_topics;
        let what =
            format!("fetching the stable committed offsets of {topics:?} {partitions:?} before restoring their state");
        match crate::error::refusal_code(&e) {
            Some(_) => failed(e, (&topics[0], what)),
            None => timeout(what, e.to_string()),
        }
    })?;

    let before = base::base(&committed);
    let mut records = vec![vec![0u64; cfg.stores.len()]; partitions.len()];
    let index_of = |p: i32| partitions.iter().position(|q| *q == p);
    let admin = || crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
    // One store at a time: librdkafka's end-of-partition event names only the partition
    // number, which every store's changelog shares.
    for (store, spec) in cfg.stores.iter().enumerate() {
        let topic = changelog_topic(&cfg.application_id, &spec.name);
        let backend_error = |partition: i32| {
            move |source| Error::from(StateError::Backend { store: spec.name.to_string(), partition, source })
        };
        // Where each partition's read ends (the offset after its last record), and the
        // checkpoint its state reaches: where the read starts, then past each record read.
        let mut ends: HashMap<i32, i64> = HashMap::new();
        let mut next: HashMap<i32, i64> = HashMap::new();
        let mut tpl = TopicPartitionList::new();
        for (i, p) in partitions.iter().enumerate() {
            let (low, high) = retrying(deadline, || watermarks.fetch_watermarks(&topic, *p, Duration::from_secs(10)))
                .map_err(|e| failed(e, (&topic, format!("reading the end offsets of {topic} [{p}]"))))?;
            let mut retention = || checkpoint::delete_retention(admin, &topic);
            let given = warm[i].as_ref().map(|c| c[store]);
            let from = resume_point(cfg, &mut states[i], store, (low, high), given, &mut retention)?;
            next.insert(*p, from);
            // A fully read changelog partition (an empty one: a new store) needs no fetch.
            if high > from {
                ends.insert(*p, high);
                let _ = tpl.add_partition_offset(&topic, *p, Offset::Offset(from));
            }
        }
        let mut batches: HashMap<i32, Vec<Change>> = HashMap::new();
        if !ends.is_empty() {
            consumer.assign(&tpl).map_err(|e| Error::Internal(format!("state restore assign: {e}")))?;
        }
        while !ends.is_empty() {
            if Instant::now() >= deadline {
                let behind: Vec<String> =
                    ends.iter().map(|(p, end)| format!("[{p}] at {:?} of {end}", next.get(p))).collect();
                return Err(timeout(
                    format!("restoring store {:?} of partitions {partitions:?} from {topic}", spec.name),
                    format!(
                        "not read to the high watermark seen at the start: {}; a transaction still open in the \
                         changelog (an instance that crashed mid-transaction) holds its stable end back until its \
                         transaction timeout",
                        behind.join(", ")
                    ),
                ));
            }
            let done = match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    let (p, i) = (m.partition(), index_of(m.partition()));
                    let Some(i) = i else { continue };
                    next.insert(p, m.offset() + 1);
                    if let Some(key) = m.key() {
                        let change = decode_change(spec, &topic, p, m.offset(), key, m.payload())?;
                        let batch = batches.entry(p).or_default();
                        batch.push(change);
                        records[i][store] += 1;
                        if batch.len() >= 10_000 {
                            let batch = std::mem::take(batch);
                            let backend = states[i].backend_mut(store);
                            backend.write_checkpointed(batch, Some(m.offset() + 1)).map_err(backend_error(p))?;
                        }
                    } else {
                        tracing::warn!(topic, offset = m.offset(), "changelog record without a key skipped");
                    }
                    restore_end(m.offset() + 1, ends.get(&p).copied()).then_some(p)
                }
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    // The stable end under read_committed: past the last transaction's
                    // marker, or held back by a transaction still open.
                    let position = position(&consumer, &topic, p);
                    if let Some(position) = position {
                        let reached = next.entry(p).or_insert(position);
                        *reached = position.max(*reached);
                    }
                    position.filter(|at| restore_end(*at, ends.get(&p).copied())).map(|_| p)
                }
                // The consumer recovers from transport errors by itself (a broker restarting,
                // leadership moving): keep polling until the deadline, so a broker crash
                // during a restore does not stop the instance.
                Some(Err(e)) if !is_definite(&e) => {
                    tracing::debug!(error = %e, topic, "restore consumer error; retrying");
                    None
                }
                Some(Err(e)) => {
                    let during = format!("restoring store {:?} of partitions {partitions:?} from {topic}", spec.name);
                    return Err(failed(e, (&topic, during)));
                }
                // Nothing to read: a partition whose open transaction was aborted may have
                // moved past its end with nothing to deliver (only aborted records and
                // markers), and its end-of-partition event may not come again.
                None => ends
                    .keys()
                    .copied()
                    .find(|p| position(&consumer, &topic, *p).is_some_and(|at| restore_end(at, ends.get(p).copied()))),
            };
            if let Some(p) = done {
                if let Some(at) = position(&consumer, &topic, p) {
                    let reached = next.entry(p).or_insert(at);
                    *reached = at.max(*reached);
                }
                ends.remove(&p);
            }
        }
        // The rest of each partition's records, with the checkpoint it reached: also when
        // nothing was read, which dates the checkpoint anew (see `checkpoint`: its age only
        // matters when there is a tail after it).
        for (i, p) in partitions.iter().enumerate() {
            let batch = batches.remove(p).unwrap_or_default();
            states[i].backend_mut(store).write_checkpointed(batch, next.get(p).copied()).map_err(backend_error(*p))?;
        }
    }
    let elapsed = started.elapsed();
    for ((state, per_store), warm) in states.iter().zip(&records).zip(&warm) {
        for ((store, entries, bytes), n) in state.sizes().into_iter().zip(per_store) {
            crate::metrics::state_restored(&cfg.application_id, store, *n, elapsed);
            tracing::info!(
                store,
                partition = state.partition(),
                changelog_records = n,
                from_standby = warm.is_some(),
                entries,
                bytes,
                elapsed_ms = elapsed.as_millis() as u64,
                "state restored"
            );
        }
    }
    let handovers = warm.iter().filter(|w| w.is_some()).count();
    let changes: Vec<u64> = records.iter().map(|per_store| per_store.iter().sum()).collect();
    let held: Vec<bool> = states
        .iter()
        .zip(&changes)
        .map(|(state, n)| *n > 0 || state.sizes().iter().any(|(_, entries, _)| *entries > 0))
        .collect();
    let with_offsets: Vec<i32> = committed
        .elements()
        .iter()
        .filter(|e| e.offset().to_raw().is_some_and(|o| o >= 0))
        .map(|e| e.partition())
        .collect();
    let without_offsets = base::state_without_offsets(partitions, &held, &with_offsets)
        .into_iter()
        .map(|p| (p, partitions.iter().position(|q| *q == p).map_or(0, |i| changes[i])))
        .collect();
    // Read again: a transaction that committed these partitions since the first read (another
    // owner's, see `base`) may have put changes in the changelogs read past it.
    let after = stable_committed_offsets(&consumer, &input, deadline).map_err(|e| {
        let what = format!("fetching the stable committed offsets of {partitions:?} after restoring their state");
        match crate::error::refusal_code(&e) {
            Some(_) => failed(e, (&cfg.input_topics[0], what)),
            None => timeout(what, e.to_string()),
        }
    })?;
    let moved = base::moved(&before, &base::base(&after));
    Ok(Restored { states, records: changes.iter().sum(), handovers, without_offsets, base: before, moved })
}

/// What a [`restore`] rebuilt.
pub(crate) struct Restored {
    /// Each partition's state, in the order asked for.
    pub states: Vec<PartitionState>,
    /// The changelog records read.
    pub records: u64,
    /// How many partitions continued a warm copy.
    pub handovers: usize,
    /// The partitions whose state holds committed changes while the group has no committed
    /// offset for them ([`base::state_without_offsets`]), each with the changelog records read.
    pub without_offsets: Vec<(i32, u64)>,
    /// The committed offsets of the input partitions that the states reflect
    /// ([`base`](super::base)), read before the changelogs.
    pub base: Base,
    /// The input partitions committed again while the changelogs were read: another
    /// owner's commit, after which the states must not be used ([`base::moved`]).
    pub moved: Vec<TopicPartition>,
}

/// What a restore is handed for a partition before it opens its stores.
#[derive(Default)]
pub(crate) struct Handed {
    /// Kept by the partition's state while it lives.
    pub guard: Option<Box<dyn std::any::Any + Send>>,
    /// A warm copy of the partition's state, with each store's checkpoint.
    pub warm: Option<(PartitionState, Vec<Checkpoint>)>,
}

/// Whether a changelog partition's restore, read up to `position` (the offset after the
/// last record or marker read), has reached `end`, the high watermark seen at its start
/// (`None`: the partition needs no read).
pub(crate) fn restore_end(position: i64, end: Option<i64>) -> bool {
    end.is_none_or(|end| position >= end)
}

/// Opens store `store` of `state` and returns where its changelog partition `[low, high)`
/// is read from: its checkpoint if trusted ([`checkpoint`]), else the log start, after
/// clearing the local store. `given`: the store is a standby copy, already open, at this
/// checkpoint.
fn resume_point(
    cfg: &PipelineConfig,
    state: &mut PartitionState,
    store: usize,
    (low, high): (i64, i64),
    given: Option<Checkpoint>,
    retention: &mut dyn FnMut() -> Duration,
) -> Result<i64> {
    let (partition, name) = (state.partition(), &*cfg.stores[store].name);
    let location = Location { application_id: &cfg.application_id, store: name, partition };
    let backend = state.backend_mut(store);
    let opened = match given {
        Some(cp) => Ok(Some(cp)),
        None => backend.open(&location),
    };
    let distrust = match opened {
        Ok(Some(cp)) => match checkpoint::resume_from(&cp, low, high, SystemTime::now(), retention) {
            Ok(from) => {
                tracing::debug!(
                    store = name,
                    partition,
                    from,
                    end = high,
                    "restoring the changelog's tail from the local checkpoint"
                );
                return Ok(from);
            }
            Err(distrust) => distrust.to_string(),
        },
        Ok(None) if backend.is_empty() => return Ok(low),
        Ok(None) => "the local store has entries but no checkpoint".to_string(),
        Err(e) => format!("the local store cannot be used: {e}"),
    };
    tracing::warn!(store = name, partition, checkpoint = %distrust, "local state not trusted; rebuilding it from the changelog's start");
    backend.clear().map_err(|source| StateError::Backend { store: name.to_string(), partition, source })?;
    Ok(low)
}

/// The consumer's position in `topic` [`partition`]: after an end-of-partition event, the
/// offset the next read would start at.
pub(crate) fn position<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let positions = consumer.position().ok()?;
    positions.find_partition(topic, partition)?.offset().to_raw().filter(|o| *o >= 0)
}

/// One changelog record as the change to apply to its store's backend. Every record is
/// checked against the declared types (and migrated if it is of an older schema version):
/// wrong state stops the restore here, before anything is processed with it. Shared by the
/// restore from Kafka and the test driver's restore from its simulated changelog.
pub(crate) fn decode_change(
    spec: &StoreDef,
    topic: &str,
    partition: i32,
    offset: i64,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<Change> {
    match (spec.check)(key, value) {
        Ok(None) => Ok((key.to_vec(), value.map(<[u8]>::to_vec))),
        Ok(Some((k, v))) => Ok((if k.is_empty() { key.to_vec() } else { k }, v)),
        Err(problem) => Err(Error::from(StateError::Incompatible {
            store: spec.name.to_string(),
            changelog: topic.to_string(),
            partition,
            offset,
            problem: problem.to_string(),
        })),
    }
}

/// The configuration of a client that reads the pipeline's committed offsets (and, for a
/// restore, its changelogs) without joining its group: the group's `group.id` (no
/// subscription, so it never takes part in a rebalance), no auto-commit, and
/// `read_committed`, which makes librdkafka send its offset fetches with `require_stable`
/// (KIP-447).
pub(crate) fn group_reader_config(cfg: &PipelineConfig) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cfg.bootstrap_servers)
        // librdkafka stops fetching for `fetch.queue.backoff.ms` (default 1 s) whenever its
        // queue holds `queued.min.messages` or `queued.max.messages.kbytes`: a restore that
        // drains the queue at once would spend most of each second waiting.
        .set("fetch.queue.backoff.ms", "10");
    cfg.consumer_properties.set_on(&mut cc);
    cc.set("group.id", &cfg.application_id)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("log_level", "3");
    cc
}

/// Whether a consumer error will not go away by retrying: the changelog is gone or this
/// principal may not read it.
pub(crate) fn is_definite(e: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    crate::error::refusal_code(e).is_some()
        || matches!(e.rdkafka_error_code(), Some(C::UnknownTopicOrPartition | C::UnknownTopic))
}

/// Calls `f` until it succeeds, fails definitely, or `deadline` passes.
pub(crate) fn retrying<T>(
    deadline: Instant,
    mut f: impl FnMut() -> rdkafka::error::KafkaResult<T>,
) -> rdkafka::error::KafkaResult<T> {
    loop {
        match f() {
            Err(e) if !is_definite(&e) && Instant::now() < deadline => {
                tracing::debug!(error = %e, "restore: retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            r => return r,
        }
    }
}

#[cfg(test)]
pub(super) mod mock_cluster_tests;
