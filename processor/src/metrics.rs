//! Metrics, through the `metrics` crate: any recorder the application installs receives
//! them; [`PipelineBuilder::ops_address`](crate::PipelineBuilder::ops_address) installs a
//! Prometheus one and serves it. Names follow Kafka's where one exists (Kafka Streams'
//! `commit-latency`, `commit-total`, `process-latency`; the Java producer's
//! `txn-*-time-ns-total`; librdkafka's `consumer_lag` and `eos.producer_epoch`).
//!
//! Every metric carries `pipeline` (the application id); per-partition ones also carry
//! `partition` (`topic-partition`). Transaction-level metrics of the per-consumer and
//! at-least-once modes, whose one transaction spans every partition, use
//! `partition="all"`.
//!
//! | name | type | meaning |
//! |---|---|---|
//! | `kafka_eos_commit_latency_seconds` | histogram | the commit step: `send_offsets_to_transaction` + `commit_transaction` |
//! | `kafka_eos_transaction_latency_seconds` | histogram | a whole cycle, `begin` to end of commit (a batch processed as it is collected begins at its first record: the interval included) |
//! | `kafka_eos_records_per_transaction` | histogram | input records per committed transaction |
//! | `kafka_eos_commit_total` | counter | committed transactions |
//! | `kafka_eos_abort_total{reason}` | counter | aborted transactions, `reason` = `processor`, `retriable`, `abortable`, `interrupted` (a failing batch dropped on revocation, lost partitions or shutdown) |
//! | `kafka_eos_process_latency_seconds` | histogram | processor + produce time per transaction |
//! | `kafka_eos_records_in_total`, `kafka_eos_records_out_total` | counter | committed input / output records |
//! | `kafka_eos_dead_lettered_total` | counter | records routed to the dead-letter topic |
//! | `kafka_eos_txn_time_ns_total{call}` | counter | time blocked in `init`, `begin`, `send_offsets`, `commit`, `abort` |
//! | `kafka_eos_txn_init_latency_seconds` | histogram | `init_transactions`, with its connection warm-up (per producer creation) |
//! | `kafka_eos_rebalances_total` | counter | assignments received |
//! | `kafka_eos_revoked_records_handed_back_total` | counter | records of a revoked partition's collected batch dropped uncommitted for the next owner to read again: per-partition mode past the transaction slot bound, where committing would queue for a slot inside the rebalance callback |
//! | `kafka_eos_rebalance_callback_seconds{step}` | histogram | a rebalance callback's run, `step` = `assign` (tasks started, producers initialised), `revoke` (moved tasks' last commits) or `error`; under the incremental protocols librdkafka pauses every assigned partition meanwhile |
//! | `kafka_eos_transaction_reconciled_total{outcome}` | counter | transactions whose outcome was unknown to the task (a commit step without a definite answer, a fatal producer, a refused abort), fenced with a fresh producer and reconciled from the stable committed offsets: `outcome` = `committed` or `aborted` (then replayed) |
//! | `kafka_eos_producers_fenced_total` | counter | producers given up: fenced by a newer owner, or an unknown outcome that could not be reconciled (the partitions go back to the group) |
//! | `kafka_eos_partitions_unserved` | gauge | assigned partitions without a task: left waiting by per-partition mode's task bound (`max_partition_tasks`), or whose task's start is being retried |
//! | `kafka_eos_consumer_lag` | gauge | librdkafka's consumer lag per partition (statistics) |
//! | `kafka_eos_producer_epoch{transactional_id}` | gauge | librdkafka's `eos.producer_epoch` (statistics) |
//! | `kafka_eos_state_restore_seconds{store}` | histogram | time to rebuild a partition's stores from their changelogs |
//! | `kafka_eos_state_restore_records_total{store}` | counter | changelog records read by restores |
//! | `kafka_eos_changelog_records_total{store}` | counter | changelog records committed (one per changed key per transaction) |
//! | `kafka_eos_duplicates_dropped_total{store}` | counter | records dropped by dedup (committed) |
//! | `kafka_eos_late_records_total{store}` | counter | records routed to a late-records topic by a window, or refused by a join (committed) |
//! | `kafka_eos_window_corrections_total{store}` | counter | window results changed after their window closed: corrections and retracted sessions (committed) |

use std::collections::HashMap;
use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Histogram};

use crate::counters::Tally;
use crate::error::ErrorClass;
use crate::observe::Reconciliation;
use crate::partition::TopicPartition;

fn partition_label(tp: &TopicPartition) -> String {
    format!("{}-{}", tp.0, tp.1)
}

/// Time blocked in each transaction call, like the Java producer's `txn-*-time-ns-total`.
pub(crate) struct TxnTimers {
    pub init: Counter,
    pub begin: Counter,
    pub send_offsets: Counter,
    pub commit: Counter,
    pub abort: Counter,
    pub init_latency: Histogram,
}

impl TxnTimers {
    pub(crate) fn new(pipeline: &str, partition: &str) -> TxnTimers {
        let c = |call: &'static str| counter!("kafka_eos_txn_time_ns_total", "pipeline" => pipeline.to_string(), "partition" => partition.to_string(), "call" => call);
        TxnTimers {
            init: c("init"),
            begin: c("begin"),
            send_offsets: c("send_offsets"),
            commit: c("commit"),
            abort: c("abort"),
            init_latency: histogram!("kafka_eos_txn_init_latency_seconds", "pipeline" => pipeline.to_string(), "partition" => partition.to_string()),
        }
    }
}

pub(crate) fn add_ns(c: &Counter, d: Duration) {
    c.increment(d.as_nanos() as u64);
}

/// A task's metric handles, registered once.
pub(crate) struct TaskMetrics {
    pipeline: String,
    commit_latency: Histogram,
    transaction_latency: Histogram,
    records_per_transaction: Histogram,
    process_latency: Histogram,
    commits: Counter,
    aborts: HashMap<&'static str, Counter>,
    /// Indexed by [`Reconciliation`]: committed, aborted.
    reconciled: [Counter; 2],
    per_partition: HashMap<TopicPartition, (Counter, Counter, Counter)>,
}

impl TaskMetrics {
    /// `partition` is `topic-p` for a per-partition task, `all` otherwise.
    pub(crate) fn new(pipeline: &str, partition: &str) -> TaskMetrics {
        let (p, q) = (pipeline.to_string(), partition.to_string());
        let aborts = ["processor", "retriable", "abortable", "interrupted"]
            .into_iter()
            .map(|r| {
                (r, counter!("kafka_eos_abort_total", "pipeline" => p.clone(), "partition" => q.clone(), "reason" => r))
            })
            .collect();
        let reconciled = [Reconciliation::Committed, Reconciliation::Aborted].map(|r| {
            counter!("kafka_eos_transaction_reconciled_total", "pipeline" => p.clone(), "partition" => q.clone(), "outcome" => r.as_str())
        });
        TaskMetrics {
            reconciled,
            commit_latency: histogram!("kafka_eos_commit_latency_seconds", "pipeline" => p.clone(), "partition" => q.clone()),
            transaction_latency: histogram!("kafka_eos_transaction_latency_seconds", "pipeline" => p.clone(), "partition" => q.clone()),
            records_per_transaction: histogram!("kafka_eos_records_per_transaction", "pipeline" => p.clone(), "partition" => q.clone()),
            process_latency: histogram!("kafka_eos_process_latency_seconds", "pipeline" => p.clone(), "partition" => q.clone()),
            commits: counter!("kafka_eos_commit_total", "pipeline" => p.clone(), "partition" => q),
            aborts,
            per_partition: HashMap::new(),
            pipeline: p,
        }
    }

    pub(crate) fn committed(&mut self, records: usize, process: Duration, commit: Duration, total: Duration) {
        self.commits.increment(1);
        self.records_per_transaction.record(records as f64);
        self.process_latency.record(process.as_secs_f64());
        self.commit_latency.record(commit.as_secs_f64());
        self.transaction_latency.record(total.as_secs_f64());
    }

    /// Counts a committed batch's records per partition: its inputs (`partitions`, one
    /// entry per record), the outputs each produced and the dead letters (by their origin).
    pub(crate) fn batch_committed<'a>(
        &mut self,
        partitions: impl Iterator<Item = TopicPartition>,
        outputs: &HashMap<TopicPartition, u64>,
        dead_lettered: impl Iterator<Item = &'a str>,
    ) {
        let mut inputs: HashMap<TopicPartition, u64> = HashMap::new();
        for tp in partitions {
            *inputs.entry(tp).or_default() += 1;
        }
        let mut dead: HashMap<TopicPartition, u64> = HashMap::new();
        for origin in dead_lettered {
            if let Some((t, p, _)) = crate::record::parse_origin(origin.as_bytes()) {
                *dead.entry((t.into(), p)).or_default() += 1;
            }
        }
        for (tp, n) in &inputs {
            let out = outputs.get(tp).copied().unwrap_or(0);
            self.partition_records(tp, *n, out, dead.get(tp).copied().unwrap_or(0));
        }
    }

    /// Counts one partition's committed records.
    fn partition_records(&mut self, tp: &TopicPartition, records_in: u64, records_out: u64, dead: u64) {
        let pipeline = &self.pipeline;
        let (i, o, d) = self.per_partition.entry(tp.clone()).or_insert_with(|| {
            let l = partition_label(tp);
            (
                counter!("kafka_eos_records_in_total", "pipeline" => pipeline.clone(), "partition" => l.clone()),
                counter!("kafka_eos_records_out_total", "pipeline" => pipeline.clone(), "partition" => l.clone()),
                counter!("kafka_eos_dead_lettered_total", "pipeline" => pipeline.clone(), "partition" => l),
            )
        });
        i.increment(records_in);
        o.increment(records_out);
        d.increment(dead);
    }

    pub(crate) fn aborted(&self, class: Option<ErrorClass>) {
        let reason = match class {
            None => "processor",
            Some(ErrorClass::Retriable) => "retriable",
            Some(_) => "abortable",
        };
        self.aborts[reason].increment(1);
    }

    /// A transaction of unknown outcome, reconciled (see `runtime/reconcile.rs`).
    pub(crate) fn reconciled(&self, found: Reconciliation) {
        self.reconciled[found as usize].increment(1);
    }

    /// A failing batch's last abort, after which it was dropped because the task was
    /// interrupted (revoked, lost, shutting down).
    pub(crate) fn interrupted(&self) {
        self.aborts["interrupted"].increment(1);
    }
}

pub(crate) fn rebalance(pipeline: &str) {
    counter!("kafka_eos_rebalances_total", "pipeline" => pipeline.to_string()).increment(1);
}

/// One rebalance callback's run on the consumer thread, `step` = `assign`, `revoke` or
/// `error`: under the incremental protocols every assigned partition is paused for it.
pub(crate) fn rebalance_callback(pipeline: &str, step: &'static str, took: Duration) {
    histogram!("kafka_eos_rebalance_callback_seconds", "pipeline" => pipeline.to_string(), "step" => step)
        .record(took.as_secs_f64());
}

/// Records of a revoked partition's collected batch handed back uncommitted (per-partition
/// mode past the transaction slot bound: `runtime::task`'s `revoke` module).
pub(crate) fn handed_back(pipeline: &str, records: usize) {
    counter!("kafka_eos_revoked_records_handed_back_total", "pipeline" => pipeline.to_string())
        .increment(records as u64);
}

pub(crate) fn producer_fenced(pipeline: &str) {
    counter!("kafka_eos_producers_fenced_total", "pipeline" => pipeline.to_string()).increment(1);
}

pub(crate) fn partitions_unserved(pipeline: &str, n: usize) {
    gauge!("kafka_eos_partitions_unserved", "pipeline" => pipeline.to_string()).set(n as f64);
}

pub(crate) fn consumer_lag(pipeline: &str, topic: &str, partition: i32, lag: i64) {
    gauge!("kafka_eos_consumer_lag", "pipeline" => pipeline.to_string(), "partition" => format!("{topic}-{partition}"))
        .set(lag as f64);
}

pub(crate) fn producer_epoch(pipeline: &str, transactional_id: &str, epoch: i64) {
    gauge!("kafka_eos_producer_epoch", "pipeline" => pipeline.to_string(), "transactional_id" => transactional_id.to_string())
        .set(epoch as f64);
}

pub(crate) fn state_restored(pipeline: &str, store: &str, records: u64, elapsed: Duration) {
    let labels = [("pipeline", pipeline.to_string()), ("store", store.to_string())];
    histogram!("kafka_eos_state_restore_seconds", &labels).record(elapsed.as_secs_f64());
    counter!("kafka_eos_state_restore_records_total", &labels).increment(records);
}

/// A committed transaction's changelog records of one store.
pub(crate) fn changelog_committed(pipeline: &str, store: &str, n: u64) {
    counter!("kafka_eos_changelog_records_total", "pipeline" => pipeline.to_string(), "store" => store.to_string())
        .increment(n);
}

/// A committed transaction's operator tally of one store.
pub(crate) fn tally_committed(pipeline: &str, tally: Tally, store: &str, n: u64) {
    let name = match tally {
        Tally::Duplicate => "kafka_eos_duplicates_dropped_total",
        Tally::Late => "kafka_eos_late_records_total",
        Tally::Correction => "kafka_eos_window_corrections_total",
    };
    counter!(name, "pipeline" => pipeline.to_string(), "store" => store.to_string()).increment(n);
}
