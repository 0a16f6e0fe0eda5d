//! The virtual clock that paces the input and the faults together, and the input producer.
//!
//! Faults are only worth injecting while records flow and transactions are open. So the
//! input is written *during* the scenario, `records × v / duration` records by virtual time
//! `v`, and the faults fire at virtual times. The virtual clock follows real time but never
//! passes its *cap*, which the suite sets: to the next fault's time while waiting for it,
//! and to half-way to the following one while a fault is being injected. A fault that takes
//! long (a broker restart waits for the node and its replicas) therefore pauses the input
//! instead of letting it run dry, and the next fault still finds records flowing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kafka_eos_testkit::write::Writer;

use crate::workloads::{card_velocity, financial_close, InputRecordSpec};

/// Virtual time, advanced by the input thread, capped by the suite.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    virtual_ms: AtomicU64,
    cap_ms: AtomicU64,
}

impl Clock {
    pub(crate) fn now(&self) -> Duration {
        Duration::from_millis(self.virtual_ms.load(Ordering::SeqCst))
    }

    /// The clock will not pass `cap` (it never goes back if already past it).
    pub(crate) fn set_cap(&self, cap: Duration) {
        self.cap_ms.store(cap.as_millis() as u64, Ordering::SeqCst);
    }

    /// Advances by `dt` of real time, up to the cap; returns the new virtual time.
    fn advance(&self, dt: Duration) -> Duration {
        let cap = self.cap_ms.load(Ordering::SeqCst);
        let now = self.virtual_ms.load(Ordering::SeqCst);
        let next = (now + dt.as_millis() as u64).min(cap.max(now));
        self.virtual_ms.store(next, Ordering::SeqCst);
        Duration::from_millis(next)
    }
}

/// Records due by virtual time `v` of `duration`.
fn due(records: u64, v: Duration, duration: Duration) -> u64 {
    if v >= duration || duration.is_zero() {
        records
    } else {
        (records as u128 * v.as_millis() / duration.as_millis()) as u64
    }
}

/// What the input producer wrote.
#[derive(Debug, Clone, Default)]
pub(crate) struct InputStats {
    /// Records handed to the producer.
    pub sent: u64,
    /// Of those, deliveries that failed for good (the verifier reads the input topic, so a
    /// failed one is simply not part of the input).
    pub failed: u64,
    pub first_error: Option<String>,
}

/// The input producer thread.
pub(crate) struct Input {
    join: Option<JoinHandle<Result<InputStats, String>>>,
    stop: Arc<AtomicBool>,
    pub(crate) clock: Arc<Clock>,
}

/// Where and how much input to write.
pub(crate) struct InputSpec {
    /// The cluster, with the user's client properties.
    pub client: kafka_eos_testkit::admin::Client,
    pub topic: String,
    pub partitions: i32,
    pub records: u64,
    pub value_size: usize,
    pub duration: Duration,
    /// What the `records` input items are.
    pub items: Items,
}

/// What the input's items are.
pub(crate) enum Items {
    /// The numbered sequence: record `i` has key `i` and a value of `value_size` bytes
    /// starting with `i`, on partition `i % partitions`.
    Sequence,
    /// The financial close's payments (each with its redelivered copies), and no closing
    /// heartbeat: the pipeline's timers close the last days once the partitions are idle.
    Close(financial_close::Generate),
    /// Card velocity's payments, each on its card's partition.
    Velocity(card_velocity::Generate),
    /// The join's orders and shipments ([`crate::chaos::join::record`]).
    Join,
}

impl Input {
    /// Starts writing the input's items, paced by the clock. The clock starts capped at 0: the
    /// suite lifts the cap when it runs its plan.
    pub(crate) fn start(spec: InputSpec) -> Result<Input, String> {
        let clock = Arc::new(Clock::default());
        let stop = Arc::new(AtomicBool::new(false));
        let producer = Writer::new(&spec.client).map_err(|e| format!("input producer: {e}"))?.stop_when(stop.clone());
        let (c, s) = (clock.clone(), stop.clone());
        let join = std::thread::Builder::new()
            .name("chaos-input".into())
            .spawn(move || produce(producer, &spec, &c, &s))
            .map_err(|e| format!("input thread: {e}"))?;
        Ok(Input { join: Some(join), stop, clock })
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.join.as_ref().is_none_or(|j| j.is_finished())
    }

    /// Waits for the producer to finish (all records written and acknowledged).
    pub(crate) fn finish(mut self) -> Result<InputStats, String> {
        let join = self.join.take().ok_or("input already finished")?;
        join.join().map_err(|_| "the input thread panicked".to_string())?
    }
}

impl Drop for Input {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

fn produce(producer: Writer, spec: &InputSpec, clock: &Clock, stop: &AtomicBool) -> Result<InputStats, String> {
    let mut value = vec![b'.'; spec.value_size];
    // `next` counts input items (a sequence number, or a payment with its copies), `sent`
    // the records they made.
    let (mut next, mut sent) = (0u64, 0u64);
    let mut last = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let v = clock.advance(now - last);
        last = now;
        let due = due(spec.records, v, spec.duration);
        while next < due && !stop.load(Ordering::SeqCst) {
            let records: Vec<InputRecordSpec> = match &spec.items {
                Items::Close(g) => financial_close::payment_records(g, next, spec.partitions),
                Items::Velocity(g) => vec![card_velocity::payment_record(g, next, spec.partitions)],
                Items::Join => vec![super::join::record(next, spec.partitions)],
                Items::Sequence => {
                    let key = next.to_string();
                    let n = key.len().min(value.len());
                    value[..n].copy_from_slice(&key.as_bytes()[..n]);
                    vec![(Some((next % spec.partitions as u64) as i32), key.into_bytes(), value.clone())]
                }
            };
            sent += producer.send_all(&spec.topic, records).map_err(|e| format!("producing an input record: {e}"))?;
            next += 1;
        }
        if next >= spec.records && v >= spec.duration {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The default delivery timeout (300 s) rides out any broker restart of the suite; when
    // stopped early (the scenario failed), do not hold its cleanup up that long.
    let flush = if stop.load(Ordering::SeqCst) { Duration::from_secs(5) } else { Duration::from_secs(330) };
    let delivered = producer.flush(flush).map_err(|e| format!("flushing the input: {e}"))?;
    Ok(InputStats { sent, failed: delivered.failed, first_error: delivered.first_error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_stops_at_its_cap_and_input_follows_it() {
        let c = Clock::default();
        assert_eq!(c.advance(Duration::from_secs(1)), Duration::ZERO, "starts capped at 0");
        c.set_cap(Duration::from_secs(5));
        assert_eq!(c.advance(Duration::from_secs(3)), Duration::from_secs(3));
        assert_eq!(c.advance(Duration::from_secs(3)), Duration::from_secs(5));
        c.set_cap(Duration::from_secs(2));
        assert_eq!(c.advance(Duration::from_secs(1)), Duration::from_secs(5), "never goes back");
        let d = Duration::from_secs(10);
        assert_eq!(due(1000, Duration::from_secs(5), d), 500);
        assert_eq!(due(1000, Duration::from_secs(11), d), 1000);
        assert_eq!(due(1000, Duration::ZERO, d), 0);
    }
}
