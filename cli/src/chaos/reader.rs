//! The concurrent read_committed reader, and how its view is compared with the final one.
//!
//! A downstream consumer does not wait for the pipeline to finish: it reads while faults
//! happen. What it reads must already be final. So this reader runs through the whole
//! scenario, from the beginning of the output topic, `isolation.level=read_committed`, and
//! checks as it goes:
//!
//! - **duplicates**: an output whose origin (`kafka-eos.origin`) it has already seen;
//! - **backwards**: an offset not above the last one it read in that partition (a poll that
//!   went back);
//! - **order**: within an output partition, an origin offset below an earlier one of the
//!   same input partition.
//!
//! At the end ([`compare`]) every record it saw must be in the final read_committed read at
//! the same output partition and offset with the same origin — one that is not was an
//! **aborted read** (it saw a record of a transaction that did not commit) — and every
//! record of the final read must have been seen: below the last offset it read, a committed
//! record it jumped over is a **skipped offset** (a poll skip; the offsets of markers and
//! aborted records are the legitimate gaps, see the `report` module); above it, one it never
//! reached is **unseen**.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use kafka_eos::record::{parse_origin, ORIGIN_HEADER};
use kafka_eos_testkit::admin::Client;
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};

/// One output record: (output offset, origin partition, origin offset).
pub(crate) type Seen = (i64, i32, i64);

/// Origin offsets seen, per input partition, as a growable bitset.
#[derive(Default)]
struct Origins(HashMap<i32, Vec<u64>>);

impl Origins {
    /// Marks the origin seen; returns whether it already was.
    fn test_and_set(&mut self, partition: i32, offset: i64) -> bool {
        let bits = self.0.entry(partition).or_default();
        let (word, bit) = ((offset as u64 / 64) as usize, offset as u64 % 64);
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        let was = bits[word] & (1 << bit) != 0;
        bits[word] |= 1 << bit;
        was
    }
}

/// What the concurrent reader saw, and what it found wrong on the way.
#[derive(Debug, Default)]
pub(crate) struct ReaderLog {
    /// Per output partition, in the order read.
    pub seen: Vec<Vec<Seen>>,
    /// When each record of `seen` was read (ms since the epoch, wall clock): when it became
    /// visible to a read_committed reader, give or take a poll.
    pub seen_at: Vec<Vec<u64>>,
    pub duplicates: u64,
    pub backwards: u64,
    pub order_violations: u64,
    /// Outputs without an origin in the input topic.
    pub unexpected: u64,
}

impl ReaderLog {
    fn new(partitions: usize) -> ReaderLog {
        ReaderLog { seen: vec![Vec::new(); partitions], seen_at: vec![Vec::new(); partitions], ..Default::default() }
    }
}

/// Checks one record at a time; kept apart from the consumer so it can be unit-tested.
struct Checker {
    input_topic: String,
    log: ReaderLog,
    origins: Origins,
    last_offset: Vec<i64>,
    /// (output partition, origin partition) -> last origin offset.
    last_origin: HashMap<(usize, i32), i64>,
}

impl Checker {
    fn new(input_topic: &str, partitions: usize) -> Checker {
        Checker {
            input_topic: input_topic.to_string(),
            log: ReaderLog::new(partitions),
            origins: Origins::default(),
            last_offset: vec![-1; partitions],
            last_origin: HashMap::new(),
        }
    }

    /// Checks one record; returns whether its origin is new.
    fn check(&mut self, partition: i32, offset: i64, origin: Option<(String, i32, i64)>) -> bool {
        let Some(p) = usize::try_from(partition).ok().filter(|p| *p < self.last_offset.len()) else {
            self.log.unexpected += 1;
            return false;
        };
        if offset <= self.last_offset[p] {
            self.log.backwards += 1;
        }
        self.last_offset[p] = self.last_offset[p].max(offset);
        let Some((_, op, oo)) = origin.filter(|(t, _, o)| *t == self.input_topic && *o >= 0) else {
            self.log.unexpected += 1;
            self.log.seen[p].push((offset, -1, -1));
            self.log.seen_at[p].push(wall_ms());
            return false;
        };
        self.log.seen[p].push((offset, op, oo));
        self.log.seen_at[p].push(wall_ms());
        match self.last_origin.get(&(p, op)) {
            Some(&prev) if oo < prev => self.log.order_violations += 1,
            _ => {
                self.last_origin.insert((p, op), oo);
            }
        }
        if self.origins.test_and_set(op, oo) {
            self.log.duplicates += 1;
            return false;
        }
        true
    }

    /// Whether the last offset read in every partition has reached its target.
    fn reached(&self, targets: &[i64]) -> bool {
        self.last_offset.iter().zip(targets).all(|(last, target)| last >= target)
    }
}

/// Milliseconds since the epoch, wall clock.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// `HH:MM:SS.mmmZ` of a wall-clock time in ms, as the instances' logs print it.
pub(crate) fn utc_time_of_day(ms: u64) -> String {
    let (s, ms) = ((ms / 1000) % 86_400, ms % 1000);
    format!("{:02}:{:02}:{:02}.{ms:03}Z", s / 3600, s / 60 % 60, s % 60)
}

fn origin_of(m: &BorrowedMessage<'_>) -> Option<(String, i32, i64)> {
    m.headers().and_then(|hs| hs.iter().find(|h| h.key == ORIGIN_HEADER).and_then(|h| h.value)).and_then(parse_origin)
}

/// The last offset to reach in every partition, and until when to try.
type FinishAt = Arc<Mutex<Option<(Vec<i64>, Instant)>>>;

/// The reader thread.
pub(crate) struct Reader {
    join: Option<JoinHandle<Result<ReaderLog, String>>>,
    /// Set by [`Reader::finish`]: the last offset of every partition in the final read, and
    /// the deadline for reaching them.
    finish: FinishAt,
    /// Records read so far.
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl Reader {
    /// Starts reading `output` (all `partitions`, from the beginning) in a thread.
    pub(crate) fn start(client: &Client, output: &str, partitions: i32, input: &str) -> Result<Reader, String> {
        let consumer: BaseConsumer = client
            .config()
            .set("group.id", format!("kafka-eos-chaos-reader-{output}"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            // Broker restarts are the point of some scenarios: keep librdkafka quiet about them.
            .set("log_level", "2")
            .create()
            .map_err(|e| format!("reader consumer: {e}"))?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(output, p, Offset::Beginning).map_err(|e| format!("reader: {e}"))?;
        }
        consumer.assign(&tpl).map_err(|e| format!("reader assign: {e}"))?;
        let finish: FinishAt = Arc::default();
        let f = finish.clone();
        let mut checker = Checker::new(input, partitions as usize);
        let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = read.clone();
        let join = std::thread::Builder::new()
            .name("chaos-reader".into())
            .spawn(move || {
                loop {
                    if let Some((targets, deadline)) = f.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                        if checker.reached(targets) || Instant::now() >= *deadline {
                            break;
                        }
                    }
                    match consumer.poll(Duration::from_millis(100)) {
                        Some(Ok(m)) => {
                            checker.check(m.partition(), m.offset(), origin_of(&m));
                            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Some(Err(e)) => tracing::debug!(error = %e, "chaos reader: consumer error"),
                        None => {}
                    }
                }
                Ok(checker.log)
            })
            .map_err(|e| format!("reader thread: {e}"))?;
        Ok(Reader { join: Some(join), finish, read })
    }

    /// How many records the reader has read so far.
    pub(crate) fn read(&self) -> u64 {
        self.read.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Lets the reader run until it has read up to `targets` (the final read's last offset per
    /// partition, -1 for an empty one) or `timeout` passes, and returns what it saw.
    pub(crate) fn finish(mut self, targets: Vec<i64>, timeout: Duration) -> Result<ReaderLog, String> {
        *self.finish.lock().unwrap_or_else(|p| p.into_inner()) = Some((targets, Instant::now() + timeout));
        let join = self.join.take().ok_or("reader already finished")?;
        join.join().map_err(|_| "the reader thread panicked".to_string())?
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(join) = self.join.take() {
            *self.finish.lock().unwrap_or_else(|p| p.into_inner()) = Some((Vec::new(), Instant::now()));
            let _ = join.join();
        }
    }
}

/// The output as a read_committed reader finds it at the end.
#[derive(Debug, Default)]
pub(crate) struct FinalRead {
    /// Per output partition, in offset order.
    pub records: Vec<Vec<Seen>>,
    /// The records' timestamps (ms), parallel to `records`: when each output was produced,
    /// to find a duplicate's transaction in the instance logs.
    pub timestamps: Vec<Vec<i64>>,
}

/// The verifier's configuration for `client`'s cluster (its properties included), quiet
/// about the broker restarts some scenarios are made of.
pub(crate) fn verify_config(client: &Client, input: &str, output: &str, timeout: Duration) -> VerifyConfig {
    let mut cfg = VerifyConfig::new(&client.bootstrap, input, output);
    cfg.timeout = timeout;
    cfg.client_properties = client.properties.clone();
    cfg.client_properties.set("log_level", "2");
    cfg
}

/// Reads the whole output read_committed, as the final verification does, keeping every
/// record's output offset, origin and timestamp.
pub(crate) fn read_final(
    client: &Client,
    output: &str,
    partitions: i32,
    input: &str,
    timeout: Duration,
) -> kafka_eos::Result<FinalRead> {
    let cfg = verify_config(client, input, output, timeout);
    let mut out =
        FinalRead { records: vec![Vec::new(); partitions as usize], timestamps: vec![Vec::new(); partitions as usize] };
    read_to_end(&cfg, output, Instant::now() + timeout, |m| {
        let (op, oo) = match origin_of(m) {
            Some((t, op, oo)) if t == input => (op, oo),
            _ => (-1, -1),
        };
        // One consumer reads each partition in offset order: no sorting needed.
        if let Ok(p) = usize::try_from(m.partition()) {
            if p < out.records.len() {
                out.records[p].push((m.offset(), op, oo));
                out.timestamps[p].push(m.timestamp().to_millis().unwrap_or(-1));
            }
        }
    })?;
    Ok(out)
}

/// Describes the duplicated and missing origins of a final read, at most `limit` of each,
/// with where (output partition/offset) each copy is, when it was produced (its
/// timestamp) and when the concurrent reader saw it (`log`): two copies made visible by one
/// commit marker, long after the first was produced, point at a transaction left open and
/// swallowed by a later one; copies seen far apart, at two commits. `input_counts[p]` is the
/// number of input records in input partition `p`.
pub(crate) fn describe_anomalies(fin: &FinalRead, log: &ReaderLog, input_counts: &[i64], limit: usize) -> Vec<String> {
    let seen_at = |p: usize, off: i64| -> String {
        let (Some(seen), Some(at)) = (log.seen.get(p), log.seen_at.get(p)) else { return "never".into() };
        match seen.iter().position(|s| s.0 == off) {
            Some(i) => at.get(i).map_or("?".into(), |ms| utc_time_of_day(*ms)),
            None => "never".into(),
        }
    };
    // origin -> every (output partition, output offset, timestamp) holding it
    type Copies = Vec<(usize, i64, i64)>;
    let mut copies: HashMap<(i32, i64), Copies> = HashMap::new();
    for (p, (recs, ts)) in fin.records.iter().zip(&fin.timestamps).enumerate() {
        for ((off, op, oo), t) in recs.iter().zip(ts) {
            copies.entry((*op, *oo)).or_default().push((p, *off, *t));
        }
    }
    let mut dups: Vec<(&(i32, i64), &Copies)> = copies.iter().filter(|(_, v)| v.len() > 1).collect();
    dups.sort();
    let mut out = Vec::new();
    if !dups.is_empty() {
        let first = dups.first().map(|d| *d.0).unwrap_or_default();
        let last = dups.last().map(|d| *d.0).unwrap_or_default();
        out.push(format!(
            "{} duplicated origins, from input {}/{} to {}/{}; first ones (output partition/offset, UTC times):",
            dups.len(),
            first.0,
            first.1,
            last.0,
            last.1
        ));
        for (origin, where_) in dups.iter().take(limit) {
            let w: Vec<String> = where_
                .iter()
                .map(|(p, o, t)| {
                    let produced = u64::try_from(*t).map_or("?".into(), utc_time_of_day);
                    format!("{p}/{o} produced {produced} seen {}", seen_at(*p, *o))
                })
                .collect();
            out.push(format!("  input {}/{} -> {}", origin.0, origin.1, w.join(", ")));
        }
    }
    let mut missing = Vec::new();
    for (p, n) in input_counts.iter().enumerate() {
        for o in 0..*n {
            if !copies.contains_key(&(p as i32, o)) {
                missing.push((p, o));
            }
        }
    }
    if !missing.is_empty() {
        let shown: Vec<String> = missing.iter().take(limit).map(|(p, o)| format!("{p}/{o}")).collect();
        out.push(format!("{} missing origins, first ones: {}", missing.len(), shown.join(", ")));
    }
    out
}

/// How the concurrent view compares with the final one (the classes are defined in the
/// `report` module).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Comparison {
    /// Seen by the concurrent reader, absent from the final read (or there with another
    /// origin): records of transactions that did not commit.
    pub aborted_reads: u64,
    /// In the final read at an offset below the last one the concurrent reader read in that
    /// partition, never read by it: a poll skip.
    pub skipped: u64,
    /// In the final read above the last offset the concurrent reader read: never reached.
    pub unseen: u64,
    /// Offsets the reader's offsets jumped over that hold no committed record: transaction
    /// markers and aborted records, the legitimate gaps.
    pub legitimate_gaps: u64,
}

/// Compares what the concurrent reader saw with the final read (both per output partition;
/// `final_read` sorted by offset).
pub(crate) fn compare(seen: &[Vec<Seen>], final_read: &[Vec<Seen>]) -> Comparison {
    let mut c = Comparison::default();
    for (p, fin) in final_read.iter().enumerate() {
        let mut offsets: Vec<i64> = Vec::new();
        let mut all: Vec<i64> = Vec::new();
        for s in seen.get(p).map(Vec::as_slice).unwrap_or_default() {
            all.push(s.0);
            match fin.binary_search_by_key(&s.0, |f| f.0) {
                Ok(i) if fin[i] == *s => offsets.push(s.0),
                _ => c.aborted_reads += 1,
            }
        }
        offsets.sort_unstable();
        offsets.dedup();
        all.sort_unstable();
        all.dedup();
        let last = all.last().copied().unwrap_or(-1);
        let below = fin.partition_point(|f| f.0 <= last);
        c.skipped += (below - offsets.len()) as u64; // every valid read is <= last
        c.unseen += (fin.len() - below) as u64;
        // Offsets 0..=last that were neither read nor hold a committed record.
        let committed_unread = fin[..below].iter().filter(|f| all.binary_search(&f.0).is_err()).count();
        c.legitimate_gaps += (last + 1) as u64 - (all.len() + committed_unread) as u64;
    }
    c
}

/// The last offset of every partition in a final read, -1 for an empty partition.
pub(crate) fn last_offsets(final_read: &[Vec<Seen>]) -> Vec<i64> {
    final_read.iter().map(|v| v.last().map_or(-1, |s| s.0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(p: i32, off: i64) -> Option<(String, i32, i64)> {
        Some(("in".to_string(), p, off))
    }

    #[test]
    fn checker_counts_duplicates_backwards_and_order() {
        let mut c = Checker::new("in", 2);
        assert!(c.check(0, 0, o(0, 0)));
        assert!(c.check(0, 1, o(0, 1)));
        assert!(!c.check(0, 5, o(0, 1)), "origin 0/1 again: a duplicate");
        assert!(c.check(0, 4, o(0, 2)), "offset 4 after 5: backwards");
        assert!(c.check(1, 0, o(1, 7)));
        assert!(c.check(1, 3, o(1, 6)), "origin 6 after 7 in one output partition: order");
        assert!(!c.check(1, 4, o(1, -1)) && !c.check(1, 5, Some(("other".into(), 1, 1))));
        assert!(!c.check(9, 0, o(0, 9)), "a partition beyond the topic's");
        let log = &c.log;
        assert_eq!((log.duplicates, log.backwards, log.order_violations, log.unexpected), (1, 1, 1, 3));
        assert!(c.reached(&[5, 5]) && !c.reached(&[5, 6]) && !c.reached(&[6, 0]));
    }

    #[test]
    fn aborted_reads_and_skips() {
        let fin = vec![vec![(0, 0, 0), (2, 0, 1), (4, 0, 2)], vec![(1, 1, 0)]];
        // Saw offset 1 (aborted, absent from the final read), offset 2 with the wrong origin,
        // never reached offset 4 nor partition 1's only record.
        let seen = vec![vec![(0, 0, 0), (1, 0, 1), (2, 0, 9)], vec![]];
        assert_eq!(compare(&seen, &fin), Comparison { aborted_reads: 2, skipped: 1, unseen: 2, legitimate_gaps: 0 });
        // Offsets 1 and 3 of partition 0 and 0 of partition 1 are markers or aborted records.
        assert_eq!(compare(&fin, &fin), Comparison { legitimate_gaps: 3, ..Default::default() });
        // Jumping over offset 2, a committed record, is a skip; over 1 and 3 is not.
        let seen = vec![vec![(0, 0, 0), (4, 0, 2)], vec![(1, 1, 0)]];
        assert_eq!(compare(&seen, &fin), Comparison { skipped: 1, legitimate_gaps: 3, ..Default::default() });
        assert_eq!(last_offsets(&fin), vec![4, 1]);
        assert_eq!(last_offsets(&[vec![]]), vec![-1]);
    }

    #[test]
    fn anomalies_name_duplicates_and_missing() {
        let fin = FinalRead {
            records: vec![vec![(0, 0, 0), (1, 0, 1), (5, 0, 0)], vec![(0, 1, 0)]],
            timestamps: vec![vec![10, 11, 15], vec![20]],
        };
        let mut log = ReaderLog::new(2);
        log.seen[0] = vec![(0, 0, 0), (5, 0, 0)];
        log.seen_at[0] = vec![3_600_000, 3_601_500];
        let lines = describe_anomalies(&fin, &log, &[3, 1], 10);
        assert!(lines[0].starts_with("1 duplicated origins"), "{lines:?}");
        assert_eq!(
            lines[1],
            "  input 0/0 -> 0/0 produced 00:00:00.010Z seen 01:00:00.000Z, 0/5 produced 00:00:00.015Z seen 01:00:01.500Z"
        );
        assert_eq!(lines[2], "1 missing origins, first ones: 0/2");
        assert!(describe_anomalies(&fin, &log, &[2, 1], 10).len() == 2, "nothing missing");
    }

    #[test]
    fn origin_bitset_grows() {
        let mut o = Origins::default();
        assert!(!o.test_and_set(3, 1_000_000));
        assert!(o.test_and_set(3, 1_000_000));
        assert!(!o.test_and_set(3, 0) && !o.test_and_set(2, 1_000_000));
    }
}
