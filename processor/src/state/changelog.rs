//! Changelog topics: created (or checked) at start-up, read back on assignment.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{changelog_topic, PartitionState};
use crate::config::PipelineConfig;
use crate::error::{Error, Result};
use crate::verify::QuietEof;

/// Creates every store's changelog topic if missing — compacted, one partition per input
/// partition — and refuses to start if one exists with another partition count or without
/// compaction (a `delete` policy would eventually drop live state; another partition count
/// would mix partitions' state).
pub(crate) fn ensure_topics(cfg: &PipelineConfig, input_partitions: i32) -> Result<()> {
    let admin = crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
    for spec in &cfg.stores {
        let topic = changelog_topic(&cfg.application_id, &spec.name);
        let layout = |detail: String| {
            Error::Config(format!(
                "changelog topic {topic} of store {:?} {detail}; it must be compacted with one partition per \
                 partition of input topic {} ({input_partitions}). Delete it (its state is rebuilt only if the \
                 input is reprocessed) or give the store another name",
                spec.name, cfg.input_topics[0]
            ))
        };
        match admin.create_topic_with(
            &topic,
            input_partitions,
            cfg.changelog_replication,
            &[("cleanup.policy", "compact")],
        ) {
            Ok(()) => {}
            Err(Error::Config(m)) if m.contains("exists with") => return Err(layout(m)),
            Err(e) => return Err(e),
        }
        let policy = admin.topic_config(&topic, "cleanup.policy")?;
        if !policy.as_deref().is_some_and(|p| p.split(',').any(|p| p.trim() == "compact")) {
            return Err(layout(format!("has cleanup.policy={}", policy.unwrap_or_default())));
        }
    }
    Ok(())
}

/// Rebuilds the stores of input `partition` from their changelogs and returns them.
///
/// First the partition's committed offset is fetched as *stable* (the consumer is
/// read_committed, so librdkafka sets `require_stable`): that waits out any transaction of a
/// previous owner that carried this partition's offsets, and with them its changelog
/// records. Then every changelog partition is read with read_committed to its end.
pub(crate) fn restore(cfg: &PipelineConfig, partition: i32, deadline: Instant) -> Result<(PartitionState, u64)> {
    let started = Instant::now();
    let mut state = PartitionState::new(&cfg.application_id, &cfg.stores, partition);
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cfg.bootstrap_servers);
    cfg.consumer_properties.apply(&mut cc);
    cc.set("group.id", &cfg.application_id)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .set("log_level", "3");
    let consumer: BaseConsumer<QuietEof> = cc
        .create_with_context(QuietEof)
        .map_err(|e| Error::Config(format!("state restore consumer: {}", crate::config::client_error(&e))))?;
    let timeout = |what: String, last: String| Error::TaskTimeout { what, timeout: cfg.task_timeout, last };

    let mut input = TopicPartitionList::new();
    let _ = input.add_partition(&cfg.input_topics[0], partition);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match consumer.committed_offsets(input.clone(), remaining.min(Duration::from_secs(10))) {
            Ok(_) => {
                tracing::debug!(
                    partition,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "stable committed offset fetched"
                );
                break;
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(timeout(
                    format!(
                        "fetching the stable committed offset of {}-{partition} before restoring its state",
                        cfg.input_topics[0]
                    ),
                    e.to_string(),
                ))
            }
            Err(e) => {
                tracing::debug!(error = %e, partition, "committed offset not stable yet");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    // One changelog at a time: librdkafka's end-of-partition event names only the
    // partition number, which every store's changelog shares. The read ends at the first
    // of: the record just before the end offset, or the end-of-partition event (the end
    // offset may be a transaction marker, which is never delivered).
    let mut records = vec![0u64; cfg.stores.len()];
    for (i, spec) in cfg.stores.iter().enumerate() {
        let topic = changelog_topic(&cfg.application_id, &spec.name);
        // The end to read to: the last stable offset, as this read_committed consumer sees
        // it. An empty changelog (a new store) needs no fetch at all.
        let remaining = deadline.saturating_duration_since(Instant::now());
        let (low, high) = consumer
            .fetch_watermarks(&topic, partition, remaining.min(Duration::from_secs(30)))
            .map_err(|e| Error::Kafka {
                op: format!("reading the end offsets of {topic} [{partition}]"),
                class: crate::error::classify(&e),
                source: Box::new(e),
                hint: "check that the changelog topic exists and is readable by this principal",
            })?;
        if high <= low {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        let _ = tpl.add_partition_offset(&topic, partition, Offset::Offset(low));
        consumer.assign(&tpl).map_err(|e| Error::Internal(format!("state restore assign: {e}")))?;
        let mut batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        loop {
            if Instant::now() >= deadline {
                return Err(timeout(
                    format!("restoring store {:?} of partition {partition} from {topic}", spec.name),
                    format!("{} changelog records read", records[i]),
                ));
            }
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    let Some(key) = m.key() else {
                        tracing::warn!(topic, offset = m.offset(), "changelog record without a key skipped");
                        continue;
                    };
                    batch.push((key.to_vec(), m.payload().map(<[u8]>::to_vec)));
                    records[i] += 1;
                    if batch.len() >= 10_000 {
                        state.backend_mut(i).write_batch(std::mem::take(&mut batch));
                    }
                    if m.offset() + 1 >= high {
                        break;
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => {
                    return Err(Error::Kafka {
                        op: format!("restoring store {:?} of partition {partition} from {topic}", spec.name),
                        class: crate::error::classify(&e),
                        source: Box::new(e),
                        hint: "check that the changelog topic exists and is readable by this principal",
                    })
                }
                None => {}
            }
        }
        state.backend_mut(i).write_batch(batch);
    }
    let elapsed = started.elapsed();
    for ((store, entries, bytes), n) in state.sizes().into_iter().zip(&records) {
        crate::metrics::state_restored(&cfg.application_id, store, *n, elapsed);
        tracing::info!(
            store,
            partition,
            changelog_records = n,
            entries,
            bytes,
            elapsed_ms = elapsed.as_millis() as u64,
            "state restored"
        );
    }
    Ok((state, records.iter().sum()))
}
