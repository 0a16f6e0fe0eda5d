//! Reading topics back as a read_committed consumer sees them: what a test (or the
//! verifier) needs to check a pipeline's outputs.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kafka_eos::admin::{Client, QuietEof};
use kafka_eos::config::client_error;
use kafka_eos::InputRecord;
use kafka_eos::{Error, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

/// Reads `topic` with `read_committed` (unless the client's properties say otherwise) from
/// the beginning until every partition reports its end, calling `f` for each record; fails with [`Error::TaskTimeout`] at `deadline`.
/// The end is the last stable offset when the read reaches it: records of transactions
/// still open then are not read. So the read first waits, up to [`SETTLE`], until no
/// partition has a transaction in progress (its last stable offset equals its high
/// watermark): the coordinator writes a committed transaction's markers *after* it told
/// the producer that the commit succeeded, so a read started just after a pipeline's last
/// commit could otherwise stop short of records that are committed.
pub fn read_to_end(
    client: &Client,
    topic: &str,
    deadline: Instant,
    mut f: impl FnMut(&BorrowedMessage<'_>),
) -> Result<()> {
    let started = Instant::now();
    let mut cc = client.config();
    cc.set("group.id", "kafka-eos-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        // librdkafka stops fetching for `fetch.queue.backoff.ms` (default 1 s) whenever its
        // queue is full: a reader that drains the queue at once would wait most of that
        // second.
        .set("fetch.queue.backoff.ms", "10");
    // The client's properties last: they may override the defaults above (a test reading
    // `read_uncommitted` to see aborted records, for one).
    client.properties.apply(&mut cc);
    let consumer: BaseConsumer<QuietEof> = cc
        .create_with_context(QuietEof)
        .map_err(|e| Error::Config(format!("reader consumer: {}", client_error(&e))))?;
    let remaining = deadline.saturating_duration_since(Instant::now());
    let md = consumer.fetch_metadata(Some(topic), remaining).map_err(|e| Error::Unreachable {
        servers: client.bootstrap.clone(),
        timeout: remaining,
        detail: e.to_string(),
    })?;
    let partitions: Vec<i32> =
        md.topics().first().map(|t| t.partitions().iter().map(|p| p.id()).collect()).unwrap_or_default();
    if partitions.is_empty() {
        return Err(Error::UnknownTopics { topics: vec![topic.to_string()], servers: client.bootstrap.clone() });
    }
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        let _ = tpl.add_partition_offset(topic, *p, Offset::Beginning);
    }
    consumer.assign(&tpl).map_err(|e| Error::kafka(format!("assigning {topic} to a reader"), e))?;
    let committed_only = cc.get("isolation.level") == Some("read_committed");
    if committed_only {
        settle(client, &consumer, topic, &partitions, deadline.min(Instant::now() + SETTLE));
    }
    let mut at_end: HashSet<i32> = HashSet::new();
    while at_end.len() < partitions.len() {
        if Instant::now() >= deadline {
            return Err(Error::TaskTimeout {
                what: format!("reading {topic} to its end"),
                timeout: deadline.saturating_duration_since(started),
                last: format!("{} of {} partitions at their end", at_end.len(), partitions.len()),
            });
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                f(&m);
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => tracing::debug!(error = %e, "reader consumer error"),
            None => {}
        }
    }
    Ok(())
}

/// How long a read waits for the transactions in progress on its topic to complete: longer
/// than the default `transaction.timeout.ms` (10 s), after which the coordinator aborts a
/// transaction its producer left open.
pub const SETTLE: Duration = Duration::from_secs(15);

/// Waits until `until` for every partition's last stable offset (what `committed`, a
/// read_committed consumer, lists) to reach its high watermark (what a read_uncommitted one
/// lists); returns early, leaving the read to stop at the last stable offset, if that does
/// not happen in time (a transaction left open longer) or the offsets cannot be listed.
fn settle(client: &Client, committed: &BaseConsumer<QuietEof>, topic: &str, partitions: &[i32], until: Instant) {
    let mut cc = client.config();
    client.properties.apply(&mut cc);
    cc.set("group.id", "kafka-eos-reader").set("isolation.level", "read_uncommitted");
    let Ok(uncommitted) = cc.create::<BaseConsumer>() else { return };
    let mut open: Vec<i32> = partitions.to_vec();
    while !open.is_empty() && Instant::now() < until {
        let ask = Duration::from_secs(5);
        open.retain(|&p| {
            match (committed.fetch_watermarks(topic, p, ask), uncommitted.fetch_watermarks(topic, p, ask)) {
                (Ok((_, stable)), Ok((_, high))) => stable < high,
                _ => false,
            }
        });
        if !open.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if !open.is_empty() {
        tracing::debug!(topic, partitions = open.len(), "reading with transactions still in progress");
    }
}

/// Every committed record of `topic`, in offset order per partition (partitions one after
/// another by partition number); fails after `timeout`.
pub fn read_all(client: &Client, topic: &str, timeout: Duration) -> Result<Vec<InputRecord>> {
    let mut records = Vec::new();
    read_to_end(client, topic, Instant::now() + timeout, |m| records.push(InputRecord::from_message(m)))?;
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}

/// The `topic`'s records as `m` shows them: `partition/offset key value` with lossy UTF-8
/// and `∅` for a missing key or a tombstone, as `kafka-eos tail` prints them.
pub fn describe(m: &BorrowedMessage<'_>) -> String {
    let text = |b: Option<&[u8]>| b.map_or_else(|| "∅".to_string(), |b| String::from_utf8_lossy(b).into_owned());
    format!("{}/{} {} {}", m.partition(), m.offset(), text(m.key()), text(m.payload()))
}
