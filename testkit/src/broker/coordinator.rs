//! Which broker coordinates a `transactional.id` or a consumer group: aimed network faults.
//!
//! librdkafka looks coordinators up but rdkafka 0.39 does not expose the answer, so the
//! harness asks a broker itself: one `FindCoordinator` request (version 1: `key`,
//! `key_type` 0 for a group, 1 for a transaction) over a plain TCP connection to a node's
//! *direct* listener — never through the fault proxy, whose faults it must see past.
//!
//! [`coordinator_partition`] is Kafka's own placement rule (`Utils.abs(key.hashCode()) %
//! partitions` of `__transaction_state` or `__consumer_offsets`; the coordinator is that
//! partition's leader). The real-broker test `coordinator_lookup_matches_placement` checks the
//! two agree, for transactional ids and groups, on a 3-node cluster.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::{BrokerError, LocalCluster};

/// What a coordinator coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorKind {
    /// A consumer group (`__consumer_offsets`).
    Group,
    /// A transactional.id (`__transaction_state`).
    Transaction,
}

/// Java's `String.hashCode` (UTF-16 code units, wrapping `31 * h + c`).
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The internal-topic partition whose leader coordinates `key`: Kafka's
/// `Utils.abs(key.hashCode()) % partitions` (where `Utils.abs(Integer.MIN_VALUE)` is 0).
pub fn coordinator_partition(key: &str, partitions: i32) -> i32 {
    let h = java_string_hash(key);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

/// Asks the broker at `addr` (`host:port`, a direct listener) which node coordinates `key`.
/// Retries while the coordinator is not available or loading, until `timeout`.
pub fn find_coordinator(addr: &str, key: &str, kind: CoordinatorKind, timeout: Duration) -> Result<i32, String> {
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        match find_once(addr, key, kind) {
            Ok((0, node)) => return Ok(node),
            Ok((code, _)) => last = format!("error code {code}"),
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            return Err(format!("FindCoordinator({key}) at {addr}: {last}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One FindCoordinator v1 round trip: (error code, node id).
fn find_once(addr: &str, key: &str, kind: CoordinatorKind) -> std::io::Result<(i16, i32)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let client_id = b"kafka-eos-testkit";
    let mut body = Vec::new();
    body.extend(10i16.to_be_bytes()); // api key: FindCoordinator
    body.extend(1i16.to_be_bytes()); // version 1
    body.extend(7i32.to_be_bytes()); // correlation id
    body.extend((client_id.len() as i16).to_be_bytes());
    body.extend(client_id);
    body.extend((key.len() as i16).to_be_bytes());
    body.extend(key.as_bytes());
    body.push(match kind {
        CoordinatorKind::Group => 0,
        CoordinatorKind::Transaction => 1,
    });
    s.write_all(&(body.len() as i32).to_be_bytes())?;
    s.write_all(&body)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut resp = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut resp)?;
    // correlation id (4), throttle time (4), error code (2), error message (nullable
    // string), node id (4), host, port.
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "short FindCoordinator response");
    let rd16 = |at: usize| resp.get(at..at + 2).map(|b| i16::from_be_bytes([b[0], b[1]])).ok_or_else(bad);
    let code = rd16(8)?;
    let msg = rd16(10)?;
    let at = 12 + usize::try_from(msg).unwrap_or(0);
    let node = resp.get(at..at + 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(bad)?;
    Ok((code, node))
}

impl LocalCluster {
    /// The node that coordinates `key` (a transactional.id or a group id), asked of the
    /// running nodes in turn over their direct listeners (see the `coordinator` module's docs).
    pub fn coordinator(&self, key: &str, kind: CoordinatorKind) -> Result<i32, BrokerError> {
        let mut last = String::new();
        for addr in self.direct_bootstrap_servers().split(',') {
            match find_coordinator(addr, key, kind, Duration::from_secs(5)) {
                Ok(node) => return Ok(node),
                Err(e) => last = e,
            }
        }
        Err(BrokerError::InvalidConfig(format!("no node answered FindCoordinator: {last}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_and_placement() {
        // Values of Java's "...".hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(coordinator_partition("polygenelubricants", 10), 0, "Utils.abs(MIN_VALUE) is 0");
        assert_eq!(java_string_hash("app:topic:0"), {
            let mut h = 0i32;
            for c in "app:topic:0".chars() {
                h = h.wrapping_mul(31).wrapping_add(c as i32);
            }
            h
        });
        assert!((0..1000).all(|i| (0..10).contains(&coordinator_partition(&format!("k{i}"), 10))));
    }

    /// The broker's FindCoordinator answer equals the leader of the partition Kafka's
    /// placement rule names, for transactional ids and groups:
    /// `cargo test -p kafka-eos-testkit --lib coordinator -- --ignored --nocapture`
    #[test]
    #[ignore = "starts real Kafka JVMs"]
    fn coordinator_lookup_matches_placement() {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let cluster = LocalCluster::start(super::super::ClusterConfig {
            fault_proxy: true,
            ..super::super::ClusterConfig::with_nodes(3)
        })
        .unwrap();
        let client: BaseConsumer =
            rdkafka::ClientConfig::new().set("bootstrap.servers", cluster.bootstrap_servers()).create().unwrap();
        // Creating the internal topics: a transactional producer and a group commit.
        let producer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("transactional.id", "warm-up")
            .create()
            .unwrap();
        rdkafka::producer::Producer::init_transactions(&producer, Duration::from_secs(60)).unwrap();
        for (topic, kind) in
            [("__transaction_state", CoordinatorKind::Transaction), ("__consumer_offsets", CoordinatorKind::Group)]
        {
            let mut agree = 0;
            for i in 0..40 {
                let key = format!("app-{i}:input:{}", i % 4);
                let node = match cluster.coordinator(&key, kind) {
                    Ok(node) => node,
                    Err(e) if kind == CoordinatorKind::Group => {
                        eprintln!("{e}");
                        continue;
                    }
                    Err(e) => panic!("{e}"),
                };
                let md = client.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
                let partitions = md.topics()[0].partitions();
                let p = coordinator_partition(&key, partitions.len() as i32);
                let leader = partitions.iter().find(|x| x.id() == p).unwrap().leader();
                assert_eq!(
                    node, leader,
                    "{key}: FindCoordinator says {node}, placement says partition {p} led by {leader}"
                );
                agree += 1;
            }
            eprintln!("{topic}: {agree} keys, FindCoordinator = leader of the placement partition for all");
            assert!(agree > 0, "{topic}");
        }
    }
}
