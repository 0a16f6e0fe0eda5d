//! A task's sink ([`crate::sink`]): connecting it, claiming partitions, and the write of an
//! exactly-once sink after the Kafka side of a batch committed. Other sinks are written inside
//! the attempt ([`batch`](super::batch)), where a failure aborts and replays. An exactly-once sink's
//! failure cannot abort: the *same* rows are written again after
//! [`Sink::recover`](crate::sink::Sink::recover), until the task's deadline, never
//! re-processed (that would produce the Kafka outputs twice).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::types::{BatchEnd, Next};
use super::{Resume, Task};
use crate::error::Error;
use crate::observe::Outcome;
use crate::partition::{partition_ranges, TopicPartition};
use crate::record::InputRecord;
use crate::record::Topic;
use crate::runtime::interrupt::Deadline;
use crate::sink::erased::{ErasedSink, SinkFailure};
use crate::sink::{PartitionRange, SinkErrorClass, SinkGuarantee};
use crate::txn::SinkStep;

pub(super) fn sink_error(op: &str, f: SinkFailure) -> Error {
    Error::Sink { op: op.into(), class: f.class, source: f.error }
}

/// The sink's step in an attempt: written before the offsets, or (exactly-once) its rows
/// prepared with the anchors of the partitions it has no offset for yet, written after the
/// Kafka commit.
pub(super) fn sink_step<'a>(
    sink: Option<&'a mut (dyn ErasedSink + 'static)>,
    unanchored: &HashSet<TopicPartition>,
    records: &[InputRecord],
    rt: &'a tokio::runtime::Handle,
) -> SinkStep<'a> {
    match sink {
        None => SinkStep::None,
        Some(s) if s.guarantee() == SinkGuarantee::ExactlyOnce => {
            SinkStep::AfterCommit { sink: s, rt, anchors: anchors(records, unanchored) }
        }
        Some(s) => SinkStep::BeforeOffsets(s, rt),
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

fn topics(partitions: &[TopicPartition]) -> Vec<(Topic, i32)> {
    partitions.iter().map(|(t, p)| (Topic::new(t), *p)).collect()
}

impl Task {
    /// Connects the pipeline's sink, if it has one. An exactly-once sink and state stores
    /// exclude each other (see [`crate::sink`]): refused here, at the first assignment.
    pub(super) fn connect_sink(&mut self) -> Result<(), Error> {
        let Some(factory) = self.shared.cfg.sink.clone() else { return Ok(()) };
        let sink =
            factory.connect(&self.shared.rt, self.shared.cfg.task_timeout).map_err(|f| sink_error("connect", f))?;
        if sink.guarantee() == SinkGuarantee::ExactlyOnce && !self.shared.cfg.stores.is_empty() {
            return Err(Error::Config(
                "an exactly-once sink cannot be combined with state stores: their changelogs commit \
                 with the Kafka transaction, before the sink's offsets, so a crash between the two \
                 would replay a batch onto state that already holds it. Keep that state in the sink's \
                 database (its offsets commit with its rows), or use an effectively-once sink"
                    .into(),
            ));
        }
        self.sink = Some(sink);
        Ok(())
    }

    /// Claims `partitions` in the sink: where each resumes, for those the sink has an offset
    /// stored (exactly-once sinks); the consumer starts them there.
    pub(super) fn claim(&mut self, partitions: &[TopicPartition]) -> Result<Vec<(TopicPartition, i64)>, Error> {
        let Some(sink) = self.sink.as_mut() else { return Ok(Vec::new()) };
        let stored = sink
            .on_assigned(&self.shared.rt, &topics(partitions), self.shared.cfg.task_timeout)
            .map_err(|f| sink_error("on_assigned", f))?;
        let exactly_once = sink.guarantee() == SinkGuarantee::ExactlyOnce;
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
            tracing::info!(task = self.id, ?resume, "partitions resume from the offsets stored in the sink");
        }
        Ok(resume)
    }

    /// [`claim`](Self::claim), retried while the sink's failure is retriable (its server
    /// restarting, the connection lost: [`Sink::recover`](crate::sink::Sink::recover) runs
    /// between attempts, with backoff) until the task timeout, or until the task is
    /// interrupted (a revocation, lost partitions, the shutdown: the partitions' next owner
    /// claims them). A partition must not start anywhere but where the sink says.
    pub(super) fn claim_retrying(&mut self, partitions: &[TopicPartition]) -> Result<Resume, Error> {
        let task_deadline = Instant::now() + self.shared.cfg.task_timeout;
        let interrupt = self.interrupt.clone();
        let deadline = Deadline::interruptible(task_deadline, &interrupt);
        let mut backoff = Duration::from_millis(100);
        loop {
            let error = match self.claim(partitions) {
                Ok(resume) => return Ok(resume),
                Err(e @ Error::Sink { class: SinkErrorClass::Retriable | SinkErrorClass::OutcomeUnknown, .. }) => e,
                Err(e) => return Err(e),
            };
            if interrupt.expired().is_some() || Instant::now() + backoff >= task_deadline {
                return Err(error);
            }
            tracing::warn!(task = self.id, %error, ?partitions, "the sink cannot claim the partitions yet; retrying");
            deadline.sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if let Some(sink) = self.sink.as_mut() {
                if let Err(f) = sink.recover(&self.shared.rt, deadline.remaining()) {
                    tracing::warn!(task = self.id, error = %f, "sink recover failed; retrying");
                }
            }
        }
    }

    /// The partitions were revoked (their last batch is written or dropped).
    pub(super) fn release(&mut self, partitions: &[TopicPartition]) {
        if let Some(sink) = self.sink.as_mut() {
            sink.on_revoked(&self.shared.rt, &topics(partitions), Duration::from_secs(5));
        }
    }

    /// Whether the sink owns the offsets (and is written after the Kafka commit).
    pub(super) fn sink_is_exactly_once(&self) -> bool {
        self.sink.as_ref().is_some_and(|s| s.guarantee() == SinkGuarantee::ExactlyOnce)
    }

    /// Writes the prepared batch to the exactly-once sink, after the Kafka side committed:
    /// the same rows again after a retriable failure (idempotent), until `deadline`.
    /// `Err`: give the partitions up (fenced), stop the pipeline, or drop the batch
    /// (interrupted: the partitions' next owner replays it from the sink's offsets).
    pub(super) fn write_exactly_once(&mut self, records: usize, deadline: Deadline<'_>) -> Result<Duration, BatchEnd> {
        let started = Instant::now();
        let rt = self.shared.rt.clone();
        let Some(sink) = self.sink.as_mut() else { return Ok(Duration::ZERO) };
        let mut backoff = Duration::from_millis(100);
        loop {
            let failure = match sink.write(&rt, deadline.remaining()) {
                Ok(()) => {
                    sink.clear();
                    return Ok(started.elapsed());
                }
                Err(f) => f,
            };
            tracing::warn!(task = self.id, records, error = %failure, "sink write failed; writing the same rows again");
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
            if let Some(because) = self.interrupt.expired() {
                sink.clear();
                return Err(BatchEnd::Dropped { because, reason: failure.to_string() });
            }
            if deadline.passed() || Instant::now() + backoff >= deadline.instant() {
                sink.clear();
                return Err(BatchEnd::Stop(sink_error("write", failure)));
            }
            deadline.sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(5));
            if let Err(f) = sink.recover(&rt, deadline.remaining()) {
                tracing::warn!(task = self.id, error = %f, "sink recover failed; retrying");
            }
        }
    }
}

impl Task {
    /// The sink failed inside the cycle (before the offsets): the transaction is aborted,
    /// then by the failure's class the partitions are given up (fenced), the pipeline stops
    /// (refused, fatal), or the batch is replayed after [`Sink::recover`] with backoff until
    /// the task timeout (the sink deduplicates or overwrites what it already applied).
    ///
    /// [`Sink::recover`]: crate::sink::Sink::recover
    pub(super) fn sink_failed(
        &mut self,
        batch: &[InputRecord],
        failure: SinkFailure,
        deadline: Deadline<'_>,
        task_deadline: Instant,
        backoff: &mut Duration,
    ) -> (Outcome, Next) {
        let reason = failure.to_string();
        if let Err(end) = self.abort_for_replay(batch, deadline, &reason) {
            return end;
        }
        let outcome = Outcome::Aborted { class: None, reason: reason.clone() };
        match failure.class {
            SinkErrorClass::Fenced => return (outcome, Next::End(BatchEnd::SinkFenced(reason))),
            SinkErrorClass::Rejected | SinkErrorClass::Fatal => {
                return (outcome, Next::End(BatchEnd::Stop(sink_error("write", failure))))
            }
            SinkErrorClass::Retriable | SinkErrorClass::OutcomeUnknown => {}
        }
        if Instant::now() + *backoff >= task_deadline {
            return (outcome, Next::End(BatchEnd::Stop(sink_error("write", failure))));
        }
        tracing::warn!(task = self.id, error = %reason, "sink write failed; transaction aborted, replaying the batch");
        let pause = *backoff;
        *backoff = (*backoff * 2).min(Duration::from_secs(5));
        if let Some(sink) = self.sink.as_mut() {
            if let Err(f) = sink.recover(&self.shared.rt, deadline.remaining()) {
                tracing::warn!(task = self.id, error = %f, "sink recover failed; retrying");
            }
        }
        (outcome, Next::Replay(pause))
    }
}
