//! A revocation, read between records ([`Task::revoke`]): the revoked partitions' batch is
//! committed or, if they were *lost*, aborted and dropped; then their state, tables and sink
//! claims are let go. Past the slot bound ([`crate::runtime::slots`]) a batch that has begun no
//! transaction is *handed back* uncommitted instead (`hand_back`, or the batch's attempts for a
//! task waiting for its slot): committing would queue for a slot while every paused partition
//! waits (`docs/scaling.md`). Both count `kafka_eos_revoked_records_handed_back_total`.

use super::batch::Batch;
use super::Task;
use crate::partition::TopicPartition;
use crate::runtime::protocol::Control;

impl Task {
    /// Gives up `partitions`; returns the next offsets acknowledged for them (at-least-once:
    /// the consumer commits them before the revocation completes).
    pub(super) fn revoke(
        &mut self,
        batch: &mut Batch,
        partitions: &[TopicPartition],
        lost: bool,
    ) -> Vec<(TopicPartition, i64)> {
        if lost {
            // Their outputs cannot be committed: the open transaction goes, and the records
            // of partitions kept are processed again.
            if !batch.abandon(self) {
                batch.clear();
            }
            // Only the lost partitions' records: a worker's batch also holds partitions it
            // keeps (incremental rebalancing), committed as usual.
            let before = batch.len();
            batch.drop_partitions(partitions);
            tracing::info!(
                task = self.id,
                ?partitions,
                dropped = before - batch.len(),
                "partitions lost: dropping their uncommitted records"
            );
        } else if self.hand_back(batch, partitions) {
            // Dropped uncommitted: see the module docs.
        } else {
            batch.end(self);
        }
        // A batch dropped on this revocation (it kept failing, or was handed back) also held
        // the records of partitions this task keeps (a worker, co-partitioned inputs): they
        // are moved back once the revocation is answered ([`Task::rewind_dropped`]). Their
        // records are dropped as they come until then (they joined `rewinding` with the
        // drop), or the later ones would commit past the dropped ones.
        self.ledger.rewinds.revoked(partitions);
        let acked_offsets = partitions.iter().filter_map(|tp| self.acked.remove(tp).map(|o| (tp.clone(), o))).collect();
        self.ledger.forget(Some(partitions));
        for tp in partitions {
            self.owned.remove(tp);
        }
        // Partition n's state and tables go with its last input (co-partitioned inputs
        // share them).
        let gone: Vec<TopicPartition> =
            partitions.iter().filter(|tp| !self.owned.iter().any(|o| o.1 == tp.1)).cloned().collect();
        for tp in partitions {
            self.processing.revoke(tp, !gone.contains(tp));
        }
        self.release_tables(&gone);
        if let Some(sink) = self.sink.as_mut() {
            sink.release(&self.shared, partitions);
        }
        // Before the reply: once it is sent the consumer thread may set the next
        // revocation's interrupt, which must not be cleared here.
        self.interrupt.clear_revocation();
        acked_offsets
    }

    /// Drops a collected batch that has begun no transaction, past the slot bound, when the
    /// task gives up every partition it has (a co-partitioned task keeping some would have
    /// to rewind them); `false` when the batch is to be committed as usual.
    fn hand_back(&mut self, batch: &mut Batch, partitions: &[TopicPartition]) -> bool {
        let engaged = self.shared.slots.as_ref().is_some_and(|s| s.engaged());
        let everything = self.owned.iter().all(|tp| partitions.contains(tp));
        if batch.is_empty() || !engaged || batch.is_open() || !everything {
            return false;
        }
        tracing::info!(
            task = self.id,
            records = batch.len(),
            "revoked past the transaction slot bound: its collected batch (no transaction begun) is handed back uncommitted; the next owner reads it from the committed offset"
        );
        self.handed_back(batch.len());
        batch.clear();
        true
    }

    /// Counts records handed back (the summary's and the metric's).
    pub(super) fn handed_back(&self, records: usize) {
        self.shared.shutdown.stats().records_handed_back.add(records as u64);
        crate::metrics::handed_back(&self.shared.cfg.application_id, records);
    }
}

impl Task {
    /// Moves the partitions this task keeps of a batch dropped by an interruption back to
    /// where they must resume: their committed offsets — or, with an exactly-once sink, the
    /// offsets the sink stored, asked again by claiming them: the dropped batch's Kafka side
    /// may have committed before its rows were written (the write is what the interruption
    /// dropped), and the committed offset would skip those rows for good. Runs after the
    /// revocation is answered: the sink may be down (its failure is what dropped the write),
    /// so the claim is retried ([`Task::claim_retrying`]). Until then the kept partitions'
    /// records are dropped as they come (`rewinding`). Interrupted again, the partitions
    /// stay there, for their next owner to claim; if the sink never answers, the pipeline
    /// stops.
    pub(super) fn rewind_dropped(&mut self) {
        let kept: Vec<TopicPartition> =
            self.ledger.rewinds.take_dropped().into_iter().filter(|tp| self.owned.contains(tp)).collect();
        self.rewind(kept);
    }

    /// Has the consumer move `partitions` back to where they resume: their committed offsets
    /// or, with an exactly-once sink, the offsets it stored (see [`Task::rewind_dropped`]).
    /// Their records are dropped as they come until it has.
    pub(super) fn rewind(&mut self, partitions: Vec<TopicPartition>) {
        if partitions.is_empty() || self.producer.is_none() {
            return;
        }
        self.ledger.rewinds.wait_for(&partitions);
        if !self.sink_is_exactly_once() {
            self.ledger.floors.moved(&partitions, &[]);
            let _ = self.shared.control.send(Control::Rewind { task: self.id, partitions, resume: Vec::new() });
            return;
        }
        match self.claim_retrying(&partitions) {
            Ok(resume) => {
                self.resumed(&partitions, &resume);
                let _ = self.shared.control.send(Control::Rewind { task: self.id, partitions, resume });
            }
            Err(e) if self.interrupt.expired().is_some() => {
                tracing::warn!(task = self.id, error = %e, ?partitions, "interrupted while asking the sink where the partitions resume; their records stay dropped until they are revoked");
            }
            Err(e) => self.stop(e),
        }
    }
}
