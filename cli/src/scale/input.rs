//! The paced input writer of the scale runs: the group is measured while records flow, at a
//! rate well below what it can copy, so that a commit gap is a pause and not a backlog.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kafka_eos::admin::Client;
use kafka_eos_testkit::write::Writer;

/// One tick of the writer.
const TICK: Duration = Duration::from_millis(20);

/// A writer thread; [`Paced::finish`] stops it and returns how many records it wrote.
/// Dropped unfinished (a run that fails early), it stops writing as well.
pub(crate) struct Paced {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    join: Option<JoinHandle<Result<u64, String>>>,
}

impl Paced {
    /// Writes `per_tick` records of 100 B every 20 ms, round-robin over the `partitions`
    /// partitions of `topic`, until [`finish`](Paced::finish).
    pub(crate) fn start(bootstrap: &str, topic: &str, partitions: i32, per_tick: u64) -> Result<Paced, String> {
        let writer = Writer::new(&Client::new(bootstrap)).map_err(|e| format!("input writer: {e}"))?;
        let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (s, n, topic) = (stop.clone(), sent.clone(), topic.to_string());
        let join = std::thread::spawn(move || {
            let mut i = 0u64;
            let mut next = Instant::now();
            while !s.load(Ordering::SeqCst) {
                let batch: Vec<_> = (0..per_tick)
                    .map(|_| {
                        i += 1;
                        let p = (i % partitions.max(1) as u64) as i32;
                        (Some(p), i.to_string().into_bytes(), format!("{i:>100}").into_bytes())
                    })
                    .collect();
                writer.send_all(&topic, batch).map_err(|e| e.to_string())?;
                n.store(i, Ordering::SeqCst);
                next += TICK;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            writer.flush_all_delivered(Duration::from_secs(60)).map_err(|e| e.to_string())
        });
        Ok(Paced { stop, sent, join: Some(join) })
    }

    /// Records handed to the producer so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }

    /// Stops writing, waits for every record's delivery, returns how many were written.
    pub(crate) fn finish(mut self) -> Result<u64, String> {
        self.stop.store(true, Ordering::SeqCst);
        let join = self.join.take().ok_or("the input writer was finished already")?;
        join.join().map_err(|_| "the input writer panicked".to_string())?
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Records per 20 ms tick for `rate` records per second (at least 1).
pub(crate) fn per_tick(rate: u64) -> u64 {
    (rate * TICK.as_millis() as u64 / 1000).max(1)
}
