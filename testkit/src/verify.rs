//! The verifier: proves (or refutes) exactly-once on real topics.
//!
//! It reads the input and output topics with `isolation.level=read_committed` from the
//! beginning to their end (the last stable offset: an open transaction's records are not
//! read) and joins every output record to its input through the
//! [`ORIGIN_HEADER`] (`topic/partition/offset`) that the
//! runtime writes. For a transform with `k` outputs per input (default 1) it counts:
//!
//! - **duplicates**: outputs beyond `k` for one input record;
//! - **missing**: input records with fewer than `k` outputs;
//! - **order violations**: within one output partition, an output whose origin offset is
//!   lower than an earlier output's from the same input partition (per-partition order
//!   not kept);
//! - **unexpected**: outputs without an origin header, or naming a record not in the input.
//!
//! Exactly-once holds when all four are 0; at-least-once when `missing` and `unexpected`
//! are 0. The verifier needs the pipeline to be idle (caught up) to be meaningful.

use std::collections::{HashMap, HashSet};
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
    /// Outputs expected per input record. Default 1.
    pub outputs_per_input: u32,
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
            outputs_per_input: 1,
            client_properties: Properties::default(),
            timeout: Duration::from_secs(120),
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
    let mut inputs: HashSet<Origin> = HashSet::new();
    for t in &cfg.input_topics {
        let id = topic_ids[t.as_str()];
        read_to_end(cfg, t, deadline, |m| {
            inputs.insert((id, m.partition(), m.offset()));
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
            let Some(origin) = origin.filter(|o| inputs.contains(o)) else {
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
    let k = cfg.outputs_per_input;
    for o in &inputs {
        let n = seen.get(o).copied().unwrap_or(0);
        report.duplicates += n.saturating_sub(k) as u64;
        report.missing += k.saturating_sub(n) as u64;
    }
    Ok(report)
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
