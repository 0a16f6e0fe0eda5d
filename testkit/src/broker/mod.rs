//! A real, local Apache Kafka broker for tests, examples, benchmarks and the CLI.
//!
//! # Why a real broker
//!
//! Exactly-once processing lives and dies by broker behaviour: transaction coordinators,
//! producer fencing, `read_committed` visibility, consumer-group generations. A mock would test
//! our assumptions instead of Kafka, so the harness runs the genuine Apache Kafka broker
//! ([`KAFKA_VERSION`] unless [`ClusterConfig::kafka_version`] or `KAFKA_EOS_KAFKA_VERSION` say
//! otherwise) in KRaft mode (no ZooKeeper), one JVM per node, each node being broker and
//! controller at once ("combined" mode).
//!
//! # Kafka version and transaction protocol
//!
//! Two settings choose what the cluster is, so that the same tests run against several
//! brokers (see `docs/reliability.md`, "Broker versions"):
//!
//! - the Kafka release, [`ClusterConfig::kafka_version`], else the environment variable
//!   `KAFKA_EOS_KAFKA_VERSION` ([`KAFKA_VERSION_ENV`]), else [`KAFKA_VERSION`]. Kafka 4.x
//!   releases are supported (4.1.1 and 4.4.0 are tested); each gets its own jar cache;
//! - the cluster's finalized feature level `transaction.version`,
//!   [`ClusterConfig::transaction_version`], else `KAFKA_EOS_TRANSACTION_VERSION`
//!   ([`TRANSACTION_VERSION_ENV`]), else Kafka's default. It is set when the storage is
//!   formatted (`StorageTool format --feature transaction.version=N`); level 2 is the KIP-890
//!   protocol, 0 the classic one. [`LocalCluster::finalized_features`] reads it back.
//!
//! Broker logger levels: [`ClusterConfig::log_levels`], else `KAFKA_EOS_BROKER_LOG_LEVELS`
//! ([`LOG_LEVELS_ENV`]); each node logs to its `kafka.log` ([`LocalCluster::log_path`]).
//!
//! # Where the broker comes from
//!
//! There is no Docker and no tarball download: [`install()`] writes a pom-only Maven project (the
//! `pom.xml` next to this file, embedded in the binary) into a cache directory and lets Maven
//! copy the broker's runtime classpath there (about 46 jars, 43 MB). That happens once per
//! Kafka version; later runs are offline. The cache is `$KAFKA_EOS_CACHE` or
//! `$HOME/.cache/kafka-eos`, in a sub-directory named by the Kafka version, so another version
//! fetches anew and never mixes jars. Requirements: Java 17 or newer always, Maven only for that first fetch; both are
//! checked up front with errors that say what to install.
//!
//! # Lifecycle and the PDEATHSIG trick
//!
//! [`LocalCluster::start`] picks free ports, formats every node's storage with one cluster id
//! (`kafka.tools.StorageTool format`), launches the JVMs and returns once the cluster is
//! *ready* (see below). Dropping the cluster SIGKILLs its nodes and removes its temporary data
//! directory; [`LocalCluster::stop`] does the same gracefully.
//!
//! `Drop` alone cannot guarantee that no JVM outlives the test process: a panic with
//! `panic = "abort"`, a SIGKILL from a CI timeout or a cluster held in a `static OnceLock`
//! (statics are never dropped) all skip destructors. So each broker is started with
//! `PR_SET_PDEATHSIG = SIGKILL`: the kernel kills it when its parent dies. The catch is that
//! Linux ties the death signal to the parent *thread*, not the process, and `cargo test` runs
//! every test on its own short-lived thread. Every broker is therefore forked by one dedicated
//! spawner thread that lives as long as the process, so a broker dies exactly when the process
//! that started it does, however that happens. An exit hook (`atexit`) also removes the
//! temporary directories of clusters that were never dropped when the process exits normally;
//! after an abort or SIGKILL the directory stays behind, and the next [`LocalCluster::start`]
//! removes `kafka-eos-<pid>-*` directories whose process is gone.
//!
//! Processes are only ever signalled by the PID saved when they were spawned, never by name, so
//! a developer's own Kafka on the same machine is never touched.
//!
//! # Readiness
//!
//! An open port is not readiness: a KRaft broker accepts connections before it is *unfenced*
//! and able to serve. The harness asks for real metadata with an rdkafka client and waits until
//! the set of brokers in the answer equals the set of nodes that are running (fenced brokers
//! are absent from metadata). Note that a SIGKILLed node stays in metadata until the controller
//! notices its missing heartbeats (`broker.session.timeout.ms`, 9 s by default), so
//! [`LocalCluster::wait_ready`] after [`LocalCluster::kill_node`] takes that long.
//!
//! # `KAFKA_BOOTSTRAP`
//!
//! [`Cluster::from_env_or_start`] is what tests, examples and benchmarks call: when the
//! environment variable `KAFKA_BOOTSTRAP` is set (and not empty) it points at an existing
//! cluster that the harness never starts or stops, which is how to run the suite against a
//! production-like cluster or skip the JVM entirely. Otherwise a [`LocalCluster`] is started.
//!
//! # Network faults
//!
//! With [`ClusterConfig::fault_proxy`] every client connection goes through a
//! [`FaultProxy`] (the nodes advertise its ports on a `CLIENT` listener; replication and the
//! readiness probe stay direct), which can delay, blackhole, hold, cut or reset the
//! connections to one node at run time: [`LocalCluster::proxy`]. [`LocalCluster::coordinator`]
//! names the node that coordinates a transactional.id or a group, to aim such a fault.
//!
//! # Detached mode
//!
//! The CLI (`kafka-eos broker start|stop|status`) needs a broker that outlives the command:
//! [`start_detached`] starts the nodes in their own session without PDEATHSIG and records their
//! PIDs and ports in `<state_dir>/cluster.json`; [`stop_detached`] and [`status_detached`]
//! read that file. Before signalling a recorded PID they check `/proc/<pid>/cmdline` still names
//! `kafka.Kafka` and that node's `server.properties`, so a recycled PID is never killed.

pub mod acls;
mod cluster;
mod coordinator;
mod detached;
mod features;
mod install;
mod probe;
mod process;
mod props;
pub mod proxy;
mod tempdirs;

use std::path::PathBuf;
use std::time::Duration;

pub use cluster::LocalCluster;
pub use coordinator::{coordinator_partition, find_coordinator, java_string_hash, CoordinatorKind};
pub use detached::{start_detached, status_detached, stop_detached, STATE_FILE};
pub use features::finalized_features;
pub(crate) use install::FileLock;
pub use install::{cache_dir, copy_dependencies, install, log4j_version};
pub use proxy::{FaultProxy, OnRequest};

/// The Apache Kafka version the harness runs by default (see [`ClusterConfig::kafka_version`]).
/// 4.1.x because 4.0.0 dropped JoinGroup v0-1 (restored in 4.0.1/4.1.0).
pub const KAFKA_VERSION: &str = "4.1.1";

/// Environment variable naming the Kafka version of clusters whose
/// [`ClusterConfig::kafka_version`] is `None`, e.g. `KAFKA_EOS_KAFKA_VERSION=4.4.0`.
pub const KAFKA_VERSION_ENV: &str = "KAFKA_EOS_KAFKA_VERSION";

/// Environment variable giving the `transaction.version` feature level (0, 1 or 2) of clusters
/// whose [`ClusterConfig::transaction_version`] is `None`.
pub const TRANSACTION_VERSION_ENV: &str = "KAFKA_EOS_TRANSACTION_VERSION";

/// Environment variable giving broker logger levels for clusters whose
/// [`ClusterConfig::log_levels`] is empty: `logger=LEVEL` pairs separated by commas, e.g.
/// `KAFKA_EOS_BROKER_LOG_LEVELS=kafka.request.logger=DEBUG` (every request's timings).
pub const LOG_LEVELS_ENV: &str = "KAFKA_EOS_BROKER_LOG_LEVELS";

/// How long a graceful stop waits after SIGTERM before it sends SIGKILL.
///
/// 30 s is plenty for a healthy node (a few seconds of controlled shutdown). It bounds the
/// known slow case: the last node of a multi-node cluster whose controller quorum is already
/// gone would otherwise wait up to 5 minutes in controlled shutdown. [`LocalCluster::stop`]
/// therefore signals all nodes at once so that the quorum is alive while they shut down.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Name of the environment variable that selects an external cluster, see
/// [`Cluster::from_env_or_start`].
pub const BOOTSTRAP_ENV: &str = "KAFKA_BOOTSTRAP";

/// How to build a [`LocalCluster`].
///
/// Construct with [`Default`] and override what you need, e.g.
/// `ClusterConfig { nodes: 3, ..Default::default() }`.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Number of combined broker+controller nodes. Default 1.
    ///
    /// 1 is fastest (ready in a few seconds, one JVM). 3 is the smallest cluster that survives
    /// a node failure: it keeps a controller quorum and `min.insync.replicas=2`, so it is what
    /// fault-injection tests use. Other counts work but are not tested.
    pub nodes: usize,
    /// Maximum JVM heap per node, in MiB (`-Xmx`). Default 512, enough for tests and
    /// moderate benchmarks; the initial heap is the smaller of this and 256.
    pub heap_mb: u32,
    /// Extra `server.properties` entries appended to every node's file after the harness's own
    /// settings; a later key wins in Java properties, so these also override the defaults
    /// (e.g. `("broker.session.timeout.ms", "6000")` for faster failure detection).
    pub extra_properties: Vec<(String, String)>,
    /// Where node data, configs and logs live. Default `None`: a fresh directory
    /// `kafka-eos-<pid>-<n>` under [`std::env::temp_dir`], removed when the cluster is stopped
    /// or dropped. A directory given here is kept (handy to inspect logs), but any `node-*`
    /// sub-directories in it are wiped at start because every start formats a new cluster.
    pub data_dir: Option<PathBuf>,
    /// How long [`LocalCluster::start`] and [`LocalCluster::start_node`] wait for readiness.
    /// Default 60 s: a node is typically ready in a few seconds, but a loaded CI machine
    /// starting three JVMs can take much longer.
    pub ready_timeout: Duration,
    /// An extra `SASL_PLAINTEXT` listener with these users, for tests of the security
    /// settings. Default `None`: the nodes have only their `PLAINTEXT` listener.
    ///
    /// The `PLAINTEXT` listener stays in any case (inter-broker traffic and the readiness
    /// probe use it); [`LocalCluster::sasl_bootstrap_servers`] names the SASL one. (A
    /// detached cluster's state file records only the plaintext bootstrap servers.)
    pub sasl: Option<SaslConfig>,
    /// Put a [`FaultProxy`] between clients and every node. Default `false`.
    ///
    /// Each node gets a `CLIENT` listener that advertises the proxy's port, and
    /// [`LocalCluster::bootstrap_servers`] names the proxies: every client connection goes
    /// through them, while replication and controller traffic stay direct. Network faults
    /// are then injected with [`LocalCluster::proxy`]. Not available in detached mode (the
    /// proxy lives in the process that started the cluster).
    pub fault_proxy: bool,
    /// The Apache Kafka release to run, e.g. `"4.4.0"`. Default `None`: the environment
    /// variable `KAFKA_EOS_KAFKA_VERSION` when set, else [`KAFKA_VERSION`]. Its jars are
    /// fetched on first use ([`install()`]).
    pub kafka_version: Option<String>,
    /// The cluster's finalized `transaction.version` feature level, written when the storage
    /// is formatted: 0 is the classic transaction protocol, 2 the KIP-890 one (a new epoch per
    /// transaction; Java clients 4.x use it when the cluster has it; librdkafka 2.12 speaks only
    /// the classic protocol, which a level-2 cluster still serves). Default `None`: the
    /// environment variable `KAFKA_EOS_TRANSACTION_VERSION` when set, else Kafka's own default,
    /// which is the level of the release's latest production metadata version: **2** on every
    /// Kafka 4.x (level 2 needs metadata version 4.0-IV2).
    pub transaction_version: Option<u8>,
    /// Broker logger levels, `(logger, level)`, over the harness's own (INFO, with
    /// `kafka.request.logger` and `state.change.logger` at WARN). Default empty: the
    /// environment variable `KAFKA_EOS_BROKER_LOG_LEVELS` when set, else none. E.g.
    /// `("kafka.request.logger", "DEBUG")` logs every request with its time in the broker
    /// (`totalTimeMs`, and its queue, local, remote and send parts) — the way to tell a
    /// client's latency from the broker's; it costs broker CPU on every request.
    pub log_levels: Vec<(String, String)>,
}

/// A `SASL_PLAINTEXT` listener on every node of a [`LocalCluster`], on its own port.
///
/// Mechanisms `PLAIN`, `SCRAM-SHA-256` and `SCRAM-SHA-512` are enabled on it, and every user
/// can log in with each of them: the users are the PLAIN login module's users (in the
/// listener's JAAS config in `server.properties`) and SCRAM credentials for both hashes,
/// written into the cluster metadata when the storage is formatted
/// (`kafka.tools.StorageTool format --add-scram ...`). A client connects with
/// `security.protocol=SASL_PLAINTEXT`, `sasl.mechanism`, `sasl.username` and
/// `sasl.password`.
///
/// Names may use ASCII letters, digits, `.`, `_` and `-`; passwords any printable ASCII
/// except space, `"`, `\`, `,`, `=`, `[` and `]` (they end up inside the JAAS config and the
/// storage tool's credential syntax). `Debug` shows the names, never the passwords, and no
/// log line or error of the harness contains a password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SaslConfig {
    /// `(name, password)` of every user.
    pub users: Vec<(String, String)>,
    /// Run Kafka's `StandardAuthorizer`: a SASL user may then do only what its ACLs allow
    /// (none at first; no ACL found means denied), granted with [`acls::AclAdmin`]. The
    /// plaintext listeners' principal, `User:ANONYMOUS` (the brokers' own traffic, the
    /// harness and [`acls::AclAdmin`]), is a super user. Default `false`.
    pub authorizer: bool,
}

impl SaslConfig {
    /// The SASL mechanisms the listener enables.
    pub const MECHANISMS: [&'static str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

    /// A listener with one user.
    pub fn with_user(name: impl Into<String>, password: impl Into<String>) -> Self {
        SaslConfig::default().user(name, password)
    }

    /// Adds a user.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.users.push((name.into(), password.into()));
        self
    }

    /// With Kafka's authorizer ([`authorizer`](Self::authorizer)).
    pub fn with_authorizer(mut self) -> Self {
        self.authorizer = true;
        self
    }
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Users<'a>(&'a [(String, String)]);
        impl std::fmt::Debug for Users<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_list().entries(self.0.iter().map(|(name, _)| (name, "[redacted]"))).finish()
            }
        }
        f.debug_struct("SaslConfig").field("users", &Users(&self.users)).field("authorizer", &self.authorizer).finish()
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nodes: 1,
            heap_mb: 512,
            extra_properties: Vec::new(),
            data_dir: None,
            ready_timeout: Duration::from_secs(60),
            sasl: None,
            fault_proxy: false,
            kafka_version: None,
            transaction_version: None,
            log_levels: Vec::new(),
        }
    }
}

impl ClusterConfig {
    /// The default configuration with `nodes` nodes.
    pub fn with_nodes(nodes: usize) -> Self {
        ClusterConfig { nodes, ..Default::default() }
    }

    /// The Kafka version to run: [`ClusterConfig::kafka_version`], else
    /// `KAFKA_EOS_KAFKA_VERSION`, else [`KAFKA_VERSION`]. Fails on a malformed version.
    pub fn resolved_kafka_version(&self) -> Result<String, BrokerError> {
        let version = match &self.kafka_version {
            Some(v) => v.trim().to_string(),
            None => env_setting(KAFKA_VERSION_ENV).unwrap_or_else(|| KAFKA_VERSION.to_string()),
        };
        install::check_version(&version)?;
        Ok(version)
    }

    /// The `transaction.version` to format with: [`ClusterConfig::transaction_version`], else
    /// `KAFKA_EOS_TRANSACTION_VERSION`; `None` leaves Kafka's default. Fails outside 0..=2.
    pub fn resolved_transaction_version(&self) -> Result<Option<u8>, BrokerError> {
        let level = match (self.transaction_version, env_setting(TRANSACTION_VERSION_ENV)) {
            (Some(level), _) => level,
            (None, None) => return Ok(None),
            (None, Some(text)) => text.parse().map_err(|_| {
                BrokerError::InvalidConfig(format!("{TRANSACTION_VERSION_ENV}={text:?} is not 0, 1 or 2"))
            })?,
        };
        match level {
            0..=2 => Ok(Some(level)),
            _ => Err(BrokerError::InvalidConfig(format!("transaction.version must be 0, 1 or 2, got {level}"))),
        }
    }
}

impl ClusterConfig {
    /// The logger levels to apply: [`ClusterConfig::log_levels`], else
    /// `KAFKA_EOS_BROKER_LOG_LEVELS`. Fails on a malformed pair or an unknown level.
    pub fn resolved_log_levels(&self) -> Result<Vec<(String, String)>, BrokerError> {
        let pairs = match (self.log_levels.is_empty(), env_setting(LOG_LEVELS_ENV)) {
            (false, _) | (true, None) => self.log_levels.clone(),
            (true, Some(text)) => text
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| match p.split_once('=') {
                    Some((logger, level)) => Ok((logger.trim().to_string(), level.trim().to_string())),
                    None => Err(BrokerError::InvalidConfig(format!(
                        "{LOG_LEVELS_ENV}: {p:?} is not logger=LEVEL (e.g. kafka.request.logger=DEBUG)"
                    ))),
                })
                .collect::<Result<_, _>>()?,
        };
        for (logger, level) in &pairs {
            let name_ok = !logger.is_empty()
                && logger.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '$' | '-'));
            let level_ok = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "OFF"].contains(&level.to_uppercase().as_str());
            if !name_ok || !level_ok {
                return Err(BrokerError::InvalidConfig(format!(
                    "broker log level {logger:?}={level:?}: expected a logger name and one of TRACE, DEBUG, INFO, WARN, ERROR, OFF"
                )));
            }
        }
        Ok(pairs)
    }
}

/// A setting from the environment, trimmed; unset and empty are both `None`.
fn env_setting(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// The cluster that tests, examples and benchmarks run against.
///
/// Either an external cluster named by `KAFKA_BOOTSTRAP` (never started or stopped by us) or a
/// [`LocalCluster`] owned by this value (stopped when dropped).
#[derive(Debug)]
pub enum Cluster {
    /// A cluster someone else runs; only its bootstrap servers are known.
    External {
        /// Comma-separated `host:port` list, as given in `KAFKA_BOOTSTRAP`.
        bootstrap: String,
    },
    /// A cluster this process started.
    Local(LocalCluster),
}

impl Cluster {
    /// Uses `KAFKA_BOOTSTRAP` when it is set and not empty, otherwise starts a
    /// [`LocalCluster`] from `cfg` (which is ignored for an external cluster).
    ///
    /// Fault-injection tests need [`Cluster::local_mut`] to return `Some` and should skip (or
    /// fail clearly) against an external cluster.
    pub fn from_env_or_start(cfg: ClusterConfig) -> Result<Cluster, BrokerError> {
        match std::env::var(BOOTSTRAP_ENV) {
            Ok(bootstrap) if !bootstrap.trim().is_empty() => {
                tracing::info!(%bootstrap, "using the external Kafka cluster from {BOOTSTRAP_ENV}");
                Ok(Cluster::External { bootstrap: bootstrap.trim().to_string() })
            }
            _ => LocalCluster::start(cfg).map(Cluster::Local),
        }
    }

    /// Bootstrap servers to give a Kafka client (`bootstrap.servers`).
    pub fn bootstrap_servers(&self) -> String {
        match self {
            Cluster::External { bootstrap } => bootstrap.clone(),
            Cluster::Local(local) => local.bootstrap_servers(),
        }
    }

    /// The local cluster, for tests that kill or restart nodes; `None` for an external one.
    pub fn local_mut(&mut self) -> Option<&mut LocalCluster> {
        match self {
            Cluster::External { .. } => None,
            Cluster::Local(local) => Some(local),
        }
    }
}

/// Everything that can go wrong while installing, starting, probing or stopping brokers.
///
/// Every message says what to do about it; node failures carry the tail of the node's log and
/// its path.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// No usable `java` executable.
    #[error(
        "Java 17 or newer is required to run the local Kafka broker (found: no `{java}` executable). \
         On Debian: apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME), \
         or set {BOOTSTRAP_ENV} to use an existing Kafka cluster"
    )]
    JavaMissing {
        /// The executable that was tried (`$JAVA_HOME/bin/java` or `java`).
        java: String,
    },
    /// `java` exists but is older than 17 (or its version could not be read).
    #[error(
        "Java 17 or newer is required to run the local Kafka broker (found {found} at `{java}`). \
         On Debian: apt-get install -y openjdk-17-jre-headless (and point JAVA_HOME at it), \
         or set {BOOTSTRAP_ENV} to use an existing Kafka cluster"
    )]
    JavaTooOld {
        /// The executable that was run.
        java: String,
        /// What `java -version` reported.
        found: String,
    },
    /// Maven is needed for the one-time jar fetch but is not installed.
    #[error(
        "Apache Maven (`mvn`) is required once to fetch the Kafka {version} jars into {}. \
         On Debian: apt-get install -y maven (or copy a filled cache there), \
         or set {BOOTSTRAP_ENV} to use an existing Kafka cluster", cache.display()
    )]
    MavenMissing {
        /// The Kafka version whose jars are missing.
        version: String,
        /// The cache directory that needs the jars.
        cache: PathBuf,
    },
    /// Maven ran but failed, typically no network access to Maven Central.
    #[error(
        "Maven failed ({status}) fetching the Kafka {version} jars into {}. Check network \
         access to Maven Central (or configure a mirror in ~/.m2/settings.xml) and retry. \
         Last lines of its output:\n{tail}", dir.display()
    )]
    MavenFailed {
        /// The Kafka version being fetched.
        version: String,
        /// Exit status of `mvn`.
        status: String,
        /// Where the jars were going.
        dir: PathBuf,
        /// The last lines of Maven's output.
        tail: String,
    },
    /// The configuration cannot work.
    #[error("invalid Kafka cluster configuration: {0}")]
    InvalidConfig(String),
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, including the path involved.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `kafka.tools.StorageTool format` failed for a node.
    #[error(
        "formatting the storage of Kafka node {node} failed ({status}); its config is {}. \
         Output:\n{output}", config.display()
    )]
    FormatFailed {
        /// The node id.
        node: i32,
        /// Exit status of the storage tool.
        status: String,
        /// The node's `server.properties`.
        config: PathBuf,
        /// stdout and stderr of the storage tool.
        output: String,
    },
    /// A node process exited without being asked to.
    #[error(
        "Kafka node {node} exited unexpectedly ({status}). Its log is {}:\n{tail}",
        log.display()
    )]
    NodeExited {
        /// The node id.
        node: i32,
        /// How it exited.
        status: String,
        /// The node's log file (JVM stdout and stderr).
        log: PathBuf,
        /// From that log (since the latest launch): the first ERROR lines and the last 30 lines.
        tail: String,
    },
    /// The cluster did not reach the expected state before the deadline.
    #[error(
        "Kafka cluster not ready after {timeout:?}: expected brokers {expected:?} in metadata, \
         saw {seen}. A slow machine may need a larger ClusterConfig::ready_timeout; \
         otherwise see the node logs:\n{logs}"
    )]
    NotReady {
        /// How long was waited.
        timeout: Duration,
        /// Node ids that should have been listed.
        expected: Vec<i32>,
        /// What the last metadata probe returned (broker ids or the probe error).
        seen: String,
        /// For every node that was missing: its log path, first ERROR lines and last 30 lines.
        logs: String,
    },
    /// No node has this id.
    #[error("no Kafka node with id {node} in this cluster (node ids: {ids:?})")]
    UnknownNode {
        /// The id asked for.
        node: i32,
        /// The ids that exist.
        ids: Vec<i32>,
    },
    /// The rdkafka probe client could not be created.
    #[error("creating the rdkafka metadata probe failed: {0}")]
    Probe(String),
    /// A detached cluster from this state directory is still running.
    #[error(
        "a detached Kafka cluster is already running at {bootstrap} (state file {}); \
         stop it first (`kafka-eos broker stop`)", state_file.display()
    )]
    AlreadyRunning {
        /// Its bootstrap servers.
        bootstrap: String,
        /// The state file that records it.
        state_file: PathBuf,
    },
    /// The detached-cluster state file is unreadable.
    #[error(
        "the detached Kafka cluster state file {} is unreadable ({message}); if no broker is \
         running, delete it", path.display()
    )]
    BadState {
        /// The state file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
}

impl BrokerError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BrokerError::Io { context: context.into(), source }
    }
}
