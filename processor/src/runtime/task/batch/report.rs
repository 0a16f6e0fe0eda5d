//! How a batch tells the hooks, the metrics, the span and the debug log how each attempt
//! went.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::Batch;
use crate::observe::{Outcome, Reconciliation, TransactionEvent};
use crate::partition::TopicPartition;
use crate::runtime::task::Task;
use crate::txn::CycleStats;

impl Batch {
    /// Tells the hooks, the metrics, the span and the debug log how an attempt went.
    /// `closing`: when the batch's collection ended (the attempt's start, or its closing
    /// steps' when it began while collecting); `total`: the transaction's wall time.
    pub(super) fn report(
        &mut self,
        task: &mut Task,
        outputs_per_partition: &HashMap<TopicPartition, u64>,
        closing: Instant,
        total: Duration,
        stats: CycleStats,
        outcome: &Outcome,
    ) {
        let batch = &self.records;
        let records = batch.len();
        let span = tracing::Span::current();
        span.record("duration_us", total.as_micros() as u64);
        match outcome {
            Outcome::Committed | Outcome::Reconciled { found: Reconciliation::Committed, .. } => {
                span.record(
                    "outcome",
                    if *outcome == Outcome::Committed { "committed" } else { "reconciled: committed" },
                );
                task.metrics.committed(records, stats.process, stats.commit, total);
                let mut inputs: HashMap<TopicPartition, u64> = HashMap::new();
                for r in batch {
                    *inputs.entry((r.topic.clone(), r.partition)).or_default() += 1;
                }
                let mut dead: HashMap<TopicPartition, u64> = HashMap::new();
                for origin in task.processing.dead_lettered() {
                    if let Some((t, p, _)) = crate::record::parse_origin(origin.as_bytes()) {
                        *dead.entry((t.into(), p)).or_default() += 1;
                    }
                }
                for (tp, n) in &inputs {
                    let out = outputs_per_partition.get(tp).copied().unwrap_or(0);
                    task.metrics.partition_records(tp, *n, out, dead.get(tp).copied().unwrap_or(0));
                }
                tracing::debug!(
                    task = task.id,
                    records,
                    outputs = stats.outputs,
                    commit_us = stats.commit.as_micros() as u64,
                    "transaction committed"
                );
            }
            Outcome::Aborted { class, .. } => {
                span.record("outcome", "aborted");
                task.metrics.aborted(*class);
            }
            Outcome::Reconciled { .. } => {
                span.record("outcome", "reconciled: aborted");
            }
            Outcome::GaveUp { .. } => {
                span.record("outcome", "gave_up");
            }
            Outcome::Dropped { .. } => {
                span.record("outcome", "dropped");
                task.metrics.interrupted();
            }
        }
        if task.shared.hooks.is_empty() {
            return;
        }
        // The batch's first attempt only: a replay collects nothing and follows its failure.
        let (collect, idle) = match self.collect_started.take() {
            Some(first) => {
                (closing.saturating_duration_since(first), first.saturating_duration_since(task.last_cycle_end))
            }
            None => (Duration::ZERO, Duration::ZERO),
        };
        task.last_cycle_end = Instant::now();
        let distinct: BTreeSet<(&str, i32)> = batch.iter().map(|r| (r.topic.as_str(), r.partition)).collect();
        let partitions = distinct.into_iter().map(|(t, p)| (t.to_string(), p)).collect();
        let event = TransactionEvent {
            partitions,
            collect,
            idle,
            transactional_id: task.transactional_id.clone(),
            records,
            outputs: stats.outputs,
            process: stats.process,
            await_acks: stats.await_acks,
            commit: stats.commit,
            total,
            outcome: outcome.clone(),
        };
        for hook in &task.shared.hooks {
            hook(&event);
        }
    }
}
