//! [`Writer`]: a producer for test data that stays open across calls.
//!
//! Creating a producer costs a metadata round trip and an `InitProducerId`, and closing one
//! waits for its threads: a producer per call (as `admin::produce` once did) took ~0.6 s
//! per call, which made a paced generator several times slower than its pace. A `Writer`
//! pays that once, and writes what a pipeline's input can hold: keys, values, tombstones
//! (`value: None`), headers, explicit partitions and timestamps.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_eos::admin::Client;
use kafka_eos::config::client_error;
use kafka_eos::OutputRecord;
use kafka_eos::{Error, Result};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

/// What a [`Writer`] delivered, as of its last [`flush`](Writer::flush).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Records handed to the producer.
    pub sent: u64,
    /// Of those, records whose delivery failed for good.
    pub failed: u64,
    /// The first failure, naming its topic.
    pub first_error: Option<String>,
}

#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    /// The first failure: its topic and error.
    first_error: Mutex<Option<(String, KafkaError)>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            let topic = rdkafka::message::Message::topic(m).to_string();
            self.first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| (topic, e.clone()));
        }
    }
}

/// An idempotent producer for test data (`linger.ms=5`): [`send`](Writer::send) enqueues,
/// [`flush`](Writer::flush) waits for every acknowledgement. Blocking: from async code, use
/// it inside `spawn_blocking`.
pub struct Writer {
    producer: ThreadedProducer<Deliveries>,
    sent: AtomicU64,
    /// Set by [`stop_when`](Writer::stop_when): a send waiting for room gives up once it is.
    stop: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("sent", &self.sent.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl Writer {
    /// A writer to `client`'s cluster (its properties apply).
    pub fn new(client: &Client) -> Result<Writer> {
        let producer = client
            .config()
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create_with_context(Deliveries::default())
            .map_err(|e| Error::Config(client_error(&e)))?;
        Ok(Writer { producer, sent: AtomicU64::new(0), stop: None })
    }

    /// Makes a send that waits for room in librdkafka's queue (brokers slow or down) fail
    /// once `flag` is set, instead of waiting for the message timeout: for a generator
    /// that must stop promptly when its run is abandoned.
    pub fn stop_when(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Enqueues `record` (a `None` value writes a tombstone), waiting while librdkafka's
    /// queue is full.
    pub fn send(&self, record: &OutputRecord) -> Result<()> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (k, v) in &record.headers {
            headers = headers.insert(Header { key: k, value: v.as_deref() });
        }
        let mut r = BaseRecord::<[u8], [u8]>::to(&record.topic).headers(headers);
        r.key = record.key.as_deref();
        r.payload = record.value.as_deref();
        r.partition = record.partition;
        r.timestamp = record.timestamp;
        self.enqueue(r, &record.topic)
    }

    /// Enqueues `(partition, key, value)` records to `topic` (a `None` partition lets the
    /// partitioner choose by key); returns how many.
    pub fn send_all(
        &self,
        topic: &str,
        records: impl IntoIterator<Item = (Option<i32>, Vec<u8>, Vec<u8>)>,
    ) -> Result<u64> {
        let mut n = 0;
        for (partition, key, value) in records {
            let mut r = BaseRecord::<[u8], [u8]>::to(topic).key(&key[..]).payload(&value[..]);
            r.partition = partition;
            self.enqueue(r, topic)?;
            n += 1;
        }
        Ok(n)
    }

    fn enqueue(&self, mut r: BaseRecord<'_, [u8], [u8]>, topic: &str) -> Result<()> {
        loop {
            match self.producer.send(r) {
                Ok(()) => {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if !self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) =>
                {
                    r = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(Error::Config(format!("producing to {topic}: {e}"))),
            }
        }
    }

    /// Waits up to `timeout` until every record sent so far has its delivery report, and
    /// tells what was delivered. `Err` only when reports are still missing at `timeout`
    /// (brokers unreachable); failed deliveries are counted in [`Delivered`].
    pub fn flush(&self, timeout: Duration) -> Result<Delivered> {
        self.producer.flush(timeout).map_err(|e| Error::TaskTimeout {
            what: "waiting for test data to be acknowledged".into(),
            timeout,
            last: e.to_string(),
        })?;
        let ctx = self.producer.context();
        let first = ctx.first_error.lock().unwrap_or_else(|p| p.into_inner());
        Ok(Delivered {
            sent: self.sent.load(Ordering::Relaxed),
            failed: ctx.failed.load(Ordering::Relaxed),
            first_error: first.as_ref().map(|(topic, e)| format!("producing to {topic}: {e}")),
        })
    }

    /// [`flush`](Self::flush), with the first failed delivery (if any) as the error; returns
    /// the number of records sent.
    pub fn flush_all_delivered(&self, timeout: Duration) -> Result<u64> {
        let d = self.flush(timeout)?;
        let first = self.producer.context().first_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match first {
            Some((topic, e)) => {
                Err(Error::kafka(format!("producing {} of {} records to {topic}", d.failed, d.sent), e))
            }
            None => Ok(d.sent),
        }
    }
}
