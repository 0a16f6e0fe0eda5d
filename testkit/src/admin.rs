//! Cluster chores for tests, examples, benchmarks and the CLI: topic creation (re-exported
//! from [`kafka_eos::admin`]), writing sample input, and waiting until a consumer group
//! has committed everything.
//!
//! [`ClientExt`] adds the data operations to [`Client`], which carries the bootstrap servers
//! and any client properties (security settings) into every client it creates; the free
//! functions are the same operations for a cluster that needs no properties.
//!
//! All functions block (they wait on the cluster): from async code, call them inside
//! `tokio::task::spawn_blocking`.

use std::time::{Duration, Instant};

use kafka_eos::config::client_error;
use kafka_eos::{Error, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::TopicPartitionList;

use crate::write::Writer;

pub use kafka_eos::admin::*;

/// Writing sample input and watching a group's lag, on a [`Client`]'s cluster.
pub trait ClientExt {
    /// See [`produce_sequence`].
    fn produce_sequence(&self, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()>;
    /// See [`produce`].
    fn produce(&self, topic: &str, records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>) -> Result<()>;
    /// Every committed record of `topic` (see [`crate::read::read_all`]).
    fn read_all(&self, topic: &str, timeout: Duration) -> Result<Vec<kafka_eos::InputRecord>>;
    /// See [`group_lag`].
    fn group_lag(&self, group: &str, topics: &[String]) -> Result<i64>;
    /// See [`wait_for_catch_up`].
    fn wait_for_catch_up(&self, group: &str, topics: &[String], timeout: Duration) -> Result<()>;
}

/// Up to this many offsets behind, a partition's lag is counted in records, read: a
/// transactional topic's offsets include commit markers (and aborted records), which a
/// read_committed consumer never gets, so a group that read everything of it stays a marker
/// or more behind the end offset. Farther behind, the lag is counted in offsets.
const EXACT_LAG: i64 = 1_000;

/// How many records a read_committed consumer of `client`'s cluster gets from `topic`
/// [`partition`] between offsets `from` and `high`.
fn records_between(client: &Client, topic: &str, partition: i32, from: i64, high: i64) -> Result<i64> {
    let timeout = Duration::from_secs(10);
    let consumer: BaseConsumer<QuietEof> = client
        .config()
        .set("group.id", "kafka-eos-lag")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .create_with_context(QuietEof)
        .map_err(|e| Error::Config(client_error(&e)))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(from))
        .map_err(|e| Error::Internal(format!("lag: {e}")))?;
    consumer.assign(&tpl).map_err(|e| unreachable(client, timeout, e))?;
    let (deadline, mut records) = (Instant::now() + timeout, 0);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) if rdkafka::Message::offset(&m) < high => records += 1,
            Some(Ok(_)) | Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(records),
            _ => {}
        }
    }
    Err(unreachable(client, timeout, format!("reading {topic} [{partition}] from {from} to {high}")))
}

fn unreachable(client: &Client, timeout: Duration, e: impl std::fmt::Display) -> Error {
    Error::Unreachable { servers: client.bootstrap.clone(), timeout, detail: e.to_string() }
}

impl ClientExt for Client {
    fn produce_sequence(&self, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()> {
        let mut value = vec![b'.'; value_size];
        self.produce(
            topic,
            (0..count).map(|i| {
                let key = i.to_string().into_bytes();
                let n = key.len().min(value_size);
                value[..n].copy_from_slice(&key[..n]);
                (Some((i % partitions as u64) as i32), key, value.clone())
            }),
        )
    }

    fn produce(&self, topic: &str, records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>) -> Result<()> {
        let writer = Writer::new(self)?;
        writer.send_all(topic, records)?;
        writer.flush_all_delivered(Duration::from_secs(60)).map(|_| ())
    }

    fn read_all(&self, topic: &str, timeout: Duration) -> Result<Vec<kafka_eos::InputRecord>> {
        crate::read::read_all(self, topic, timeout)
    }

    fn group_lag(&self, group: &str, topics: &[String]) -> Result<i64> {
        let timeout = Duration::from_secs(10);
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .map_err(|e| Error::Config(client_error(&e)))?;
        let mut tpl = TopicPartitionList::new();
        for t in topics {
            let md = consumer.fetch_metadata(Some(t), timeout).map_err(|e| unreachable(self, timeout, e))?;
            for p in md.topics().first().map(|t| t.partitions()).unwrap_or_default() {
                tpl.add_partition(t, p.id());
            }
        }
        let committed = consumer.committed_offsets(tpl, timeout).map_err(|e| unreachable(self, timeout, e))?;
        let mut lag = 0;
        for e in committed.elements() {
            let (_, high) = consumer
                .fetch_watermarks(e.topic(), e.partition(), timeout)
                .map_err(|e| unreachable(self, timeout, e))?;
            let from = e.offset().to_raw().unwrap_or(0).max(0);
            lag += match high - from {
                gap if gap > 0 && gap <= EXACT_LAG => records_between(self, e.topic(), e.partition(), from, high)?,
                gap => gap.max(0),
            };
        }
        Ok(lag)
    }

    fn wait_for_catch_up(&self, group: &str, topics: &[String], timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.group_lag(group, topics) {
                Ok(0) => return Ok(()),
                Ok(lag) => format!("lag {lag}"),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return Err(Error::TaskTimeout { what: format!("group {group} catching up"), timeout, last });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Writes `count` records to `topic` with an idempotent producer, record `i` to partition
/// `i % partitions` with key `i` (decimal) and a value of `value_size` bytes starting with
/// `i`. Returns once every record is acknowledged.
pub fn produce_sequence(bootstrap: &str, topic: &str, partitions: i32, count: u64, value_size: usize) -> Result<()> {
    Client::new(bootstrap).produce_sequence(topic, partitions, count, value_size)
}

/// Writes `(partition, key, value)` records to `topic` with an idempotent producer (a
/// `None` partition lets the partitioner choose by key) and waits until every one is
/// acknowledged. Each call creates and closes a producer: to write often, keep a
/// [`Writer`] instead.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>,
) -> Result<()> {
    Client::new(bootstrap).produce(topic, records)
}

/// The group's lag: for every partition of `topics`, the records between its committed
/// offset (0 without one) and its end, as a read_committed consumer gets them — transaction
/// markers and aborted records are not counted (past 1,000 offsets behind, the offsets
/// are). 0 means the group has committed everything.
pub fn group_lag(bootstrap: &str, group: &str, topics: &[String]) -> Result<i64> {
    Client::new(bootstrap).group_lag(group, topics)
}

/// Waits until [`group_lag`] is 0, or fails after `timeout` with the lag (or error) left.
/// Errors such as `NOT_COORDINATOR` while the group coordinator loads are retried.
pub fn wait_for_catch_up(bootstrap: &str, group: &str, topics: &[String], timeout: Duration) -> Result<()> {
    Client::new(bootstrap).wait_for_catch_up(group, topics, timeout)
}

/// Runs `pipeline` until its group (`group`, the pipeline's application id) has caught up on
/// `topics`, then shuts it down gracefully and returns its summary.
///
/// Why not `tokio::spawn(pipeline.run())` and [`wait_for_catch_up`]: a pipeline that fails
/// early (a sink that cannot connect, a processor that panics) would then be noticed only
/// when the wait times out, and its error would be lost. Here the pipeline's own error is
/// returned as soon as it stops; a pipeline that stops cleanly before catching up is an
/// [`Error::Internal`]. After `timeout` the pipeline is shut down and the lag left is the
/// error ([`Error::TaskTimeout`]). Must be called from a multi-thread Tokio runtime.
pub async fn run_until_caught_up(
    pipeline: kafka_eos::Pipeline,
    bootstrap: &str,
    group: &str,
    topics: &[String],
    timeout: Duration,
) -> Result<kafka_eos::Summary> {
    run_until_settled(pipeline, bootstrap, group, topics, timeout, Duration::ZERO).await
}

/// [`run_until_caught_up`], then on until the pipeline has written no output for `quiet`
/// (within the same `timeout`): for pipelines whose [timers](kafka_eos::timers) still emit
/// after the input is consumed — an idle advance closing the last windows.
pub async fn run_until_settled(
    pipeline: kafka_eos::Pipeline,
    bootstrap: &str,
    group: &str,
    topics: &[String],
    timeout: Duration,
    quiet: Duration,
) -> Result<kafka_eos::Summary> {
    let handle = pipeline.shutdown_handle();
    let mut running = tokio::spawn(pipeline.run());
    let deadline = Instant::now() + timeout;
    let client = Client::new(bootstrap);
    loop {
        let (c, g, t) = (client.clone(), group.to_string(), topics.to_vec());
        let check = async {
            let lag = tokio::task::spawn_blocking(move || c.group_lag(&g, &t)).await;
            let last = match lag.map_err(|e| Error::Internal(format!("lag check: {e}")))? {
                Ok(0) => return Ok(None),
                Ok(lag) => format!("lag {lag}"),
                Err(e) => e.to_string(),
            };
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, Error>(Some(last))
        };
        tokio::select! {
            ended = &mut running => return Err(stopped_early(group, ended)),
            checked = check => match checked? {
                None => break,
                Some(last) if Instant::now() > deadline => {
                    // Why it is stuck: a task whose start does not complete says what it
                    // is doing; otherwise, often, the pipeline's own error.
                    let health = handle.health();
                    let starting: String = health
                        .starting
                        .iter()
                        .map(|t| format!("; task {} still starting after {} ms ({})", t.task, t.starting_ms, t.phase))
                        .collect();
                    handle.shutdown();
                    let stopped = match tokio::time::timeout(Duration::from_secs(30), running).await {
                        Ok(Ok(Err(e))) => format!("; the pipeline, shut down, stopped with: {e}"),
                        Ok(_) => String::new(),
                        Err(_) => "; the pipeline did not stop within 30 s of its shutdown".into(),
                    };
                    let assigned = health.partitions.len();
                    let last = format!("{last}, {assigned} partitions assigned to this instance{starting}{stopped}");
                    return Err(Error::TaskTimeout { what: format!("group {group} catching up"), timeout, last });
                }
                Some(_) => {}
            },
        }
    }
    let (mut outputs, mut changed) = (handle.summary().records_out, Instant::now());
    while changed.elapsed() < quiet && Instant::now() < deadline {
        tokio::select! {
            ended = &mut running => return Err(stopped_early(group, ended)),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let now = handle.summary().records_out;
        if now != outputs {
            (outputs, changed) = (now, Instant::now());
        }
    }
    handle.shutdown();
    running.await.map_err(|e| Error::Internal(format!("the pipeline {group} panicked: {e}")))?
}

fn stopped_early(group: &str, ended: std::result::Result<Result<kafka_eos::Summary>, tokio::task::JoinError>) -> Error {
    match ended {
        Ok(Err(e)) => e,
        Ok(Ok(summary)) => Error::Internal(format!(
            "the pipeline {group} stopped before its group caught up ({} records in); was it shut down?",
            summary.records_in
        )),
        Err(e) => Error::Internal(format!("the pipeline {group} panicked: {e}")),
    }
}
