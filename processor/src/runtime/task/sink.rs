//! A task's sink ([`crate::sink`]) and the partitions it has no offset for yet: connecting it,
//! claiming partitions, its step in an attempt, and the write of an exactly-once sink after
//! the Kafka side of a batch committed. Other sinks are written inside the attempt
//! ([`batch`](super::batch)), where a failure aborts and replays (`failed.rs`). An exactly-once
//! sink's failure cannot abort: the *same* rows are written again after
//! [`Sink::recover`](crate::sink::Sink::recover), until the task's deadline, never
//! re-processed (that would produce the Kafka outputs twice).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::end::BatchEnd;
use crate::error::Error;
use crate::partition::{partition_ranges, Resume, TopicPartition};
use crate::record::{InputRecord, Topic};
use crate::runtime::interrupt::{Deadline, Interrupt};
use crate::runtime::Shared;
use crate::sink::erased::{ErasedSink, SinkFailure};
use crate::sink::{PartitionRange, SinkErrorClass, SinkGuarantee};
use crate::txn::SinkStep;

pub(super) fn sink_error(op: &str, f: SinkFailure) -> Error {
    Error::Sink { op: op.into(), class: f.class, source: f.error }
}

fn topics(partitions: &[TopicPartition]) -> Vec<(Topic, i32)> {
    partitions.iter().map(|(t, p)| (Topic::new(t), *p)).collect()
}

/// The pipeline's sink as a task holds it, connected on the task's thread.
pub(super) struct TaskSink {
    sink: Box<dyn ErasedSink>,
    /// Partitions an exactly-once sink has no offset for yet (anchored at their next batch).
    unanchored: HashSet<TopicPartition>,
}

impl TaskSink {
    /// Connects the pipeline's sink, if it has one. An exactly-once sink and state stores
    /// exclude each other (see [`crate::sink`]): refused here, at the first assignment.
    pub(super) fn connect(shared: &Shared) -> Result<Option<TaskSink>, Error> {
        let Some(factory) = shared.cfg.sink.clone() else { return Ok(None) };
        let sink = factory.connect(&shared.rt, shared.cfg.task_timeout).map_err(|f| sink_error("connect", f))?;
        if sink.guarantee() == SinkGuarantee::ExactlyOnce && !shared.cfg.stores.is_empty() {
            return Err(Error::Config(
                "an exactly-once sink cannot be combined with state stores: their changelogs commit \
                 with the Kafka transaction, before the sink's offsets, so a crash between the two \
                 would replay a batch onto state that already holds it. Declare the sink with \
                 PipelineBuilder::outbox_sink (its rows then commit with the transaction, and reach the \
                 sink from an outbox topic), keep that state in the sink's database, or use an \
                 effectively-once sink"
                    .into(),
            ));
        }
        Ok(Some(TaskSink { sink, unanchored: HashSet::new() }))
    }

    /// Whether the sink owns the offsets (and is written after the Kafka commit).
    pub(super) fn is_exactly_once(&self) -> bool {
        self.sink.guarantee() == SinkGuarantee::ExactlyOnce
    }

    /// Claims `partitions` in the sink: where each resumes, for those the sink has an offset
    /// stored (exactly-once sinks); the consumer starts them there.
    pub(super) fn claim(&mut self, shared: &Shared, partitions: &[TopicPartition], task: u64) -> Result<Resume, Error> {
        let stored = self
            .sink
            .on_assigned(&shared.rt, &topics(partitions), shared.cfg.task_timeout)
            .map_err(|f| sink_error("on_assigned", f))?;
        let exactly_once = self.is_exactly_once();
        let mut resume = Vec::new();
        for (tp, stored) in partitions.iter().zip(stored) {
            match stored {
                Some(o) => resume.push((tp.clone(), o)),
                None if exactly_once => {
                    self.unanchored.insert(tp.clone());
                }
                None => {}
            }
        }
        if !resume.is_empty() {
            tracing::info!(task, ?resume, "partitions resume from the offsets stored in the sink");
        }
        Ok(resume)
    }

    /// [`claim`](Self::claim), retried while the sink's failure is retriable (its server
    /// restarting, the connection lost: [`Sink::recover`](crate::sink::Sink::recover) runs
    /// between attempts, with backoff) until the task timeout, or until the task is
    /// interrupted (a revocation, lost partitions, the shutdown: the partitions' next owner
    /// claims them). A partition must not start anywhere but where the sink says.
    pub(super) fn claim_retrying(
        &mut self,
        shared: &Shared,
        partitions: &[TopicPartition],
        interrupt: &Interrupt,
        task: u64,
    ) -> Result<Resume, Error> {
        let task_deadline = Instant::now() + shared.cfg.task_timeout;
        let deadline = Deadline::interruptible(task_deadline, interrupt);
        let mut backoff = Duration::from_millis(100);
        loop {
            let error = match self.claim(shared, partitions, task) {
                Ok(resume) => return Ok(resume),
                Err(e @ Error::Sink { class: SinkErrorClass::Retriable | SinkErrorClass::OutcomeUnknown, .. }) => e,
                Err(e) => return Err(e),
            };
            if interrupt.expired().is_some() || Instant::now() + backoff >= task_deadline {
                return Err(error);
            }
            tracing::warn!(task, %error, ?partitions, "the sink cannot claim the partitions yet; retrying");
            deadline.sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(5));
            self.recover(shared, deadline.remaining(), task);
        }
    }

    /// Lets the sink recover from a failure (reconnect) before the next attempt.
    pub(super) fn recover(&mut self, shared: &Shared, timeout: Duration, task: u64) {
        if let Err(f) = self.sink.recover(&shared.rt, timeout) {
            tracing::warn!(task, error = %f, "sink recover failed; retrying");
        }
    }

    /// The partitions were revoked (their last batch is written or dropped).
    pub(super) fn release(&mut self, shared: &Shared, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.unanchored.remove(tp);
        }
        self.sink.on_revoked(&shared.rt, &topics(partitions), Duration::from_secs(5));
    }

    /// The sink's step in an attempt: written before the offsets, or (exactly-once) its rows
    /// prepared with the anchors of the partitions it has no offset for yet, written after
    /// the Kafka commit.
    pub(super) fn step<'a>(&'a mut self, records: &[InputRecord], rt: &'a tokio::runtime::Handle) -> SinkStep<'a> {
        if self.is_exactly_once() {
            let anchors = anchors(records, &self.unanchored);
            SinkStep::AfterCommit { sink: self.sink.as_mut(), rt, anchors }
        } else {
            SinkStep::BeforeOffsets(self.sink.as_mut(), rt)
        }
    }

    /// The Kafka side of `batch` committed: writes the prepared rows to an exactly-once sink
    /// ([`write`](Self::write)), after which its partitions are anchored. Nothing to do for
    /// another sink.
    pub(super) fn committed(
        &mut self,
        shared: &Shared,
        batch: &[InputRecord],
        interrupt: &Interrupt,
        task: u64,
    ) -> Result<(), BatchEnd> {
        if !self.is_exactly_once() {
            return Ok(());
        }
        let deadline = Deadline::interruptible(Instant::now() + shared.cfg.task_timeout, interrupt);
        self.write(shared, batch.len(), deadline, interrupt, task)?;
        for tp in batch.iter().map(|r| (r.topic.clone(), r.partition)) {
            self.unanchored.remove(&tp);
        }
        Ok(())
    }

    /// Writes the prepared batch to the exactly-once sink, after the Kafka side committed:
    /// the same rows again after a retriable failure (idempotent), until `deadline`.
    /// `Err`: give the partitions up (fenced), stop the pipeline, or drop the batch
    /// (interrupted: the partitions' next owner replays it from the sink's offsets).
    fn write(
        &mut self,
        shared: &Shared,
        records: usize,
        deadline: Deadline<'_>,
        interrupt: &Interrupt,
        task: u64,
    ) -> Result<(), BatchEnd> {
        let sink = &mut self.sink;
        let mut backoff = Duration::from_millis(100);
        loop {
            let failure = match sink.write(&shared.rt, deadline.remaining()) {
                Ok(()) => {
                    sink.clear();
                    return Ok(());
                }
                Err(f) => f,
            };
            tracing::warn!(task, records, error = %failure, "sink write failed; writing the same rows again");
            match failure.class {
                SinkErrorClass::Fenced => {
                    sink.clear();
                    return Err(BatchEnd::SinkFenced(failure.to_string()));
                }
                SinkErrorClass::Rejected | SinkErrorClass::Fatal => {
                    sink.clear();
                    return Err(BatchEnd::Stop(sink_error("write", failure)));
                }
                SinkErrorClass::Retriable | SinkErrorClass::OutcomeUnknown => {}
            }
            if let Some(because) = interrupt.expired() {
                sink.clear();
                return Err(BatchEnd::Dropped { because, reason: failure.to_string() });
            }
            if deadline.passed() || Instant::now() + backoff >= deadline.instant() {
                sink.clear();
                return Err(BatchEnd::Stop(sink_error("write", failure)));
            }
            deadline.sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if let Err(f) = sink.recover(&shared.rt, deadline.remaining()) {
                tracing::warn!(task, error = %f, "sink recover failed; retrying");
            }
        }
    }
}

/// The partitions of `batch` an exactly-once sink has no offset for yet, each with its
/// first offset in the batch as the resume point to store ([`SinkStep::AfterCommit`]).
fn anchors(batch: &[InputRecord], unanchored: &HashSet<TopicPartition>) -> Vec<PartitionRange> {
    if unanchored.is_empty() {
        return Vec::new();
    }
    partition_ranges(batch)
        .into_iter()
        .filter(|r| unanchored.contains(&(r.topic.clone(), r.partition)))
        .map(|r| PartitionRange { next_offset: r.first_offset, ..r })
        .collect()
}
