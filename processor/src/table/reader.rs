//! The Kafka side of [tables](super): one read_committed consumer per table, assigned the
//! table partitions of the task's input partitions, outside the consumer group.
//!
//! Runs on the task's own thread (never on an async worker): a bootstrap blocks until the
//! new partitions are read to their end; a refresh only drains what librdkafka has already
//! fetched in the background (`poll` with a zero timeout), so it costs no round trip.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::PartitionTables;
use crate::admin::QuietEof;
use crate::config::PipelineConfig;
use crate::error::{Error, Result};
use crate::state::changelog::{group_reader_config, is_definite};

/// Most table records applied by one refresh: a burst of updates is spread over several
/// batches rather than stalling one.
const REFRESH_LIMIT: usize = 100_000;

/// The consumers of a task's tables, in declaration order.
pub(crate) struct TableReader {
    consumers: Vec<BaseConsumer<QuietEof>>,
}

impl TableReader {
    pub(crate) fn new(cfg: &PipelineConfig) -> Result<TableReader> {
        let consumers = cfg
            .tables
            .iter()
            .map(|t| {
                let mut cc = group_reader_config(cfg);
                cc.set("enable.partition.eof", "true")
                    .set("auto.offset.reset", "earliest")
                    // The end of a bootstrap read is an empty fetch (the end-of-partition
                    // event): keep the broker from holding it for the default 500 ms. Each
                    // table consumer then sends about 10 empty fetches a second when idle.
                    .set("fetch.wait.max.ms", "100");
                cc.create_with_context(QuietEof).map_err(|e| {
                    Error::Config(format!("table {:?} consumer: {}", t.topic, crate::config::client_error(&e)))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TableReader { consumers })
    }

    /// Reads table partition `p` of every table, for each of `partitions`, from its start to
    /// its end (read_committed: up to the last stable offset) into `tables`, applying the
    /// other partitions' updates met on the way. Returns the table records read.
    pub(crate) fn bootstrap(
        &self,
        cfg: &PipelineConfig,
        partitions: &[i32],
        tables: &mut HashMap<i32, PartitionTables>,
        deadline: Instant,
    ) -> Result<u64> {
        let started = Instant::now();
        let mut read = 0u64;
        for p in partitions {
            tables.insert(*p, PartitionTables::new(cfg.tables.len()));
        }
        for (index, (def, consumer)) in cfg.tables.iter().zip(&self.consumers).enumerate() {
            let mut tpl = TopicPartitionList::new();
            for p in partitions {
                tpl.add_partition_offset(&def.topic, *p, Offset::Beginning)
                    .map_err(|e| Error::Internal(format!("table assignment: {e}")))?;
            }
            consumer.incremental_assign(&tpl).map_err(|e| kafka_error(&def.topic, "assigning", e))?;
            let mut pending: HashSet<i32> = partitions.iter().copied().collect();
            while !pending.is_empty() {
                if Instant::now() >= deadline {
                    return Err(Error::TaskTimeout {
                        what: format!("reading table {} partitions {partitions:?} to their end", def.topic),
                        timeout: cfg.task_timeout,
                        last: format!("partitions {pending:?} not read to their end"),
                    });
                }
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => {
                        if let (Some(key), Some(t)) = (m.key(), tables.get_mut(&m.partition())) {
                            t.apply(def, index, key, m.payload());
                            read += 1;
                        } else if m.key().is_none() {
                            tracing::warn!(
                                topic = def.topic,
                                offset = m.offset(),
                                "table record without a key skipped"
                            );
                        }
                    }
                    Some(Err(KafkaError::PartitionEOF(p))) => {
                        pending.remove(&p);
                    }
                    Some(Err(e)) if is_definite(&e) => return Err(kafka_error(&def.topic, "reading", e)),
                    // Transport trouble (a broker restarting): librdkafka recovers by itself.
                    Some(Err(e)) => tracing::debug!(error = %e, topic = def.topic, "table consumer error; retrying"),
                    None => {}
                }
            }
        }
        for p in partitions {
            tracing::info!(partition = p, rows = ?tables[p].sizes(), records = read, elapsed_ms = started.elapsed().as_millis() as u64, "tables read");
        }
        Ok(read)
    }

    /// Applies the table updates fetched since the last call. Fails only on a definite
    /// error (the table topic deleted, or no longer readable by this principal).
    pub(crate) fn refresh(&self, cfg: &PipelineConfig, tables: &mut HashMap<i32, PartitionTables>) -> Result<()> {
        for (index, (def, consumer)) in cfg.tables.iter().zip(&self.consumers).enumerate() {
            for _ in 0..REFRESH_LIMIT {
                match consumer.poll(Duration::ZERO) {
                    Some(Ok(m)) => {
                        if let (Some(key), Some(t)) = (m.key(), tables.get_mut(&m.partition())) {
                            t.apply(def, index, key, m.payload());
                        }
                    }
                    Some(Err(KafkaError::PartitionEOF(_))) => {}
                    Some(Err(e)) if is_definite(&e) => return Err(kafka_error(&def.topic, "reading", e)),
                    Some(Err(e)) => tracing::debug!(error = %e, topic = def.topic, "table consumer error; retrying"),
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Stops reading the tables of `partitions` (revoked).
    pub(crate) fn release(&self, cfg: &PipelineConfig, partitions: &[i32]) {
        for (def, consumer) in cfg.tables.iter().zip(&self.consumers) {
            let mut tpl = TopicPartitionList::new();
            for p in partitions {
                tpl.add_partition(&def.topic, *p);
            }
            if let Err(e) = consumer.incremental_unassign(&tpl) {
                tracing::warn!(error = %e, topic = def.topic, ?partitions, "releasing table partitions failed");
            }
        }
    }
}

fn kafka_error(topic: &str, what: &str, e: KafkaError) -> Error {
    Error::kafka_failure(
        format!("{what} table topic {topic}"),
        crate::error::KafkaError::new(e),
        "check that the table topic exists, has as many partitions as the input topic, and is readable by this principal",
    )
}
