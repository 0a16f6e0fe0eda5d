//! The latency bench's two ends: the paced producer of the input and the `read_committed`
//! reader of the output.
//!
//! Every input value starts with its send time (nanoseconds since the Unix epoch, 8 bytes
//! big-endian) and its sequence number (8 bytes); the key is the sequence number in
//! decimal and the partition `seq % partitions`, which is where `CopyApp` sends it too.
//! Both ends run in this process and read the same wall clock, so receive time minus send
//! time is the record's end-to-end latency without any clock skew.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};

/// Bytes per value (as the other benches'): stamp, sequence number, padding.
pub const VALUE_SIZE: usize = 100;
/// A record sent later than this after its scheduled time counts as late.
pub const LATE: Duration = Duration::from_millis(10);

/// Now, in nanoseconds since the Unix epoch.
pub fn wall_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

/// The start of a system's run: the producer's schedule counts from `start`, the seconds
/// of the report from `start_ns` (the same moment on the wall clock).
#[derive(Clone, Copy, Debug)]
pub struct Epoch {
    pub start: Instant,
    pub start_ns: u64,
}

impl Epoch {
    pub fn now() -> Epoch {
        Epoch { start: Instant::now(), start_ns: wall_ns() }
    }

    /// The second of the run a record sent at `send_ns` belongs to (callers clamp it to the
    /// schedule's last: a record a busy producer sent after the end is part of its load).
    pub fn second_of(&self, send_ns: u64) -> usize {
        (send_ns.saturating_sub(self.start_ns) / 1_000_000_000) as usize
    }
}

/// What to send: `rate` records per second for `seconds`, over `partitions` partitions.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub rate: u64,
    pub seconds: u64,
    pub partitions: i32,
}

impl Schedule {
    pub fn records(&self) -> u64 {
        self.rate * self.seconds
    }

    /// When record `i` is due, from the epoch: absolute times, so that a late record (a
    /// slow send, a descheduled thread) is followed by the next ones at once and the rate
    /// does not drift below the target.
    fn due(&self, i: u64) -> Duration {
        Duration::from_nanos((i as u128 * 1_000_000_000 / self.rate.max(1) as u128) as u64)
    }
}

/// What the producer did.
#[derive(Clone, Debug, Default)]
pub struct Sent {
    /// Records handed to the producer.
    pub records: u64,
    /// Of those, deliveries that failed (never in the input).
    pub failed: u64,
    /// Records sent more than [`LATE`] after their scheduled time.
    pub late: u64,
    /// The latest a record was sent after its scheduled time.
    pub worst_late: Duration,
    /// From the epoch to the last send: the schedule's length if the producer kept up.
    pub elapsed: Duration,
    /// The slowest acknowledgement of the input, in microseconds, by the second of the run
    /// its record was sent in: the broker's own delay on the way in, which the output's
    /// latency includes.
    pub worst_ack_by_second: Vec<u32>,
}

/// Counts failed deliveries and times the others; a record's opaque is its send time.
struct Acks {
    epoch: Epoch,
    failed: AtomicU64,
    worst_by_second: Mutex<Vec<u32>>,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, send_ns: usize) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let micros = (wall_ns().saturating_sub(send_ns as u64) / 1_000).min(u32::MAX as u64) as u32;
        let mut worst = self.worst_by_second.lock().unwrap_or_else(|p| p.into_inner());
        let last = worst.len() - 1;
        let w = &mut worst[self.epoch.second_of(send_ns as u64).min(last)];
        *w = (*w).max(micros);
    }
}

/// Starts the producer thread: open loop, it never waits for the pipeline.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    plan: Schedule,
    epoch: Epoch,
) -> Result<JoinHandle<Result<Sent, String>>, String> {
    // The clients' default linger (librdkafka's and Java's): every system's records wait
    // in the input alike. Without it each record is a request of its own, and at high
    // rates those requests, not the system measured, are the broker's limit.
    let acks =
        Acks { epoch, failed: AtomicU64::new(0), worst_by_second: Mutex::new(vec![0; plan.seconds.max(1) as usize]) };
    let producer: BaseProducer<Acks> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("log_level", "3")
        .create_with_context(acks)
        .map_err(|e| format!("input producer: {e}"))?;
    let topic = topic.to_string();
    Ok(std::thread::spawn(move || {
        let mut sent = Sent::default();
        let mut value = vec![0u8; VALUE_SIZE];
        for i in 0..plan.records() {
            let due = epoch.start + plan.due(i);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let late = Instant::now().saturating_duration_since(due);
            sent.late += u64::from(late > LATE);
            sent.worst_late = sent.worst_late.max(late);
            let send_ns = wall_ns();
            value[..8].copy_from_slice(&send_ns.to_be_bytes());
            value[8..16].copy_from_slice(&i.to_be_bytes());
            let key = i.to_string();
            let partition = (i % plan.partitions as u64) as i32;
            let mut record =
                BaseRecord::with_opaque_to(&topic, send_ns as usize).key(&key).payload(&value).partition(partition);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(1));
                    }
                    Err((e, _)) => return Err(format!("producing the input: {e}")),
                }
            }
            sent.records += 1;
            producer.poll(Duration::ZERO);
        }
        sent.elapsed = epoch.start.elapsed();
        producer.flush(Duration::from_secs(60)).map_err(|e| format!("flushing the input: {e}"))?;
        let acks = producer.context();
        sent.failed = acks.failed.load(Ordering::Relaxed);
        sent.worst_ack_by_second = std::mem::take(&mut *acks.worst_by_second.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(sent)
    }))
}

/// What the reader saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Latencies in microseconds, by the second of the run their record was sent in; each
    /// second's sorted.
    pub by_second: Vec<Vec<u32>>,
    /// Distinct input records seen.
    pub distinct: u64,
    /// Records seen again.
    pub duplicates: u64,
}

/// The reader thread: assigned every output partition from the beginning (no group join),
/// `read_committed`.
pub struct Reader {
    stop: Arc<AtomicBool>,
    distinct: Arc<AtomicU64>,
    join: JoinHandle<Result<Seen, String>>,
}

impl Reader {
    pub fn start(bootstrap: &str, topic: &str, plan: Schedule, epoch: Epoch) -> Result<Reader, String> {
        let consumer = kafka_eos_cli::bench::output_reader(bootstrap, topic, plan.partitions, "latency-reader")?;
        let stop = Arc::new(AtomicBool::new(false));
        let distinct = Arc::new(AtomicU64::new(0));
        let (stop2, distinct2) = (stop.clone(), distinct.clone());
        let join = std::thread::spawn(move || {
            let records = plan.records();
            let mut bits = vec![0u64; records.div_ceil(64) as usize];
            let mut seen = Seen { by_second: vec![Vec::new(); plan.seconds.max(1) as usize], ..Seen::default() };
            while !stop2.load(Ordering::Relaxed) {
                let m = match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "latency reader");
                        continue;
                    }
                    None => continue,
                };
                let received = wall_ns();
                let Some(v) = m.payload().filter(|v| v.len() >= 16) else { continue };
                let send_ns = u64::from_be_bytes(v[..8].try_into().unwrap_or_default());
                let seq = u64::from_be_bytes(v[8..16].try_into().unwrap_or_default());
                if seq >= records {
                    continue; // not this run's
                }
                let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
                if bits[word] & bit != 0 {
                    seen.duplicates += 1;
                    continue;
                }
                bits[word] |= bit;
                seen.distinct += 1;
                distinct2.store(seen.distinct, Ordering::Relaxed);
                let micros = (received.saturating_sub(send_ns) / 1_000).min(u32::MAX as u64) as u32;
                let second = epoch.second_of(send_ns).min(seen.by_second.len() - 1);
                seen.by_second[second].push(micros);
            }
            seen.by_second.iter_mut().for_each(|v| v.sort_unstable());
            Ok(seen)
        });
        Ok(Reader { stop, distinct, join })
    }

    /// Distinct records seen so far.
    pub fn distinct(&self) -> u64 {
        self.distinct.load(Ordering::Relaxed)
    }

    pub fn finish(self) -> Result<Seen, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.join.join().map_err(|_| "the reader panicked".to_string())?
    }
}
