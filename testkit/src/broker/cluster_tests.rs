//! Tests of the cluster harness; the ones that start JVMs are `#[ignore]`d.

use super::*;
use crate::broker::SaslConfig;

#[test]
fn stale_dir_names() {
    assert_eq!(stale_dir_pid("kafka-eos-1234-0"), Some(1234));
    assert_eq!(stale_dir_pid("kafka-eos-1234-17"), Some(1234));
    assert_eq!(stale_dir_pid("kafka-eos-cache"), None);
    assert_eq!(stale_dir_pid("kafka-eos-1234-"), None);
    assert_eq!(stale_dir_pid("kafka-eos-1234"), None);
    assert_eq!(stale_dir_pid("kafka-eos-x-1"), None);
    assert_eq!(stale_dir_pid("other-1-2"), None);
}

#[test]
fn cluster_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<LocalCluster>();
    check::<super::super::Cluster>();
}

#[test]
fn invalid_configs_are_rejected_before_anything_runs() {
    for cfg in [
        ClusterConfig { nodes: 0, ..Default::default() },
        ClusterConfig { heap_mb: 16, ..Default::default() },
        ClusterConfig { sasl: Some(SaslConfig::default()), ..Default::default() },
        ClusterConfig { sasl: Some(SaslConfig::with_user("alice", "with space")), ..Default::default() },
    ] {
        assert!(matches!(LocalCluster::start(cfg), Err(BrokerError::InvalidConfig(_))));
    }
}

/// Smoke check against real JVMs (needs Java 17 and, once, Maven + network):
/// `cargo test -p kafka-eos --lib broker::cluster::tests::smoke -- --ignored --nocapture`
#[test]
#[ignore = "starts real Kafka JVMs"]
fn smoke() {
    let t = Instant::now();
    let c1 = LocalCluster::start(ClusterConfig::default()).unwrap();
    eprintln!("1 node ready in {:?} at {}", t.elapsed(), c1.bootstrap_servers());
    let probe = Probe::new(&c1.bootstrap_servers()).unwrap();
    assert_eq!(probe.broker_ids(Duration::from_secs(5)).unwrap(), vec![1]);
    eprintln!("1 node RSS: {} kB", rss_kb(c1.pid(1).unwrap()));
    let t = Instant::now();
    c1.stop().unwrap();
    eprintln!("1 node stopped in {:?}", t.elapsed());

    let t = Instant::now();
    let mut c3 = LocalCluster::start(ClusterConfig::with_nodes(3)).unwrap();
    eprintln!("3 nodes ready in {:?} at {}", t.elapsed(), c3.bootstrap_servers());
    for id in c3.node_ids() {
        eprintln!("node {id} RSS: {} kB", rss_kb(c3.pid(id).unwrap()));
    }
    let probe = Probe::new(&c3.bootstrap_servers()).unwrap();
    assert_eq!(probe.broker_ids(Duration::from_secs(5)).unwrap(), vec![1, 2, 3]);
    c3.kill_node(2).unwrap();
    assert!(!c3.is_running(2));
    let t = Instant::now();
    c3.wait_ready(Duration::from_secs(60)).unwrap();
    eprintln!("node 2 left metadata {:?} after SIGKILL", t.elapsed());
    assert_eq!(probe.broker_ids(Duration::from_secs(5)).unwrap(), vec![1, 3]);
    let t = Instant::now();
    c3.start_node(2).unwrap();
    eprintln!("node 2 back in metadata {:?} after restart", t.elapsed());
    assert_eq!(probe.broker_ids(Duration::from_secs(5)).unwrap(), vec![1, 2, 3]);
    c3.wait_ready(Duration::from_secs(30)).unwrap();
    let dir = c3.data_dir().to_path_buf();
    let t = Instant::now();
    c3.stop().unwrap();
    eprintln!("3 nodes stopped in {:?}", t.elapsed());
    assert!(!dir.exists());
}

/// The SASL listener against a real JVM: PLAIN and both SCRAM hashes authenticate, a wrong
/// password does not, the port survives a restart, and no password reaches the node's log:
/// `cargo test -p kafka-eos --lib broker::cluster::tests::sasl_smoke -- --ignored --nocapture`
#[test]
#[ignore = "starts a real Kafka JVM"]
fn sasl_smoke() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    // Every character the harness accepts in a password, to prove it survives the JAAS
    // config and the storage tool's credential syntax.
    let (user, password) = ("alice.smoke_1-x", "Sm0ke!#$%&'()*+-./:;<>?@^_`{|}~");
    let t = Instant::now();
    let cfg = ClusterConfig { sasl: Some(SaslConfig::with_user(user, password)), ..Default::default() };
    let mut c = LocalCluster::start(cfg).unwrap();
    let sasl = c.sasl_bootstrap_servers().unwrap();
    eprintln!("1 node with SASL ready in {:?}: plaintext {}, SASL {sasl}", t.elapsed(), c.bootstrap_servers());
    assert_ne!(sasl, c.bootstrap_servers());
    let brokers = |mechanism: &str, pw: &str| {
        let client: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &sasl)
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", mechanism)
            .set("sasl.username", user)
            .set("sasl.password", pw)
            .set("log_level", "0")
            .create()
            .unwrap();
        client.fetch_metadata(None, Duration::from_secs(3)).map(|md| md.brokers().len())
    };
    for mechanism in SaslConfig::MECHANISMS {
        assert_eq!(brokers(mechanism, password).unwrap(), 1, "{mechanism}");
        assert!(brokers(mechanism, "wrong").is_err(), "{mechanism} with a wrong password");
    }
    c.kill_node(1).unwrap();
    c.start_node(1).unwrap();
    assert_eq!(c.sasl_bootstrap_servers().unwrap(), sasl);
    assert_eq!(brokers("SCRAM-SHA-512", password).unwrap(), 1, "after a restart");
    let log = fs::read_to_string(c.log_path(1).unwrap()).unwrap();
    assert!(log.contains("SASL_PLAINTEXT"), "the listener should be in the log");
    assert!(!log.contains(password), "the password is in the node's log");
    c.stop().unwrap();
}

fn rss_kb(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
