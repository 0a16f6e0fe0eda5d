//! The reader of the [global tables](super::global): one read_committed consumer per
//! pipeline instance, on a thread of its own (its calls block: never on an async worker),
//! assigned every partition of every global table's topic, outside the consumer group.
//!
//! It first reads each partition to the high watermark seen at the start (not to the last
//! stable offset, where read_committed's end-of-partition event comes: a transaction open on
//! the table topic at the start would stop the read short of rows committed after it). Only
//! then does the pipeline join its group. From then on it follows the topics and publishes a
//! new version of the tables at most every [`PUBLISH_EVERY`] while updates come, until the
//! pipeline ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::global::{read_error, GlobalTables, GlobalView};
use crate::admin::QuietEof;
use crate::config::PipelineConfig;
use crate::error::{Error, Result};
use crate::state::changelog::{group_reader_config, is_definite, position, restore_end, retrying};

/// How long updates gather before they are published as a new version: bounds the versions
/// made (and the shards copied for them) under a stream of updates, at the cost of this
/// much delay before a batch can see an update.
const PUBLISH_EVERY: Duration = Duration::from_millis(20);

/// How long the reader waits for a record when idle, between checks for the pipeline's end.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// Is asked between reads whether the pipeline is shutting down.
pub(crate) type Stopping = Box<dyn Fn() -> bool + Send>;

/// Starts the reader of `cfg`'s global tables on its own thread and waits, without blocking
/// the async worker, until it has read them to their end. `None`: the pipeline was shut down
/// (`stopping`) before that.
pub(crate) async fn start(cfg: Arc<PipelineConfig>, stopping: Stopping) -> Result<Option<Arc<GlobalTables>>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("kafka-eos-global-tables-{}", cfg.application_id))
        .spawn(move || {
            let reader = match Reader::bootstrap(&cfg, &*stopping) {
                Ok(Some(reader)) => reader,
                other => {
                    let _ = tx.send(other.map(|_| None));
                    return;
                }
            };
            let shared = Arc::new(GlobalTables::new(reader.working.clone()));
            if tx.send(Ok(Some(shared.clone()))).is_ok() {
                reader.follow(&cfg, &shared, &*stopping);
            }
        })
        .map_err(|e| Error::Internal(format!("cannot spawn the global tables' reader thread: {e}")))?;
    rx.await.map_err(|_| Error::Internal("the global tables' reader thread panicked".into()))?
}

struct Reader {
    consumer: BaseConsumer<QuietEof>,
    /// Global table index by topic.
    index: HashMap<String, usize>,
    /// The reader's own copy, published as versions.
    working: GlobalView,
}

impl Reader {
    /// Reads every partition of every global table to the high watermark seen at its start.
    /// Fails if no partition advances for the task timeout (a transaction left open on a
    /// table topic holds the stable end back until its transaction timeout).
    fn bootstrap(cfg: &PipelineConfig, stopping: &dyn Fn() -> bool) -> Result<Option<Reader>> {
        let started = Instant::now();
        let client_error = |e: rdkafka::error::KafkaError| {
            Error::Config(format!("global table consumer: {}", crate::config::client_error(&e)))
        };
        let mut cc = group_reader_config(cfg);
        cc.set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            // The end of the read is an empty fetch: keep the broker from holding it for the
            // default 500 ms (about 10 empty fetches a second per broker when idle).
            .set("fetch.wait.max.ms", "100");
        let consumer: BaseConsumer<QuietEof> = cc.create_with_context(QuietEof).map_err(client_error)?;
        // Watermarks follow the client's isolation level: this one sees the high watermark.
        let mut uc = group_reader_config(cfg);
        uc.set("isolation.level", "read_uncommitted");
        let watermarks: BaseConsumer<QuietEof> = uc.create_with_context(QuietEof).map_err(client_error)?;

        let deadline = started + cfg.task_timeout;
        let mut ends: HashMap<(String, i32), i64> = HashMap::new();
        let mut tpl = TopicPartitionList::new();
        for def in &cfg.global_tables {
            let topic = &def.topic;
            let md = retrying(deadline, || watermarks.fetch_metadata(Some(topic), Duration::from_secs(10)))
                .map_err(|e| read_error(topic, e))?;
            let partitions = md.topics().iter().find(|t| t.name() == topic).map_or(0, |t| t.partitions().len());
            if partitions == 0 {
                return Err(Error::UnknownTopics {
                    topics: vec![topic.clone()],
                    servers: cfg.bootstrap_servers.clone(),
                });
            }
            for p in 0..partitions as i32 {
                let (low, high) = retrying(deadline, || watermarks.fetch_watermarks(topic, p, Duration::from_secs(10)))
                    .map_err(|e| read_error(topic, e))?;
                tpl.add_partition_offset(topic, p, Offset::Beginning)
                    .map_err(|e| Error::Internal(format!("global table assignment: {e}")))?;
                if high > low {
                    ends.insert((topic.clone(), p), high);
                }
            }
        }
        consumer.assign(&tpl).map_err(|e| read_error(&topics(cfg), e))?;
        let index = cfg.global_tables.iter().enumerate().map(|(i, t)| (t.topic.clone(), i)).collect();
        let mut reader = Reader { consumer, index, working: GlobalView::new(cfg.global_tables.len()) };

        let (mut read, mut progress) = (0u64, Instant::now());
        while !ends.is_empty() {
            if stopping() {
                return Ok(None);
            }
            if progress.elapsed() >= cfg.task_timeout {
                let behind: Vec<String> = ends
                    .iter()
                    .map(|((t, p), end)| format!("{t} [{p}] at {:?} of {end}", position(&reader.consumer, t, *p)))
                    .collect();
                return Err(Error::TaskTimeout {
                    what: format!("reading the global tables {} to their end", topics(cfg)),
                    timeout: cfg.task_timeout,
                    last: format!(
                        "no progress to the high watermark seen at the start: {}; a transaction left open on a \
                         table topic holds its stable end back until its transaction timeout",
                        behind.join(", ")
                    ),
                });
            }
            let before = ends.len();
            match reader.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    apply(&reader.index, &mut reader.working, cfg, &m);
                    read += 1;
                    progress = Instant::now();
                    let tp = (m.topic().to_string(), m.partition());
                    if restore_end(m.offset() + 1, ends.get(&tp).copied()) {
                        ends.remove(&tp);
                    }
                }
                // The end of a partition (its stable end), or nothing to read: a partition may
                // have moved past its end with nothing to deliver (aborted records, markers).
                Some(Err(KafkaError::PartitionEOF(_))) | None => {
                    ends.retain(|(t, p), end| position(&reader.consumer, t, *p).is_none_or(|at| at < *end));
                }
                Some(Err(e)) if is_definite(&e) => return Err(read_error(&topics(cfg), e)),
                // Transport trouble (a broker restarting): librdkafka recovers by itself.
                Some(Err(e)) => tracing::debug!(error = %e, "global table consumer error; retrying"),
            }
            if ends.len() < before {
                progress = Instant::now();
            }
        }
        tracing::info!(
            tables = topics(cfg),
            rows = ?reader.working.sizes(),
            records = read,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "global tables read"
        );
        Ok(Some(reader))
    }

    /// Applies the updates as they come and publishes them to `shared`, until the pipeline
    /// ends (stopping, stopped, or every task and the pipeline gone). A definite error (a
    /// table topic deleted, no longer readable) is handed to `shared`, which stops the
    /// pipeline at its next batch.
    fn follow(mut self, cfg: &PipelineConfig, shared: &Arc<GlobalTables>, stopping: &dyn Fn() -> bool) {
        let (mut pending, mut published) = (false, Instant::now());
        while !(stopping() || shared.stopped() || Arc::strong_count(shared) == 1) {
            let wait = if pending { PUBLISH_EVERY.saturating_sub(published.elapsed()) } else { IDLE_POLL };
            match self.consumer.poll(wait) {
                Some(Ok(m)) => {
                    apply(&self.index, &mut self.working, cfg, &m);
                    pending = true;
                }
                Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                Some(Err(e)) if is_definite(&e) => {
                    shared.fail(&topics(cfg), e);
                    return;
                }
                Some(Err(e)) => tracing::debug!(error = %e, "global table consumer error; retrying"),
            }
            if pending && published.elapsed() >= PUBLISH_EVERY {
                shared.publish(self.working.clone());
                (pending, published) = (false, Instant::now());
            }
        }
    }
}

/// Applies table record `m` to `working` (`index`: global table index by topic).
fn apply(index: &HashMap<String, usize>, working: &mut GlobalView, cfg: &PipelineConfig, m: &BorrowedMessage<'_>) {
    let Some(&i) = index.get(m.topic()) else { return };
    match m.key() {
        Some(key) => working.apply(&cfg.global_tables[i], i, key, m.payload()),
        None => tracing::warn!(topic = m.topic(), offset = m.offset(), "global table record without a key skipped"),
    }
}

fn topics(cfg: &PipelineConfig) -> String {
    cfg.global_tables.iter().map(|t| t.topic.as_str()).collect::<Vec<_>>().join(", ")
}
