//! Detached clusters for the CLI: the brokers outlive the command that started them and are
//! found again through a state file.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cluster::LocalCluster;
use super::process::{self, SpawnMode};
use super::{BrokerError, ClusterConfig, STOP_TIMEOUT};

/// File name of the state file in the CLI's state directory.
pub const STATE_FILE: &str = "cluster.json";

/// What `cluster.json` records: enough to find, check and stop the processes later.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    kafka_version: String,
    bootstrap: String,
    data_dir: PathBuf,
    /// The data dir was chosen by us (`<state_dir>/data`) and is removed on stop.
    remove_data_dir: bool,
    nodes: Vec<StateNode>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StateNode {
    id: i32,
    pid: u32,
    broker_port: u16,
    controller_port: u16,
    /// The node's `server.properties`; its path must be on the process's command line.
    config: PathBuf,
    log: PathBuf,
}

impl StateNode {
    /// Alive and still the broker we started (guards against recycled PIDs).
    fn alive(&self) -> bool {
        process::reap_if_child(self.pid);
        process::is_our_broker(self.pid, &self.config)
    }
}

/// Starts a cluster that keeps running after this process exits (`kafka-eos broker start`) and
/// returns its bootstrap servers once it is ready.
///
/// The nodes run in their own session with stdin closed and no death signal, so neither the
/// end of the CLI nor a Ctrl-C in its terminal stops them. Their PIDs, ports and paths are
/// written to `<state_dir>/cluster.json` as soon as they are launched (before the readiness
/// wait, so a CLI interrupted during the wait can still stop them). Data defaults to
/// `<state_dir>/data` (not the temp dir, whose leftovers test runs clean up), which
/// [`stop_detached`] removes; a `cfg.data_dir` is kept. Fails with
/// [`BrokerError::AlreadyRunning`] if the state file names a live cluster; a state file whose
/// processes are gone is replaced. If the start fails, the nodes are killed and the state
/// file removed; the logs stay in the data dir.
pub fn start_detached(cfg: ClusterConfig, state_dir: &Path) -> Result<String, BrokerError> {
    fs::create_dir_all(state_dir)
        .map_err(|e| BrokerError::io(format!("creating the state directory {}", state_dir.display()), e))?;
    let state_path = state_dir.join(STATE_FILE);
    if let Some(old) = read_state(&state_path)? {
        if old.nodes.iter().any(StateNode::alive) {
            return Err(BrokerError::AlreadyRunning { bootstrap: old.bootstrap, state_file: state_path });
        }
        tracing::info!(state = %state_path.display(), "replacing the state of a detached cluster that is no longer running");
        forget(&old, &state_path)?;
    }
    let mut cfg = cfg;
    let remove_data_dir = cfg.data_dir.is_none();
    if remove_data_dir {
        cfg.data_dir = Some(state_dir.join("data"));
    }
    let result =
        LocalCluster::launch(cfg, SpawnMode::Detached, |cluster| write_state(&state_path, cluster, remove_data_dir));
    match result {
        Ok(cluster) => {
            let bootstrap = cluster.bootstrap_servers();
            cluster.release();
            Ok(bootstrap)
        }
        Err(e) => {
            let _ = fs::remove_file(&state_path);
            Err(e)
        }
    }
}

/// Stops the detached cluster recorded in `<state_dir>/cluster.json` (`kafka-eos broker stop`),
/// then removes its state file and, if the harness chose it, its data directory.
///
/// Signals only the recorded PIDs, and only while `/proc/<pid>/cmdline` still shows
/// `kafka.Kafka` with that node's config, so a recycled PID is never hit. SIGTERM to all
/// nodes at once, SIGKILL to any still alive after [`STOP_TIMEOUT`]. Succeeds without doing
/// anything when there is no state file.
pub fn stop_detached(state_dir: &Path) -> Result<(), BrokerError> {
    let state_path = state_dir.join(STATE_FILE);
    let Some(state) = read_state(&state_path)? else {
        return Ok(());
    };
    let alive: Vec<&StateNode> = state.nodes.iter().filter(|n| n.alive()).collect();
    for n in &alive {
        tracing::info!(node = n.id, pid = n.pid, "stopping detached Kafka node (SIGTERM)");
        let _ = process::signal(n.pid, process::Signal::SIGTERM);
    }
    let stopped = process::wait_until(STOP_TIMEOUT, || alive.iter().all(|n| !n.alive()));
    if !stopped {
        for n in alive.iter().filter(|n| n.alive()) {
            tracing::warn!(
                node = n.id,
                pid = n.pid,
                "detached Kafka node did not stop within {STOP_TIMEOUT:?}; sending SIGKILL"
            );
            let _ = process::signal(n.pid, process::Signal::SIGKILL);
        }
        process::wait_until(Duration::from_secs(10), || alive.iter().all(|n| !n.alive()));
    }
    if let Some(n) = alive.iter().find(|n| n.alive()) {
        return Err(BrokerError::io(
            format!("stopping detached Kafka node {} (pid {})", n.id, n.pid),
            std::io::Error::other("it is still running after SIGKILL"),
        ));
    }
    forget(&state, &state_path)
}

/// `Some(bootstrap servers)` while at least one process of the detached cluster recorded in
/// `<state_dir>/cluster.json` is alive (`kafka-eos broker status`), `None` when there is no
/// state file or all its processes are gone. Checks processes only; it does not probe
/// readiness, so a cluster that is still starting also counts.
pub fn status_detached(state_dir: &Path) -> Result<Option<String>, BrokerError> {
    let Some(state) = read_state(&state_dir.join(STATE_FILE))? else {
        return Ok(None);
    };
    Ok(state.nodes.iter().any(StateNode::alive).then_some(state.bootstrap))
}

fn read_state(path: &Path) -> Result<Option<State>, BrokerError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BrokerError::io(format!("reading {}", path.display()), e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| BrokerError::BadState { path: path.to_path_buf(), message: e.to_string() })
}

fn write_state(path: &Path, cluster: &LocalCluster, remove_data_dir: bool) -> Result<(), BrokerError> {
    let state = State {
        kafka_version: cluster.kafka_version().to_string(),
        bootstrap: cluster.bootstrap_servers(),
        data_dir: cluster.data_dir().to_path_buf(),
        remove_data_dir,
        nodes: cluster
            .node_states()
            .into_iter()
            .map(|(spec, pid)| StateNode {
                id: spec.id,
                pid: pid.unwrap_or(0),
                broker_port: spec.broker_port,
                controller_port: spec.controller_port,
                config: spec.properties_path(),
                log: spec.log_path(),
            })
            .collect(),
    };
    let json = serde_json::to_string_pretty(&state)
        .map_err(|e| BrokerError::BadState { path: path.to_path_buf(), message: e.to_string() })?;
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, json + "\n").map_err(|e| BrokerError::io(format!("writing {}", tmp.display()), e))?;
    fs::rename(&tmp, path).map_err(|e| BrokerError::io(format!("writing {}", path.display()), e))
}

/// Removes the state file and, if it is ours, the data dir of a cluster that is not running.
fn forget(state: &State, state_path: &Path) -> Result<(), BrokerError> {
    if state.remove_data_dir && state.data_dir.exists() {
        fs::remove_dir_all(&state.data_dir)
            .map_err(|e| BrokerError::io(format!("removing {}", state.data_dir.display()), e))?;
    }
    match fs::remove_file(state_path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(BrokerError::io(format!("removing {}", state_path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_state_means_not_running() {
        let dir = std::env::temp_dir().join(format!("kafka-eos-state-test-{}", std::process::id()));
        assert_eq!(status_detached(&dir).unwrap(), None);
        stop_detached(&dir).unwrap();
    }

    #[test]
    fn dead_pids_are_not_running_and_never_signalled() {
        let dir = std::env::temp_dir().join(format!("kafka-eos-state-test2-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // Our own pid is alive but is not a Kafka broker: it must be treated as gone.
        let state = State {
            kafka_version: crate::broker::KAFKA_VERSION.into(),
            bootstrap: "127.0.0.1:1".into(),
            data_dir: dir.join("data"),
            remove_data_dir: true,
            nodes: vec![StateNode {
                id: 1,
                pid: std::process::id(),
                broker_port: 1,
                controller_port: 2,
                config: dir.join("data/node-1/server.properties"),
                log: dir.join("data/node-1/kafka.log"),
            }],
        };
        fs::write(dir.join(STATE_FILE), serde_json::to_string(&state).unwrap()).unwrap();
        assert_eq!(status_detached(&dir).unwrap(), None);
        stop_detached(&dir).unwrap();
        assert!(!dir.join(STATE_FILE).exists());
        fs::write(dir.join(STATE_FILE), "not json").unwrap();
        assert!(matches!(status_detached(&dir), Err(BrokerError::BadState { .. })));
        fs::remove_dir_all(&dir).unwrap();
    }
}
