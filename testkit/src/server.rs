//! What the PostgreSQL and Redis harnesses share: errors, temporary directories, free ports,
//! the user a server runs as, and a server process that dies with this process.
//!
//! # Lifecycle
//!
//! Servers are forked by the same process-lifetime spawner thread as the Kafka brokers
//! ([`crate::process`]): each server gets `PR_SET_PDEATHSIG = SIGKILL`, so it dies exactly when
//! the process that started it does, and an `atexit` hook kills servers held in statics and
//! removes their directories on a normal exit.
//!
//! Each server is started in a process group of its own (`setpgid(0, 0)`): PostgreSQL forks a
//! backend per connection and background workers, and `ServerProcess::kill` SIGKILLs the
//! whole group, which is what a crash of the machine's server looks like to its clients.
//! Signals only ever go to the PID (or group) saved at spawn time, before that child is
//! reaped, so a recycled PID is never signalled.
//!
//! # Running as root
//!
//! `initdb` and `postgres` refuse to run with effective uid 0. When this process is root, the
//! harness runs them as the `postgres` system user (created by Debian's `postgresql`
//! package; `nobody` where there is none) by giving the spawned [`Command`] that uid and
//! gid: the standard library calls `setgroups`/`setgid`/`setuid` in the child *before* the
//! `pre_exec` hook that sets the death signal. That order matters: Linux clears the
//! parent-death signal when a process's credentials change, so a wrapper such as `runuser`
//! or `setpriv` would drop it (and `runuser` also forks, leaving the server a grandchild
//! that no death signal reaches).
//! The server's temporary directory is handed to that user with `chown`. Not root: the
//! servers run as the current user.

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use crate::process::{self, SpawnMode};

/// Everything that can go wrong while starting, probing or stopping a PostgreSQL or Redis
/// server. Every message says what to do about it; failures of a running server carry the
/// tail of its log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A server executable is not installed.
    #[error("{what} is required (no executable at `{}`). {hint}", path.display())]
    BinaryMissing {
        /// The program, e.g. "PostgreSQL 15".
        what: String,
        /// Where it was looked for.
        path: PathBuf,
        /// How to install it.
        hint: String,
    },
    /// This process is root and the unprivileged user to run the server as does not exist.
    #[error(
        "{server} refuses to run as root and there is no `{user}` user to run it as: \
         create an unprivileged user of that name or run as a non-root user"
    )]
    NoUser {
        /// The server.
        server: String,
        /// The user that was looked up.
        user: String,
    },
    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, including the path involved.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A setup tool (`initdb`, `psql`) failed.
    #[error("`{command}` failed ({status}). Output:\n{output}")]
    ToolFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stdout and stderr.
        output: String,
    },
    /// The server process exited while it was starting or expected to run.
    #[error("{server} exited ({status}); its log is {}. Last lines:\n{tail}", log.display())]
    Exited {
        /// The server.
        server: String,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The log's last lines.
        tail: String,
    },
    /// The server did not answer a real query in time.
    #[error(
        "{server} did not answer within {timeout:?} (last probe: {last}); its log is {}. Last lines:\n{tail}",
        log.display()
    )]
    NotReady {
        /// The server.
        server: String,
        /// How long the harness waited.
        timeout: Duration,
        /// The last probe's error.
        last: String,
        /// Its log file.
        log: PathBuf,
        /// The log's last lines.
        tail: String,
    },
}

impl ServerError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ServerError::Io { context: context.into(), source }
    }
}

/// The uid and gid a server runs as when this process is root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// `None` when this process is not root (servers run as the current user); the uid and gid
/// of `user` when it is.
pub(crate) fn run_as(server: &str, user: &str) -> Result<Option<RunAs>, ServerError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let no_user = || ServerError::NoUser { server: server.into(), user: user.into() };
    let pw = nix::unistd::User::from_name(user).ok().flatten().ok_or_else(no_user)?;
    Ok(Some(RunAs { uid: pw.uid.as_raw(), gid: pw.gid.as_raw() }))
}

/// Applies `run_as` to a command (no-op when `None`).
pub(crate) fn apply_run_as(cmd: &mut Command, run_as: Option<RunAs>) {
    if let Some(r) = run_as {
        cmd.uid(r.uid).gid(r.gid);
    }
}

/// A new, empty `kafka-eos-<kind>-<pid>-<n>` directory under the system temp dir, owned by
/// `owner` when given, removed by the exit hook unless untracked.
pub(crate) fn fresh_temp_dir(kind: &str, owner: Option<RunAs>) -> Result<PathBuf, ServerError> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    remove_stale_temp_dirs(kind);
    let base = std::env::temp_dir();
    let dir = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("kafka-eos-{kind}-{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(ServerError::io(format!("creating {}", dir.display()), e)),
        }
    };
    process::track_dir(&dir);
    if let Some(r) = owner {
        std::os::unix::fs::chown(&dir, Some(r.uid), Some(r.gid))
            .map_err(|e| ServerError::io(format!("handing {} to uid {}", dir.display(), r.uid), e))?;
    }
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| ServerError::io(format!("chmod 700 {}", dir.display()), e))?;
    Ok(dir)
}

/// Removes the directory (the exit hook no longer needs to).
pub(crate) fn remove_dir(dir: &Path) {
    let _ = fs::remove_dir_all(dir);
    process::untrack_dir(dir);
}

/// Removes `kafka-eos-<kind>-<pid>-<n>` dirs left by processes that no longer exist (runs
/// that were SIGKILLed before their exit hook could clean up). Once per kind and process.
fn remove_stale_temp_dirs(kind: &str) {
    static PG: Once = Once::new();
    static REDIS: Once = Once::new();
    static OTHER: Once = Once::new();
    let once = match kind {
        "pg" => &PG,
        "redis" => &REDIS,
        _ => &OTHER,
    };
    once.call_once(|| {
        let Ok(entries) = fs::read_dir(std::env::temp_dir()) else { return };
        let me = std::process::id();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = stale_dir_pid(&name, kind) else { continue };
            if pid != me && !process::pid_exists(pid) {
                tracing::info!(dir = %entry.path().display(), "removing a leftover {kind} server directory");
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    });
}

fn stale_dir_pid(name: &str, kind: &str) -> Option<u32> {
    let rest = name.strip_prefix("kafka-eos-")?.strip_prefix(kind)?.strip_prefix('-')?;
    let (pid, n) = rest.split_once('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// A free loopback port. Another process can take it before the server binds it: the
/// harnesses retry with a fresh port when the server reports the address in use.
pub(crate) fn free_port() -> Result<u16, ServerError> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|e| ServerError::io("binding 127.0.0.1:0", e))?;
    l.local_addr().map(|a| a.port()).map_err(|e| ServerError::io("reading a bound port", e))
}

/// A running server process: attached to this process (death signal), leader of its own
/// process group, stdout and stderr appended to a log file.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    reaped: bool,
}

impl ServerProcess {
    /// Spawns `cmd` with its output appended to `log`.
    pub(crate) fn spawn(mut cmd: Command, log: &Path) -> Result<Self, ServerError> {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| ServerError::io(format!("opening {}", log.display()), e))?;
        let err = out.try_clone().map_err(|e| ServerError::io(format!("opening {}", log.display()), e))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child =
            process::spawn(cmd, SpawnMode::Attached).map_err(|e| ServerError::io(format!("starting {program}"), e))?;
        Ok(ServerProcess { child, reaped: false })
    }

    /// The server's PID (also its process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the server has exited (and is reaped).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.reaped();
                Some(status)
            }
            _ => None,
        }
    }

    fn reaped(&mut self) {
        if !self.reaped {
            self.reaped = true;
            process::untrack_child(self.child.id());
        }
    }

    /// SIGKILLs the whole process group (a crash), reaps the leader and waits up to 10 s
    /// until no live process is left in the group.
    pub(crate) fn kill(&mut self) {
        let pgid = self.child.id();
        if !self.reaped {
            // Before the leader is reaped its pid (and so the group id) cannot be reused.
            if let Ok(pgid @ 1..) = i32::try_from(pgid) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), process::Signal::SIGKILL);
            }
            let _ = self.child.wait();
            self.reaped();
        }
        // Backends were SIGKILLed with the leader; they are gone once the kernel has torn
        // them down (zombies count as gone: they hold no shared memory and no sockets).
        process::wait_until(Duration::from_secs(10), || live_group_members(pgid) == 0);
    }

    /// Sends `sig` to the leader and waits up to `timeout` for the group to exit; SIGKILLs it
    /// after that. Returns whether it stopped by itself.
    pub(crate) fn stop(&mut self, sig: process::Signal, timeout: Duration) -> bool {
        if self.reaped {
            return true;
        }
        let _ = process::signal(self.child.id(), sig);
        let stopped = process::wait_until(timeout, || matches!(self.child.try_wait(), Ok(Some(_))));
        if stopped {
            self.reaped();
            process::wait_until(Duration::from_secs(10), || live_group_members(self.child.id()) == 0);
        } else {
            self.kill();
        }
        stopped
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill();
        }
    }
}

/// Processes in group `pgid` that are not zombies, from `/proc/<pid>/stat`.
pub(crate) fn live_group_members(pgid: u32) -> usize {
    let Ok(entries) = fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
            let mut f = after.split_whitespace();
            let state = f.next();
            let _ppid = f.next();
            let pgrp = f.next().and_then(|p| p.parse::<u32>().ok());
            state != Some("Z") && state != Some("X") && pgrp == Some(pgid)
        })
        .count()
}

/// The last `n` lines of a log file.
pub(crate) fn log_tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(n)..].join("\n");
            if tail.trim().is_empty() {
                "(log is empty)".into()
            } else {
                tail
            }
        }
        Err(e) => format!("(cannot read log: {e})"),
    }
}

/// Polls `probe` until it succeeds, the server exits or `timeout` passes.
pub(crate) fn wait_ready(
    server: &str,
    proc_: &mut ServerProcess,
    log: &Path,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<(), String>,
) -> Result<(), ServerError> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(status) = proc_.exited() {
            return Err(ServerError::Exited {
                server: server.into(),
                status: status.to_string(),
                log: log.to_path_buf(),
                tail: log_tail(log, 30),
            });
        }
        let last = match probe() {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(ServerError::NotReady {
                server: server.into(),
                timeout,
                last,
                log: log.to_path_buf(),
                tail: log_tail(log, 30),
            });
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Runs a short-lived tool to completion, failing with its output.
pub(crate) fn run_tool(cmd: &mut Command) -> Result<String, ServerError> {
    let command = format!(
        "{} {}",
        cmd.get_program().to_string_lossy(),
        cmd.get_args().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
    );
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| ServerError::io(format!("running {command}"), e))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ServerError::ToolFailed { command, status: out.status.to_string(), output: text })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_dir_names() {
        assert_eq!(stale_dir_pid("kafka-eos-pg-123-0", "pg"), Some(123));
        assert_eq!(stale_dir_pid("kafka-eos-redis-9-12", "redis"), Some(9));
        assert_eq!(stale_dir_pid("kafka-eos-123-0", "pg"), None);
        assert_eq!(stale_dir_pid("kafka-eos-pg-123-x", "pg"), None);
        assert_eq!(stale_dir_pid("kafka-eos-redis-1-2", "pg"), None);
    }

    #[test]
    fn killing_a_group_kills_its_children() {
        let dir = fresh_temp_dir("test", None).unwrap();
        let mut cmd = Command::new("sh");
        // A leader with a child in the background, like a server and its workers.
        cmd.args(["-c", "sleep 60 & sleep 60"]);
        let mut p = ServerProcess::spawn(cmd, &dir.join("log")).unwrap();
        assert!(process::wait_until(Duration::from_secs(5), || live_group_members(p.pid()) >= 2));
        p.kill();
        assert_eq!(live_group_members(p.pid()), 0);
        remove_dir(&dir);
    }
}
