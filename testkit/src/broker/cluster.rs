//! [`LocalCluster`]: format, launch, probe, kill, restart and stop local Kafka nodes.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::install::{install, java};
use super::probe::{self, Probe};
use super::process::{self, SpawnMode};
use super::props::{self, NodeSpec};
use super::proxy::FaultProxy;
#[cfg(test)]
use super::tempdirs::stale_dir_pid;
use super::tempdirs::{fresh_temp_dir, prepare_given_dir, remove_stale_temp_dirs};
use super::{BrokerError, ClusterConfig, STOP_TIMEOUT};

/// Lines of a node's log quoted in errors.
const TAIL_LINES: usize = 30;

/// How often a start is retried when another process grabbed one of the picked ports.
const PORT_ATTEMPTS: usize = 3;

#[derive(Debug)]
struct Node {
    spec: NodeSpec,
    /// The running JVM, `None` once stopped or killed by us. A child that exited on its own
    /// stays here (with its cached exit status) so the next readiness check reports it.
    child: Mutex<Option<Child>>,
}

impl Node {
    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Running (not exited) right now. Reaps the process if it has exited.
    fn is_running(&self) -> bool {
        match self.child().as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Exit status if the process exited without being stopped by us.
    fn unexpected_exit(&self) -> Option<String> {
        match self.child().as_mut() {
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(e) => Some(format!("unknown status: {e}")),
            },
            None => None,
        }
    }

    fn exited_error(&self, status: String) -> BrokerError {
        BrokerError::NodeExited {
            node: self.spec.id,
            status,
            log: self.spec.log_path(),
            tail: process::log_excerpt(&self.spec.log_path(), TAIL_LINES),
        }
    }

    /// SIGKILL (by the saved PID) and reap. No-op when not running.
    fn kill(&self) {
        if let Some(mut child) = self.child().take() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
            process::untrack_child(child.id());
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(|c| c.id())
    }
}

/// A Kafka cluster of local JVMs started by this process. See the [module docs](super).
///
/// Every node is a combined broker+controller on 127.0.0.1 with its own broker and controller
/// port, kept for the life of the cluster so that clients and restarted nodes find each other.
/// Dropping the value SIGKILLs the nodes and removes a temporary data directory; the nodes
/// also die with this process (PDEATHSIG) however it ends. `LocalCluster` is `Send + Sync`,
/// so it can live in a `static OnceLock` shared by all tests of a binary.
#[derive(Debug)]
pub struct LocalCluster {
    nodes: Vec<Node>,
    data_dir: PathBuf,
    remove_data_dir: bool,
    java: PathBuf,
    libs: PathBuf,
    kafka_version: String,
    heap_mb: u32,
    ready_timeout: Duration,
    mode: SpawnMode,
    /// Set when a detached cluster is handed over to its state file: Drop leaves it alone.
    released: bool,
    /// The clients' way in, with [`ClusterConfig::fault_proxy`].
    proxy: Option<FaultProxy>,
}

impl LocalCluster {
    /// Starts a fresh cluster and returns once it is ready.
    ///
    /// Installs the jars if missing ([`super::install()`]), checks Java, picks free ports,
    /// formats every node with one new cluster id, launches the JVMs and waits up to
    /// `cfg.ready_timeout` until a metadata request lists every node. If another process takes
    /// one of the picked ports before the broker binds it, the start is retried with fresh
    /// ports. On any other failure the nodes are killed, the data directory is kept for
    /// inspection and the error quotes the failing node's log.
    ///
    /// Measured on 2 cores with warm jars: 1 node ready about 4-5 s after the call (1.2 s of
    /// it formatting), 3 nodes about 10-13 s. Each node uses about 220-250 MB RSS when idle.
    pub fn start(cfg: ClusterConfig) -> Result<LocalCluster, BrokerError> {
        Self::launch(cfg, SpawnMode::Attached, |_| Ok(()))
    }

    /// [`LocalCluster::start`] with a choice of spawn mode and a hook that runs after all
    /// nodes are spawned, before the readiness wait (detached mode records its state there).
    pub(crate) fn launch(
        cfg: ClusterConfig,
        mode: SpawnMode,
        mut on_spawned: impl FnMut(&LocalCluster) -> Result<(), BrokerError>,
    ) -> Result<LocalCluster, BrokerError> {
        if cfg.nodes == 0 || cfg.nodes > 9 {
            return Err(BrokerError::InvalidConfig(format!(
                "nodes must be between 1 and 9 (1 or 3 are the tested sizes), got {}",
                cfg.nodes
            )));
        }
        if cfg.heap_mb < 128 {
            return Err(BrokerError::InvalidConfig(format!(
                "heap_mb must be at least 128 (512 is the default), got {}",
                cfg.heap_mb
            )));
        }
        if let Some(sasl) = &cfg.sasl {
            props::validate_sasl(sasl).map_err(BrokerError::InvalidConfig)?;
        }
        if cfg.fault_proxy && mode != SpawnMode::Attached {
            return Err(BrokerError::InvalidConfig(
                "fault_proxy needs an attached cluster: the proxy lives in the process that started it".into(),
            ));
        }
        let kafka_version = cfg.resolved_kafka_version()?;
        let transaction_version = cfg.resolved_transaction_version()?;
        let log4j = props::log4j2_yaml(&cfg.resolved_log_levels()?);
        let java = java()?;
        let libs = install(&kafka_version)?;
        remove_stale_temp_dirs();
        let ids: Vec<i32> = (1..=cfg.nodes as i32).collect();
        let mut proxy = match cfg.fault_proxy {
            true => {
                Some(FaultProxy::bind(&ids).map_err(|e| BrokerError::io("binding the fault proxy on 127.0.0.1", e))?)
            }
            false => None,
        };

        let mut attempt = 0;
        loop {
            attempt += 1;
            let (data_dir, owned) = match &cfg.data_dir {
                Some(dir) => (prepare_given_dir(dir)?, false),
                None => (fresh_temp_dir()?, true),
            };
            // Broker and controller port per node, plus the SASL listener's and the proxied
            // CLIENT listener's if there are.
            let per_node = 2 + usize::from(cfg.sasl.is_some()) + usize::from(proxy.is_some());
            let ports = props::free_ports(cfg.nodes * per_node)
                .map_err(|e| BrokerError::io("picking free ports on 127.0.0.1", e))?;
            let nodes = ports
                .chunks(per_node)
                .enumerate()
                .map(|(i, p)| {
                    let id = i as i32 + 1;
                    let sasl = cfg.sasl.as_ref().map(|_| p[2]);
                    let mut spec = NodeSpec::new(&data_dir, id, p[0], p[1], sasl);
                    if let Some(proxy) = &proxy {
                        let own = p[per_node - 1];
                        proxy.set_upstream(id, std::net::SocketAddr::from(([127, 0, 0, 1], own)));
                        spec.client = proxy.port(id).map(|port| (own, port));
                    }
                    Node { spec, child: Mutex::new(None) }
                })
                .collect();
            let mut cluster = LocalCluster {
                nodes,
                data_dir,
                remove_data_dir: owned && mode == SpawnMode::Attached,
                java: java.clone(),
                libs: libs.clone(),
                kafka_version: kafka_version.clone(),
                heap_mb: cfg.heap_mb,
                ready_timeout: cfg.ready_timeout,
                mode,
                released: false,
                proxy: None,
            };
            if cluster.remove_data_dir {
                process::track_dir(&cluster.data_dir);
            }
            let started = Instant::now();
            let sasl_users: Option<Vec<&str>> =
                cfg.sasl.as_ref().map(|s| s.users.iter().map(|(name, _)| name.as_str()).collect());
            tracing::info!(
                nodes = cfg.nodes,
                kafka_version,
                ?transaction_version,
                dir = %cluster.data_dir.display(),
                bootstrap = %cluster.bootstrap_servers(),
                sasl_bootstrap = cluster.sasl_bootstrap_servers(),
                ?sasl_users,
                "starting a local Kafka cluster"
            );
            let result = cluster
                .write_and_format(&cfg.extra_properties, cfg.sasl.as_ref(), transaction_version, &log4j)
                .and_then(|()| cluster.nodes.iter().try_for_each(|n| cluster.spawn_node(n)))
                .and_then(|()| on_spawned(&cluster))
                .and_then(|()| cluster.wait_ready(cfg.ready_timeout));
            match result {
                Ok(()) => {
                    cluster.proxy = proxy.take();
                    tracing::info!(elapsed = ?started.elapsed(), bootstrap = %cluster.bootstrap_servers(), "local Kafka cluster ready");
                    return Ok(cluster);
                }
                Err(e) => {
                    cluster.kill_all();
                    if attempt < PORT_ATTEMPTS && cluster.port_clash(&e) {
                        tracing::warn!("a picked port was taken before the broker bound it; retrying with new ports");
                        if owned {
                            let _ = fs::remove_dir_all(&cluster.data_dir);
                        }
                        cluster.keep_data_dir();
                        continue;
                    }
                    // Keep the logs the error points at. A temporary directory is removed by
                    // the first start after this process has exited.
                    cluster.keep_data_dir();
                    return Err(e);
                }
            }
        }
    }

    /// Comma-separated broker addresses of all nodes, running or not: `127.0.0.1:p1,...`;
    /// with [`ClusterConfig::fault_proxy`], the proxies' addresses.
    ///
    /// Ports never change, so the string stays valid across node restarts.
    pub fn bootstrap_servers(&self) -> String {
        match &self.proxy {
            Some(_) => self.proxied_bootstrap().unwrap_or_else(|| self.direct_bootstrap_servers()),
            None => self.direct_bootstrap_servers(),
        }
    }

    fn proxied_bootstrap(&self) -> Option<String> {
        props::proxy_bootstrap_of(self.nodes.iter().map(|n| &n.spec))
    }

    /// The nodes' own `PLAINTEXT` listeners, bypassing a fault proxy (what replication and
    /// the readiness probe use). Equal to [`LocalCluster::bootstrap_servers`] without one.
    pub fn direct_bootstrap_servers(&self) -> String {
        props::bootstrap_of(self.nodes.iter().map(|n| &n.spec))
    }

    /// The fault proxy every client goes through, with [`ClusterConfig::fault_proxy`].
    pub fn proxy(&self) -> Option<&FaultProxy> {
        self.proxy.as_ref()
    }

    /// The addresses of every node's `SASL_PLAINTEXT` listener (`127.0.0.1:s1,...`), when the
    /// cluster was started with [`ClusterConfig::sasl`]; `None` otherwise. Stable across node
    /// restarts, like [`LocalCluster::bootstrap_servers`].
    pub fn sasl_bootstrap_servers(&self) -> Option<String> {
        props::sasl_bootstrap_of(self.nodes.iter().map(|n| &n.spec))
    }

    /// The Apache Kafka version the nodes run.
    pub fn kafka_version(&self) -> &str {
        &self.kafka_version
    }

    /// Number of nodes, running or not.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Node ids (`node.id`, also the broker id in metadata): `1..=node_count`.
    pub fn node_ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.spec.id).collect()
    }

    /// Whether the node's JVM is alive (it may still be starting or fenced). `false` for an
    /// unknown id.
    pub fn is_running(&self, node: i32) -> bool {
        self.find(node).map(|n| n.is_running()).unwrap_or(false)
    }

    /// OS process id of a running node's JVM (e.g. to measure its memory), `None` if stopped.
    pub fn pid(&self, node: i32) -> Option<u32> {
        self.find(node).ok().filter(|n| n.is_running()).and_then(|n| n.pid())
    }

    /// The node's log file (JVM stdout/stderr, broker log at INFO), kept across restarts.
    pub fn log_path(&self, node: i32) -> Option<PathBuf> {
        self.find(node).ok().map(|n| n.spec.log_path())
    }

    /// Crashes a node: SIGKILL to its saved PID, then reaps it. No-op if it is not running.
    ///
    /// The other nodes keep listing it in metadata until its broker session times out
    /// (`broker.session.timeout.ms`, 9 s by default); [`LocalCluster::wait_ready`] waits
    /// for that. With 3 nodes, one may be down and the cluster keeps its controller quorum and
    /// `min.insync.replicas=2`; two down lose the quorum.
    pub fn kill_node(&mut self, node: i32) -> Result<(), BrokerError> {
        let n = self.find(node)?;
        tracing::info!(node, pid = ?n.pid(), "killing Kafka node (SIGKILL)");
        n.kill();
        Ok(())
    }

    /// Stops a node gracefully: SIGTERM, then SIGKILL if it has not exited after
    /// [`STOP_TIMEOUT`]. No-op if it is not running.
    ///
    /// A graceful stop moves partition leadership away first (controlled shutdown), so
    /// clients see a clean leader change instead of timeouts. It can hang until the timeout
    /// when the controller quorum is gone (stopping the last node of a 3-node cluster one by
    /// one); [`LocalCluster::stop`] avoids that by signalling all nodes at once.
    pub fn stop_node(&mut self, node: i32) -> Result<(), BrokerError> {
        let n = self.find(node)?;
        stop_gracefully(&[n]);
        Ok(())
    }

    /// Restarts a stopped or killed node with the same ports, config and data, and waits (up to
    /// the configured `ready_timeout`) until every running node, this one included, is in
    /// metadata. No-op plus that wait if the node is already running.
    pub fn start_node(&mut self, node: i32) -> Result<(), BrokerError> {
        let n = self.find(node)?;
        if n.is_running() {
            return self.wait_for(self.ready_timeout, false);
        }
        // Forget a child that exited on its own; this restart is the caller's answer to it.
        n.kill();
        tracing::info!(node, "restarting Kafka node");
        self.spawn_node(n)?;
        // The other nodes list a SIGKILLed node until its broker session expires: only its
        // own answer shows that it is back.
        let (deadline, bootstrap) = (Instant::now() + self.ready_timeout, props::bootstrap_of([&n.spec]));
        while !probe::answers_itself(&bootstrap, node, Duration::from_secs(2))? {
            if let Some(status) = n.unexpected_exit() {
                return Err(n.exited_error(status));
            }
            if Instant::now() >= deadline {
                let log = n.spec.log_path();
                return Err(BrokerError::NotReady {
                    timeout: self.ready_timeout,
                    expected: vec![node],
                    seen: format!("node {node} never answered a metadata request itself"),
                    logs: format!(
                        "--- node {node} log {}:\n{}\n",
                        log.display(),
                        process::log_excerpt(&log, TAIL_LINES)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        self.wait_for(self.ready_timeout, false)
    }

    /// Waits until a metadata request lists exactly the nodes that are running: every running
    /// node registered and unfenced, and no killed node still in its session.
    ///
    /// Retries until `timeout` (brokers refuse connections at first). Fails early with
    /// [`BrokerError::NodeExited`] if a node exits on its own, and with
    /// [`BrokerError::NotReady`] (quoting the logs of the missing nodes) at the deadline.
    /// Returns at once if no node is running.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), BrokerError> {
        self.wait_for(timeout, true)
    }

    /// Stops every node gracefully (SIGTERM to all at once, SIGKILL to any still alive after
    /// [`STOP_TIMEOUT`]) and removes the data directory unless the caller chose it.
    ///
    /// Takes about 0.5 s for one node and 6 s for three (the Raft leader waits up to 5 s for
    /// followers that are already gone). Dropping the cluster instead is immediate (SIGKILL),
    /// which is fine when nothing needs the data afterwards.
    pub fn stop(mut self) -> Result<(), BrokerError> {
        let started = Instant::now();
        let nodes: Vec<&Node> = self.nodes.iter().collect();
        stop_gracefully(&nodes);
        tracing::info!(elapsed = ?started.elapsed(), "local Kafka cluster stopped");
        let remove = self.remove_data_dir;
        self.keep_data_dir();
        if remove {
            fs::remove_dir_all(&self.data_dir).map_err(|e| {
                BrokerError::io(format!("removing the cluster directory {}", self.data_dir.display()), e)
            })?;
        }
        Ok(())
    }

    /// The directory holding `node-<id>/` (config, `data/`, `kafka.log`) for every node.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    // ---- crate-internal -------------------------------------------------------------------

    /// (spec, pid of the running JVM) for every node.
    pub(crate) fn node_states(&self) -> Vec<(NodeSpec, Option<u32>)> {
        self.nodes.iter().map(|n| (n.spec.clone(), n.pid())).collect()
    }

    /// Hands the running nodes over (detached mode): dropping `self` no longer kills them.
    pub(crate) fn release(mut self) {
        self.released = true;
    }

    fn find(&self, node: i32) -> Result<&Node, BrokerError> {
        self.nodes
            .iter()
            .find(|n| n.spec.id == node)
            .ok_or_else(|| BrokerError::UnknownNode { node, ids: self.node_ids() })
    }

    /// Whether a failed start is worth retrying with new ports: a node could not bind one of
    /// the picked ports because another process took it after we released it.
    fn port_clash(&self, e: &BrokerError) -> bool {
        matches!(e, BrokerError::NodeExited { .. } | BrokerError::NotReady { .. })
            && self.nodes.iter().any(|n| {
                process::current_log(&n.spec.log_path())
                    .map(|log| log.contains("Address already in use"))
                    .unwrap_or(false)
            })
    }

    /// From now on nothing removes the data dir (it was removed, or is kept for its logs).
    fn keep_data_dir(&mut self) {
        if std::mem::replace(&mut self.remove_data_dir, false) {
            process::untrack_dir(&self.data_dir);
        }
    }

    fn kill_all(&self) {
        for n in &self.nodes {
            n.kill();
        }
    }

    fn java_cmd(&self) -> Command {
        let mut cmd = Command::new(&self.java);
        cmd.env_remove("CLASSPATH").stdin(Stdio::null());
        cmd
    }

    fn classpath(&self) -> String {
        format!("{}/*", self.libs.display())
    }

    /// Launches one node's JVM (stdout+stderr appended to its `kafka.log`).
    fn spawn_node(&self, node: &Node) -> Result<(), BrokerError> {
        let spec = &node.spec;
        let log_path = spec.log_path();
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| BrokerError::io(format!("opening {}", log_path.display()), e))?;
        let sasl = spec.sasl_port.map(|p| format!(", SASL port {p}")).unwrap_or_default();
        let _ = writeln!(
            log,
            "{} {} (broker port {}, controller port {}{sasl}) =====",
            process::LAUNCH_MARKER,
            spec.id,
            spec.broker_port,
            spec.controller_port
        );
        let err_log = log.try_clone().map_err(|e| BrokerError::io(format!("opening {}", log_path.display()), e))?;
        let mut cmd = self.java_cmd();
        cmd.arg(format!("-Xmx{}m", self.heap_mb))
            .arg(format!("-Xms{}m", self.heap_mb.min(256)))
            // Kafka's own defaults from kafka-run-class.sh.
            .args([
                "-server",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35",
                "-XX:+ExplicitGCInvokesConcurrent",
                "-Djava.awt.headless=true",
            ])
            .arg(format!("-Dkafka.logs.dir={}", spec.logs_dir().display()))
            .arg(format!("-Dlog4j2.configurationFile={}", spec.log4j_path().display()))
            .arg("-cp")
            .arg(self.classpath())
            .arg("kafka.Kafka")
            .arg(spec.properties_path())
            .current_dir(&spec.dir)
            .stdout(log)
            .stderr(err_log);
        let child = process::spawn(cmd, self.mode)
            .map_err(|e| BrokerError::io(format!("launching Kafka node {} ({})", spec.id, self.java.display()), e))?;
        tracing::debug!(node = spec.id, pid = child.id(), log = %log_path.display(), "Kafka node launched");
        *node.child() = Some(child);
        Ok(())
    }

    /// Waits until metadata lists the running nodes: exactly them if `exact`, else at least.
    fn wait_for(&self, timeout: Duration, exact: bool) -> Result<(), BrokerError> {
        let deadline = Instant::now() + timeout;
        for n in &self.nodes {
            if let Some(status) = n.unexpected_exit() {
                return Err(n.exited_error(status));
            }
        }
        let running: Vec<&Node> = self.nodes.iter().filter(|n| n.is_running()).collect();
        if running.is_empty() {
            return Ok(());
        }
        let expected: Vec<i32> = running.iter().map(|n| n.spec.id).collect();
        let probe = Probe::new(&props::bootstrap_of(running.iter().map(|n| &n.spec)))?;
        let mut last: Result<Vec<i32>, String>;
        loop {
            for n in &running {
                if let Some(status) = n.unexpected_exit() {
                    return Err(n.exited_error(status));
                }
            }
            let now = Instant::now();
            let attempt =
                (deadline.saturating_duration_since(now)).clamp(Duration::from_millis(100), Duration::from_secs(2));
            last = probe.broker_ids(attempt);
            if let Ok(seen) = &last {
                let ok = if exact { *seen == expected } else { expected.iter().all(|id| seen.contains(id)) };
                if ok {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                break;
            }
            // fetch_metadata returns at once when it has an answer; do not spin.
            if now.elapsed() < Duration::from_millis(200) {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let (seen, missing): (String, Vec<&Node>) = match &last {
            Ok(ids) => (format!("{ids:?}"), running.iter().copied().filter(|n| !ids.contains(&n.spec.id)).collect()),
            Err(e) => (format!("no metadata ({e})"), running.clone()),
        };
        let mut logs = String::new();
        for n in if missing.is_empty() { running.clone() } else { missing } {
            logs.push_str(&format!(
                "--- node {} log {}:\n{}\n",
                n.spec.id,
                n.spec.log_path().display(),
                process::log_excerpt(&n.spec.log_path(), TAIL_LINES)
            ));
        }
        Err(BrokerError::NotReady { timeout, expected, seen, logs })
    }
}

impl Drop for LocalCluster {
    /// SIGKILLs the nodes that are still running (a graceful stop is [`LocalCluster::stop`])
    /// and removes a temporary data directory.
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.kill_all();
        if self.remove_data_dir {
            let _ = fs::remove_dir_all(&self.data_dir);
            self.keep_data_dir();
        }
    }
}

/// SIGTERM to all running `nodes` at once, wait up to [`STOP_TIMEOUT`], SIGKILL the rest;
/// every process is reaped.
fn stop_gracefully(nodes: &[&Node]) {
    let mut children: Vec<(i32, Child)> =
        nodes.iter().filter_map(|n| n.child().take().map(|c| (n.spec.id, c))).collect();
    for (id, child) in &mut children {
        if matches!(child.try_wait(), Ok(None)) {
            tracing::info!(node = *id, pid = child.id(), "stopping Kafka node (SIGTERM)");
            let _ = process::signal(child.id(), process::Signal::SIGTERM);
        }
    }
    process::wait_until(STOP_TIMEOUT, || children.iter_mut().all(|(_, c)| !matches!(c.try_wait(), Ok(None))));
    for (id, child) in &mut children {
        if matches!(child.try_wait(), Ok(None)) {
            tracing::warn!(node = *id, "Kafka node did not stop within {STOP_TIMEOUT:?}; sending SIGKILL");
            let _ = child.kill();
        }
        let _ = child.wait();
        process::untrack_child(child.id());
    }
}

#[path = "cluster_format.rs"]
mod format;

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
