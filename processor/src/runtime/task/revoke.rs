//! A revocation, read between records ([`Task::revoke`]): the revoked partitions' batch is
//! committed (keeping the work) or, if they were *lost* (the group already gave them to
//! someone else), its open transaction aborted and their records dropped; then their state,
//! tables and sink claims are let go.
//!
//! The consumer thread waits for the answer inside the rebalance callback, and under the
//! incremental protocols librdkafka pauses every assigned partition meanwhile: what this
//! does is a pause for the partitions that stay too (`kafka_eos_rebalance_callback_seconds`).

use super::Task;
use crate::record::InputRecord;
use crate::runtime::{Control, TopicPartition};

impl Task {
    /// Gives up `partitions`; returns the next offsets acknowledged for them (at-least-once:
    /// the consumer commits them before the revocation completes).
    pub(super) fn revoke(
        &mut self,
        batch: &mut Vec<InputRecord>,
        partitions: &[TopicPartition],
        lost: bool,
    ) -> Vec<(TopicPartition, i64)> {
        if lost {
            // Their outputs cannot be committed: the open transaction goes, and the records
            // of partitions kept are processed again.
            if !self.abandon_streamed() {
                batch.clear();
            }
            // Only the lost partitions' records: a worker's batch also holds partitions it
            // keeps (incremental rebalancing), committed as usual.
            let before = batch.len();
            batch.retain(|r| !partitions.iter().any(|(t, p)| *p == r.partition && *t == r.topic));
            tracing::info!(
                task = self.id,
                ?partitions,
                dropped = before - batch.len(),
                "partitions lost: dropping their uncommitted records"
            );
        } else {
            self.flush(batch);
            // A batch dropped on this revocation (it kept failing) also held the records of
            // partitions this worker keeps: move those back to their committed offsets, or
            // their later records would commit past them.
            let kept: Vec<TopicPartition> = std::mem::take(&mut self.dropped)
                .into_iter()
                .filter(|tp| self.owned.contains(tp) && !partitions.contains(tp))
                .collect();
            if !kept.is_empty() && self.producer.is_some() {
                self.rewinding.extend(kept.iter().cloned());
                let _ = self.control.send(Control::Rewind { task: self.id, partitions: kept });
            }
        }
        let acked_offsets = partitions.iter().filter_map(|tp| self.acked.remove(tp).map(|o| (tp.clone(), o))).collect();
        for tp in partitions {
            self.owned.remove(tp);
            self.unanchored.remove(tp);
        }
        // Partition n's state and tables go with its last input (co-partitioned inputs
        // share them).
        let gone: Vec<TopicPartition> =
            partitions.iter().filter(|tp| !self.owned.iter().any(|o| o.1 == tp.1)).cloned().collect();
        for tp in partitions {
            self.processing.revoke(tp, !gone.contains(tp));
        }
        self.release_tables(&gone);
        self.release(partitions);
        // Before the reply: once it is sent the consumer thread may set the next
        // revocation's interrupt, which must not be cleared here.
        self.interrupt.clear_revocation();
        acked_offsets
    }
}
