//! The cluster's data directory: a fresh temporary one, or the caller's; and the removal of
//! temporary directories left behind by processes that are gone.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use super::process;
use super::BrokerError;

/// A new, empty `kafka-eos-<pid>-<n>` directory under the system temp dir.
pub(crate) fn fresh_temp_dir() -> Result<PathBuf, BrokerError> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::temp_dir();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("kafka-eos-{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(BrokerError::io(format!("creating {}", dir.display()), e)),
        }
    }
}

/// Creates a caller-chosen data dir and wipes the node directories of an earlier cluster.
pub(crate) fn prepare_given_dir(dir: &Path) -> Result<PathBuf, BrokerError> {
    fs::create_dir_all(dir).map_err(|e| BrokerError::io(format!("creating {}", dir.display()), e))?;
    let dir = dir.canonicalize().map_err(|e| BrokerError::io(format!("resolving {}", dir.display()), e))?;
    let entries = fs::read_dir(&dir).map_err(|e| BrokerError::io(format!("listing {}", dir.display()), e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_node_dir =
            name.strip_prefix("node-").is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
        if is_node_dir {
            fs::remove_dir_all(entry.path())
                .map_err(|e| BrokerError::io(format!("removing the old {}", entry.path().display()), e))?;
        }
    }
    Ok(dir)
}

/// Removes `kafka-eos-<pid>-<n>` temp dirs left by processes that no longer exist (runs that
/// crashed or were killed before they could clean up). Once per process; errors are ignored.
pub(crate) fn remove_stale_temp_dirs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        let me = std::process::id();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = stale_dir_pid(&name) else { continue };
            if pid != me && !process::pid_exists(pid) {
                tracing::info!(dir = %entry.path().display(), "removing a leftover Kafka cluster directory");
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    });
}

/// The pid in a `kafka-eos-<pid>-<n>` directory name.
pub(crate) fn stale_dir_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("kafka-eos-")?;
    let (pid, n) = rest.split_once('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}
