//! The verifier: proves (or refutes) exactly-once on real topics.
//!
//! It reads the input and output topics with `isolation.level=read_committed` from the
//! beginning to their end (the last stable offset: an open transaction's records are not
//! read) and joins every output record to its input through the
//! [`ORIGIN_HEADER`] (`topic/partition/offset`) that the
//! runtime writes. Against the outputs each input should have ([`Expected`]: exactly `k`,
//! default 1; at most `k` for a filter; or a count computed from the input record) it counts:
//!
//! - **duplicates**: outputs beyond the expected count for one input record;
//! - **missing**: input records with fewer outputs than expected;
//! - **order violations**: within one output partition, an output whose origin offset is
//!   lower than an earlier output's from the same input partition (per-partition order
//!   not kept);
//! - **unexpected**: outputs without an origin header, or naming a record not in the input.
//!
//! Exactly-once holds when all four are 0; at-least-once when `missing` and `unexpected`
//! are 0. The verifier needs the pipeline to be idle (caught up) to be meaningful.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::message::{BorrowedMessage, Headers, Message};

use kafka_eos::admin::Client;
use kafka_eos::config::Properties;
use kafka_eos::record::{parse_origin, ORIGIN_HEADER};
use kafka_eos::Result;

/// What to verify.
#[derive(Debug, Clone)]
pub struct VerifyConfig {
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// The pipeline's input topics.
    pub input_topics: Vec<String>,
    /// The topics its outputs went to.
    pub output_topics: Vec<String>,
    /// Outputs expected per input record. Default exactly 1.
    pub expected: Expected,
    /// Extra client properties (security settings), verbatim.
    pub client_properties: Properties,
    /// Longest time to read everything. Default 120 s.
    pub timeout: Duration,
}

impl VerifyConfig {
    /// A 1:1 check of `input` against `output`.
    pub fn new(bootstrap_servers: impl Into<String>, input: impl Into<String>, output: impl Into<String>) -> Self {
        VerifyConfig {
            bootstrap_servers: bootstrap_servers.into(),
            input_topics: vec![input.into()],
            output_topics: vec![output.into()],
            expected: Expected::Exactly(1),
            client_properties: Properties::default(),
            timeout: Duration::from_secs(120),
        }
    }
}

/// How many outputs each input record should have.
#[derive(Clone)]
#[non_exhaustive]
pub enum Expected {
    /// Exactly `k`: a transform (1) or a fan-out of fixed width.
    Exactly(u32),
    /// Between 0 and `k`: a filter (1) or a fan-out of varying width. Only duplicates beyond
    /// `k` are found, and no record is reported missing: a lost output cannot be told from a
    /// filtered one. [`Expected::PerRecord`] checks both.
    AtMost(u32),
    /// What the pipeline's own rule says for this input record, from its key and value (the
    /// filter's predicate, the fan-out's width); checked exactly.
    PerRecord(OutputRule),
}

/// An input record's expected output count, from its key and value.
pub type OutputRule = Arc<dyn Fn(Option<&[u8]>, Option<&[u8]>) -> u32 + Send + Sync>;

impl Expected {
    /// `(least, most)` outputs for the input record with this key and value.
    fn bounds(&self, key: Option<&[u8]>, value: Option<&[u8]>) -> (u32, u32) {
        match self {
            Expected::Exactly(k) => (*k, *k),
            Expected::AtMost(k) => (0, *k),
            Expected::PerRecord(f) => {
                let k = f(key, value);
                (k, k)
            }
        }
    }
}

impl std::fmt::Debug for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expected::Exactly(k) => write!(f, "Exactly({k})"),
            Expected::AtMost(k) => write!(f, "AtMost({k})"),
            Expected::PerRecord(_) => f.write_str("PerRecord(..)"),
        }
    }
}

/// The verifier's findings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Committed input records read.
    pub input_records: u64,
    /// Committed output records read.
    pub output_records: u64,
    /// Outputs beyond the expected count per input.
    pub duplicates: u64,
    /// Inputs short of their expected outputs (counted once per missing output).
    pub missing: u64,
    /// Outputs out of their input partition's order.
    pub order_violations: u64,
    /// Outputs with no or a foreign origin.
    pub unexpected: u64,
}

impl Report {
    /// 0 duplicates, 0 missing, 0 order violations, 0 unexpected.
    pub fn is_exactly_once(&self) -> bool {
        self.duplicates == 0 && self.missing == 0 && self.order_violations == 0 && self.unexpected == 0
    }

    /// 0 missing, 0 unexpected (duplicates allowed).
    pub fn is_at_least_once(&self) -> bool {
        self.missing == 0 && self.unexpected == 0
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "verified: {} in, {} out, {} duplicates, {} missing",
            self.input_records, self.output_records, self.duplicates, self.missing
        )?;
        if self.order_violations > 0 || self.unexpected > 0 {
            write!(f, ", {} order violations, {} unexpected", self.order_violations, self.unexpected)?;
        }
        Ok(())
    }
}

type Origin = (u32, i32, i64);

/// Reads everything and compares. Blocking: call it from a plain thread or `spawn_blocking`.
pub fn verify(cfg: &VerifyConfig) -> Result<Report> {
    let deadline = Instant::now() + cfg.timeout;
    let topic_ids: HashMap<&str, u32> =
        cfg.input_topics.iter().enumerate().map(|(i, t)| (t.as_str(), i as u32)).collect();
    // Each input's (least, most) expected outputs.
    let mut inputs: HashMap<Origin, (u32, u32)> = HashMap::new();
    for t in &cfg.input_topics {
        let id = topic_ids[t.as_str()];
        read_to_end(cfg, t, deadline, |m| {
            inputs.insert((id, m.partition(), m.offset()), cfg.expected.bounds(m.key(), m.payload()));
        })?;
    }
    let mut report = Report { input_records: inputs.len() as u64, ..Report::default() };
    let mut seen: HashMap<Origin, u32> = HashMap::new();
    // (output topic, output partition, origin topic, origin partition) -> last origin offset
    let mut last: HashMap<(usize, i32, u32, i32), i64> = HashMap::new();
    for (out_idx, t) in cfg.output_topics.iter().enumerate() {
        read_to_end(cfg, t, deadline, |m| {
            report.output_records += 1;
            let origin = m
                .headers()
                .and_then(|hs| hs.iter().find(|h| h.key == ORIGIN_HEADER).and_then(|h| h.value))
                .and_then(parse_origin)
                .and_then(|(topic, p, o)| topic_ids.get(topic.as_str()).map(|id| (*id, p, o)));
            let Some(origin) = origin.filter(|o| inputs.contains_key(o)) else {
                report.unexpected += 1;
                return;
            };
            *seen.entry(origin).or_insert(0) += 1;
            let key = (out_idx, m.partition(), origin.0, origin.1);
            match last.get(&key) {
                Some(&prev) if origin.2 < prev => report.order_violations += 1,
                _ => {
                    last.insert(key, origin.2);
                }
            }
        })?;
    }
    (report.duplicates, report.missing) = tally(&inputs, &seen);
    Ok(report)
}

/// `(duplicates, missing)`: outputs beyond each input's most, and short of its least.
fn tally(inputs: &HashMap<Origin, (u32, u32)>, seen: &HashMap<Origin, u32>) -> (u64, u64) {
    inputs.iter().fold((0, 0), |(duplicates, missing), (o, (least, most))| {
        let n = seen.get(o).copied().unwrap_or(0);
        (duplicates + n.saturating_sub(*most) as u64, missing + least.saturating_sub(n) as u64)
    })
}

/// Reads `topic` with read_committed from the beginning until every partition reports its
/// end, calling `f` for each record (see [`crate::read::read_to_end`]).
pub fn read_to_end(
    cfg: &VerifyConfig,
    topic: &str,
    deadline: Instant,
    f: impl FnMut(&BorrowedMessage<'_>),
) -> Result<()> {
    let client = Client::new(&cfg.bootstrap_servers).properties(cfg.client_properties.clone());
    crate::read::read_to_end(&client, topic, deadline, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs 0..6 of one partition with the outputs seen for each, judged by `expected`
    /// (the key is the input's index).
    fn judge(expected: Expected, outputs: [u32; 6]) -> (u64, u64) {
        let origin = |i: usize| (0, 0, i as i64);
        let inputs = (0..6).map(|i| (origin(i), expected.bounds(Some(&[i as u8]), None))).collect();
        let seen = outputs.iter().enumerate().filter(|(_, n)| **n > 0).map(|(i, n)| (origin(i), *n)).collect();
        tally(&inputs, &seen)
    }

    #[test]
    fn exactly_k_counts_both_ways() {
        assert_eq!(judge(Expected::Exactly(1), [1; 6]), (0, 0));
        assert_eq!(judge(Expected::Exactly(1), [1, 2, 0, 1, 3, 1]), (3, 1));
        assert_eq!(judge(Expected::Exactly(2), [2, 1, 0, 2, 2, 4]), (2, 3));
        assert_eq!(judge(Expected::Exactly(0), [0, 0, 1, 0, 0, 0]), (1, 0));
    }

    #[test]
    fn at_most_k_reports_no_missing_and_the_excess() {
        assert_eq!(judge(Expected::AtMost(1), [0, 1, 0, 1, 0, 0]), (0, 0));
        assert_eq!(judge(Expected::AtMost(1), [0, 2, 0, 1, 3, 0]), (3, 0));
    }

    /// A filter passing even keys: an odd key's output is a duplicate (of nothing), an even
    /// key without one is missing.
    #[test]
    fn per_record_follows_the_rule() {
        let even = Expected::PerRecord(Arc::new(|key, _| u32::from(key.is_some_and(|k| k[0] % 2 == 0))));
        assert_eq!(judge(even.clone(), [1, 0, 1, 0, 1, 0]), (0, 0));
        assert_eq!(judge(even.clone(), [1, 1, 0, 0, 2, 0]), (2, 1));
        assert_eq!(format!("{even:?}"), "PerRecord(..)");
    }

    #[test]
    fn no_inputs_nothing_to_count() {
        assert_eq!(tally(&HashMap::new(), &HashMap::new()), (0, 0));
    }
}
