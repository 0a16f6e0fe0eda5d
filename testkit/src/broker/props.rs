//! Pure parts of the harness: node layout, `server.properties`, the log4j2 config, Kafka ids and
//! port picking.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use super::SaslConfig;

/// Static description of one node: identity, ports and where its files live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeSpec {
    pub id: i32,
    pub broker_port: u16,
    pub controller_port: u16,
    /// Port of the `SASL_PLAINTEXT` listener, when the cluster has one.
    pub sasl_port: Option<u16>,
    /// With a fault proxy: the `CLIENT` listener's own port and the proxy port it advertises.
    pub client: Option<(u16, u16)>,
    /// `<data_dir>/node-<id>`.
    pub dir: PathBuf,
    /// Directory id of the node's metadata log dir, used by `--initial-controllers`.
    pub dir_id: String,
}

impl NodeSpec {
    pub fn new(data_dir: &Path, id: i32, broker_port: u16, controller_port: u16, sasl_port: Option<u16>) -> NodeSpec {
        NodeSpec {
            id,
            broker_port,
            controller_port,
            sasl_port,
            client: None,
            dir: data_dir.join(format!("node-{id}")),
            dir_id: random_kafka_id(),
        }
    }
    pub fn properties_path(&self) -> PathBuf {
        self.dir.join("server.properties")
    }
    pub fn log4j_path(&self) -> PathBuf {
        self.dir.join("log4j2.yaml")
    }
    /// JVM stdout+stderr, where the console log appender writes.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("kafka.log")
    }
    /// `log.dirs` (also the metadata log dir).
    pub fn log_dirs(&self) -> PathBuf {
        self.dir.join("data")
    }
    /// `kafka.logs.dir` (nothing is written there with our log4j2 config, but Kafka expects it).
    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }
}

/// `127.0.0.1:P1,127.0.0.1:P2,...` from broker ports.
pub(crate) fn bootstrap_of<'a>(nodes: impl IntoIterator<Item = &'a NodeSpec>) -> String {
    nodes.into_iter().map(|n| format!("127.0.0.1:{}", n.broker_port)).collect::<Vec<_>>().join(",")
}

/// `127.0.0.1:X1,...` from the proxy ports; `None` when the nodes have no fault proxy.
pub(crate) fn proxy_bootstrap_of<'a>(nodes: impl IntoIterator<Item = &'a NodeSpec>) -> Option<String> {
    let ports =
        nodes.into_iter().map(|n| n.client.map(|(_, p)| format!("127.0.0.1:{p}"))).collect::<Option<Vec<_>>>()?;
    (!ports.is_empty()).then(|| ports.join(","))
}

/// `127.0.0.1:S1,...` from the SASL ports; `None` when the nodes have no SASL listener.
pub(crate) fn sasl_bootstrap_of<'a>(nodes: impl IntoIterator<Item = &'a NodeSpec>) -> Option<String> {
    let ports = nodes.into_iter().map(|n| n.sasl_port.map(|p| format!("127.0.0.1:{p}"))).collect::<Option<Vec<_>>>()?;
    (!ports.is_empty()).then(|| ports.join(","))
}

/// The `--initial-controllers` value: `1@127.0.0.1:C1:DIRID1,...`.
pub(crate) fn initial_controllers(all: &[NodeSpec]) -> String {
    all.iter().map(|n| format!("{}@127.0.0.1:{}:{}", n.id, n.controller_port, n.dir_id)).collect::<Vec<_>>().join(",")
}

/// `server.properties` for `node` in a cluster of `all` combined broker+controller nodes.
///
/// The values that differ from Kafka's defaults are chosen for a small local test cluster:
/// internal topics with replication = node count (the default 3 cannot be met by one node),
/// 10 instead of 50 partitions for them (faster to create and load), no group-join delay, and a
/// 32 MiB log-cleaner buffer (the 128 MiB default is allocated on a 512 MiB heap). `extra` is
/// appended last so it overrides.
///
/// With `sasl` (and a `sasl_port` in `node`) a third listener, `SASL_PLAINTEXT`, enables the
/// mechanisms of [`SaslConfig::MECHANISMS`]: PLAIN checks the users listed in the listener's
/// JAAS config, SCRAM the credentials that [`scram_format_args`] writes at format time (its
/// login modules need a JAAS entry, without options). Inter-broker and controller traffic
/// stay on the plaintext listeners.
pub(crate) fn server_properties(
    node: &NodeSpec,
    all: &[NodeSpec],
    extra: &[(String, String)],
    sasl: Option<&SaslConfig>,
) -> String {
    let n = all.len();
    let quorum = all.iter().map(|n| format!("127.0.0.1:{}", n.controller_port)).collect::<Vec<_>>().join(",");
    let mut listeners =
        format!("PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}", node.broker_port, node.controller_port);
    let mut protocols = String::from("CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT");
    let sasl = sasl.zip(node.sasl_port);
    if let Some((_, port)) = sasl {
        let _ = write!(listeners, ",SASL_PLAINTEXT://127.0.0.1:{port}");
        protocols.push_str(",SASL_PLAINTEXT:SASL_PLAINTEXT");
    }
    // The fault proxy's listener: bound on its own port, advertised as the proxy's, so that
    // metadata sends clients back through the proxy (inter-broker traffic stays on PLAINTEXT).
    let mut advertised = listeners.clone();
    if let Some((own, proxy)) = node.client {
        let _ = write!(listeners, ",CLIENT://127.0.0.1:{own}");
        let _ = write!(advertised, ",CLIENT://127.0.0.1:{proxy}");
        protocols.push_str(",CLIENT:PLAINTEXT");
    }
    let mut props: Vec<(&str, String)> = vec![
        ("process.roles", "broker,controller".into()),
        ("node.id", node.id.to_string()),
        ("controller.quorum.bootstrap.servers", quorum),
        ("listeners", listeners),
        ("advertised.listeners", advertised),
        ("controller.listener.names", "CONTROLLER".into()),
        ("inter.broker.listener.name", "PLAINTEXT".into()),
        ("listener.security.protocol.map", protocols),
        ("log.dirs", node.log_dirs().display().to_string()),
        ("num.partitions", "1".into()),
        ("auto.create.topics.enable", "false".into()),
        ("offsets.topic.replication.factor", n.to_string()),
        ("offsets.topic.num.partitions", "10".into()),
        ("transaction.state.log.replication.factor", n.to_string()),
        ("transaction.state.log.min.isr", if n < 3 { "1" } else { "2" }.into()),
        ("transaction.state.log.num.partitions", "10".into()),
        ("group.initial.rebalance.delay.ms", "0".into()),
        ("log.cleaner.dedupe.buffer.size", "33554432".into()),
    ];
    if n >= 3 {
        props.push(("default.replication.factor", "3".into()));
        props.push(("min.insync.replicas", "2".into()));
    } else {
        props.push(("default.replication.factor", n.to_string()));
        props.push(("min.insync.replicas", "1".into()));
    }
    if let Some((sasl, _)) = sasl {
        props.push(("listener.name.sasl_plaintext.sasl.enabled.mechanisms", SaslConfig::MECHANISMS.join(",")));
        let users: String = sasl.users.iter().map(|(name, password)| format!(" user_{name}=\"{password}\"")).collect();
        props.push((
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            format!("org.apache.kafka.common.security.plain.PlainLoginModule required{users};"),
        ));
        for key in [
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config",
        ] {
            props.push((key, "org.apache.kafka.common.security.scram.ScramLoginModule required;".into()));
        }
        if sasl.authorizer {
            props.push(("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into()));
            props.push(("super.users", "User:ANONYMOUS".into()));
        }
    }
    let mut out = String::from("# Written by kafka-eos's local broker harness; regenerated on every start.\n");
    for (k, v) in props {
        let _ = writeln!(out, "{k}={}", escape_value(&v));
    }
    if !extra.is_empty() {
        out.push_str("# ClusterConfig::extra_properties (override the above)\n");
        for (k, v) in extra {
            let _ = writeln!(out, "{}={}", escape_key(k), escape_value(v));
        }
    }
    out
}

/// Checks that every name and password can be written into the JAAS config and the storage
/// tool's `--add-scram` syntax unquoted. Errors name the user, never the password.
pub(crate) fn validate_sasl(sasl: &SaslConfig) -> Result<(), String> {
    if sasl.users.is_empty() {
        return Err("ClusterConfig::sasl needs at least one user".into());
    }
    for (i, (name, password)) in sasl.users.iter().enumerate() {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
            return Err(format!(
                "SASL user name {name:?} must be non-empty and use only ASCII letters, digits, '.', '_' and '-'"
            ));
        }
        if sasl.users[..i].iter().any(|(other, _)| other == name) {
            return Err(format!("SASL user {name:?} is listed twice"));
        }
        if password.is_empty() || !password.bytes().all(|b| b.is_ascii_graphic() && !b"\"\\,=[]".contains(&b)) {
            return Err(format!(
                "the password of SASL user {name:?} must be non-empty printable ASCII without space, '\"', '\\', ',', '=', '[' or ']'"
            ));
        }
    }
    Ok(())
}

/// The storage tool arguments that create every user's SCRAM-SHA-256 and SCRAM-SHA-512
/// credentials: `--add-scram 'SCRAM-SHA-256=[name=alice,password=secret]' ...` (the storage
/// tool salts and hashes them). They hold the passwords: never log them.
pub(crate) fn scram_format_args(sasl: &SaslConfig) -> Vec<String> {
    let mut args = Vec::new();
    for (name, password) in &sasl.users {
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
            args.push("--add-scram".to_string());
            args.push(format!("{mechanism}=[name={name},password={password}]"));
        }
    }
    args
}

/// `text` with every password of `sasl` replaced by `[redacted]` (for quoting tool output).
pub(crate) fn redact_passwords(text: &str, sasl: Option<&SaslConfig>) -> String {
    let mut text = text.to_string();
    for (_, password) in sasl.map(|s| &s.users[..]).unwrap_or_default() {
        if !password.is_empty() {
            text = text.replace(password.as_str(), "[redacted]");
        }
    }
    text
}

/// Escapes a Java properties value (backslash, line breaks, leading whitespace).
fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            ' ' | '\t' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Escapes a Java properties key (also `=`, `:` and whitespace, which would end it).
fn escape_key(k: &str) -> String {
    let mut out = String::with_capacity(k.len());
    for c in k.trim().chars() {
        if matches!(c, '=' | ':' | ' ' | '\t' | '\\' | '#' | '!') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// log4j2 config: everything to the console (the node's `kafka.log`), INFO, with the two very
/// chatty loggers (per-request and per-partition state changes) at WARN; `levels` override
/// or add loggers ([`ClusterConfig::log_levels`](super::ClusterConfig::log_levels)).
pub(crate) fn log4j2_yaml(levels: &[(String, String)]) -> String {
    let mut loggers: Vec<(String, String)> = [
        ("kafka.request.logger", "WARN"),
        ("state.change.logger", "WARN"),
        ("org.apache.kafka.storage.internals.log.LogLoader", "WARN"),
    ]
    .iter()
    .map(|(l, v)| (l.to_string(), v.to_string()))
    .collect();
    for (logger, level) in levels {
        match loggers.iter_mut().find(|(l, _)| l == logger) {
            Some(entry) => entry.1 = level.to_uppercase(),
            None => loggers.push((logger.clone(), level.to_uppercase())),
        }
    }
    let mut yaml = String::from(
        "Configuration:\n  name: kafka-eos-local-broker\n  Appenders:\n    Console:\n      name: STDOUT\n      \
         PatternLayout:\n        pattern: \"[%d] %p %m (%c)%n\"\n  Loggers:\n    Root:\n      level: INFO\n      \
         AppenderRef:\n        - ref: STDOUT\n    Logger:\n",
    );
    for (logger, level) in loggers {
        yaml.push_str(&format!("      - name: {logger}\n        level: {level}\n"));
    }
    yaml
}

/// A Kafka `Uuid` string (cluster id, directory id): 16 random bytes in URL-safe base64
/// without padding, 22 characters, never starting with `-` (the storage tool would take it for
/// an option) and never one of Kafka's reserved ids (all zero, or 1).
pub(crate) fn random_kafka_id() -> String {
    loop {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        let reserved = bytes[..15].iter().all(|&b| b == 0) && bytes[15] <= 1;
        let id = base64url_nopad(&bytes);
        if !reserved && !id.starts_with('-') {
            return id;
        }
    }
}

/// Kafka ids as its `Uuid.toString` prints them: URL-safe base64 without padding.
pub(crate) fn base64url_nopad(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `count` distinct free TCP ports on 127.0.0.1.
///
/// All listeners are held until every port is chosen (so no duplicates), then released for the
/// broker to bind. Another process can grab one in between; the cluster start retries with
/// fresh ports when a node fails with "Address already in use".
pub(crate) fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..count).map(|_| TcpListener::bind(("127.0.0.1", 0))).collect::<std::io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: i32) -> Vec<NodeSpec> {
        (1..=n)
            .map(|i| NodeSpec {
                id: i,
                broker_port: 9000 + i as u16,
                controller_port: 9100 + i as u16,
                sasl_port: None,
                client: None,
                dir: PathBuf::from(format!("/d/node-{i}")),
                dir_id: format!("DIR{i}"),
            })
            .collect()
    }

    fn parse(props: &str) -> std::collections::HashMap<String, String> {
        // Later keys win, as in java.util.Properties.
        props
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    #[test]
    fn single_node_properties() {
        let all = nodes(1);
        let p = parse(&server_properties(&all[0], &all, &[], None));
        assert_eq!(p["node.id"], "1");
        assert_eq!(p["process.roles"], "broker,controller");
        assert_eq!(p["controller.quorum.bootstrap.servers"], "127.0.0.1:9101");
        assert_eq!(p["listeners"], "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9101");
        assert_eq!(p["advertised.listeners"], p["listeners"]);
        assert_eq!(p["log.dirs"], "/d/node-1/data");
        assert_eq!(p["offsets.topic.replication.factor"], "1");
        assert_eq!(p["transaction.state.log.replication.factor"], "1");
        assert_eq!(p["transaction.state.log.min.isr"], "1");
        assert_eq!(p["default.replication.factor"], "1");
        assert_eq!(p["min.insync.replicas"], "1");
        assert_eq!(p["auto.create.topics.enable"], "false");
        assert!(!p.contains_key("controller.quorum.voters"), "mixing voters with bootstrap breaks the storage tool");
    }

    #[test]
    fn three_node_properties_and_overrides() {
        let all = nodes(3);
        let extra = vec![
            ("broker.session.timeout.ms".to_string(), "6000".to_string()),
            ("min.insync.replicas".to_string(), "1".to_string()),
        ];
        let text = server_properties(&all[1], &all, &extra, None);
        let p = parse(&text);
        assert_eq!(p["node.id"], "2");
        assert_eq!(p["controller.quorum.bootstrap.servers"], "127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103");
        assert_eq!(p["listeners"], "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102");
        assert_eq!(p["offsets.topic.replication.factor"], "3");
        assert_eq!(p["transaction.state.log.min.isr"], "2");
        assert_eq!(p["default.replication.factor"], "3");
        assert_eq!(p["broker.session.timeout.ms"], "6000");
        // The override comes after the default, so it wins.
        assert_eq!(p["min.insync.replicas"], "1");
        assert!(text.find("min.insync.replicas=2").unwrap() < text.find("min.insync.replicas=1").unwrap());
        assert_eq!(initial_controllers(&all), "1@127.0.0.1:9101:DIR1,2@127.0.0.1:9102:DIR2,3@127.0.0.1:9103:DIR3");
        assert_eq!(bootstrap_of(&all), "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003");
    }

    #[test]
    fn sasl_listener() {
        let mut all = nodes(3);
        for n in &mut all {
            n.sasl_port = Some(9200 + n.id as u16);
        }
        let sasl = SaslConfig::with_user("alice", "alice-secret").user("bob", "b0b!");
        let p = parse(&server_properties(&all[1], &all, &[], Some(&sasl)));
        assert_eq!(
            p["listeners"],
            "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102,SASL_PLAINTEXT://127.0.0.1:9202"
        );
        assert_eq!(p["advertised.listeners"], p["listeners"]);
        assert_eq!(
            p["listener.security.protocol.map"],
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
        );
        assert_eq!(p["inter.broker.listener.name"], "PLAINTEXT");
        assert_eq!(p["listener.name.sasl_plaintext.sasl.enabled.mechanisms"], "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512");
        assert_eq!(
            p["listener.name.sasl_plaintext.plain.sasl.jaas.config"],
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="b0b!";"#
        );
        for m in ["scram-sha-256", "scram-sha-512"] {
            assert_eq!(
                p[&format!("listener.name.sasl_plaintext.{m}.sasl.jaas.config")],
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            );
        }
        assert_eq!(sasl_bootstrap_of(&all).as_deref(), Some("127.0.0.1:9201,127.0.0.1:9202,127.0.0.1:9203"));
        assert_eq!(
            scram_format_args(&sasl),
            [
                "--add-scram",
                "SCRAM-SHA-256=[name=alice,password=alice-secret]",
                "--add-scram",
                "SCRAM-SHA-512=[name=alice,password=alice-secret]",
                "--add-scram",
                "SCRAM-SHA-256=[name=bob,password=b0b!]",
                "--add-scram",
                "SCRAM-SHA-512=[name=bob,password=b0b!]",
            ]
        );
        assert_eq!(redact_passwords("x alice-secret y b0b!", Some(&sasl)), "x [redacted] y [redacted]");
        // Without SASL: no third listener, no SASL bootstrap.
        let plain = nodes(1);
        let p = parse(&server_properties(&plain[0], &plain, &[], None));
        assert!(
            !p["listeners"].contains("SASL") && !p.contains_key("listener.name.sasl_plaintext.sasl.enabled.mechanisms")
        );
        assert_eq!(sasl_bootstrap_of(&plain), None);
    }

    #[test]
    fn sasl_validation_never_shows_passwords() {
        assert!(validate_sasl(&SaslConfig::with_user("alice", "s3cr3t-._~!")).is_ok());
        assert!(validate_sasl(&SaslConfig::default()).unwrap_err().contains("at least one user"));
        assert!(validate_sasl(&SaslConfig::with_user("al ice", "x")).unwrap_err().contains("al ice"));
        assert!(validate_sasl(&SaslConfig::with_user("a", "x").user("a", "y")).unwrap_err().contains("twice"));
        for bad in ["", "has space", "quo\"te", "com,ma", "eq=ual", "[br]", "back\\slash", "ünï"] {
            let e = validate_sasl(&SaslConfig::with_user("alice", bad)).unwrap_err();
            assert!(e.contains("password of SASL user \"alice\""), "{e}");
            assert!(bad.is_empty() || !e.contains(bad), "{e}");
        }
        let dbg = format!("{:?}", SaslConfig::with_user("alice", "hunter2"));
        assert!(dbg.contains("alice") && dbg.contains("[redacted]") && !dbg.contains("hunter2"), "{dbg}");
        let dbg = format!(
            "{:?}",
            super::super::ClusterConfig { sasl: Some(SaslConfig::with_user("alice", "hunter2")), ..Default::default() }
        );
        assert!(!dbg.contains("hunter2"), "{dbg}");
    }

    #[test]
    fn properties_escaping() {
        assert_eq!(escape_value(r"C:\x"), r"C:\\x");
        assert_eq!(escape_value(" a b"), r"\ a b");
        assert_eq!(escape_value("a\nb"), r"a\nb");
        assert_eq!(escape_key("a:b"), r"a\:b");
    }

    #[test]
    fn kafka_ids() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            let id = random_kafka_id();
            assert_eq!(id.len(), 22, "{id}");
            assert!(!id.starts_with('-'), "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{id}");
            assert!(seen.insert(id));
        }
    }

    #[test]
    fn base64url() {
        // RFC 4648 test vectors, URL-safe alphabet, no padding.
        assert_eq!(base64url_nopad(b""), "");
        assert_eq!(base64url_nopad(b"f"), "Zg");
        assert_eq!(base64url_nopad(b"fo"), "Zm8");
        assert_eq!(base64url_nopad(b"foo"), "Zm9v");
        assert_eq!(base64url_nopad(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64url_nopad(&[0xfb, 0xff]), "-_8");
        // Kafka's Uuid for bytes 0..16 (as printed by Uuid.toString).
        let bytes: Vec<u8> = (0..16).collect();
        assert_eq!(base64url_nopad(&bytes), "AAECAwQFBgcICQoLDA0ODw");
    }

    #[test]
    fn ports_are_distinct() {
        let ports = free_ports(6).unwrap();
        let set: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(set.len(), 6);
        assert!(ports.iter().all(|&p| p > 0));
    }

    #[test]
    fn log_levels_override_the_quiet_defaults_or_add_loggers() {
        let quiet = log4j2_yaml(&[]);
        assert!(quiet.contains("      - name: kafka.request.logger\n        level: WARN\n"), "{quiet}");
        let levels =
            [("kafka.request.logger".to_string(), "debug".to_string()), ("kafka.coordinator".into(), "TRACE".into())];
        let loud = log4j2_yaml(&levels);
        assert!(loud.contains("      - name: kafka.request.logger\n        level: DEBUG\n"), "{loud}");
        assert!(!loud.contains("kafka.request.logger\n        level: WARN"), "{loud}");
        assert!(loud.ends_with("      - name: kafka.coordinator\n        level: TRACE\n"), "{loud}");
        assert_eq!(loud.matches("- name: ").count(), 4);
    }

    #[test]
    fn malformed_log_levels_are_refused() {
        let cfg = |l: &str, v: &str| super::super::ClusterConfig {
            log_levels: vec![(l.into(), v.into())],
            ..Default::default()
        };
        assert!(cfg("kafka.request.logger", "DEBUG").resolved_log_levels().is_ok());
        assert!(cfg("kafka.request.logger", "LOUD").resolved_log_levels().is_err());
        assert!(cfg("kafka request", "DEBUG").resolved_log_levels().is_err());
        assert!(cfg("x\n  Root:", "DEBUG").resolved_log_levels().is_err());
    }
}
