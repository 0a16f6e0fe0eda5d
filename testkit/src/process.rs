//! Process control for the harnesses and the tools: children that die with this process,
//! or outlive it in their own session; signals by pid; waiting with a timeout.
//!
//! **Why a spawner thread.** `PR_SET_PDEATHSIG` fires when the *thread* that forked the
//! child exits, not the process. Test threads are short-lived, so forking from them would
//! kill a broker (or a database) held in a `static` as soon as the test that started it
//! returned. Attached children are therefore forked by one thread that lives as long as
//! the process. An exit hook also kills attached children and removes registered
//! temporary directories when the process exits normally (a test binary's `exit(101)`
//! after a failure included); `PR_SET_PDEATHSIG` covers the abnormal exits.
//!
//! System calls go through the `nix` crate; only `atexit` (which `nix` does not wrap) is
//! called through `libc`.

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
pub use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// How a child process is tied to this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnMode {
    /// Dies with this process: PR_SET_PDEATHSIG=SIGKILL, forked by the spawner thread.
    Attached,
    /// Outlives this process: own session (setsid), no death signal.
    Detached,
}

struct SpawnJob {
    cmd: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// The channel to the spawner thread (see the module docs), started on first use and
/// never stopped.
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("kafka-eos-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop runs until the process exits.
                for mut job in rx {
                    let _ = job.reply.send(job.cmd.spawn());
                }
            })
            .expect("starting the kafka-eos spawner thread");
        Mutex::new(tx)
    })
}

/// PIDs of attached children and registered temporary directories, for the exit hook.
static ATTACHED_PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static OWNED_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Registers the exit hook once. A server in a `static` is never dropped; when the process
/// exits normally the hook kills it and removes its temporary directory. PDEATHSIG would
/// kill it anyway, but the directory would stay until the next start cleaned it up.
fn register_exit_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function that never unwinds.
        unsafe { libc::atexit(cleanup_at_exit) };
    });
}

extern "C" fn cleanup_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // try_lock: never block process exit on a lock held by a thread that is going away.
        if let Ok(pids) = ATTACHED_PIDS.try_lock() {
            for &pid in pids.iter() {
                let Some(pid) = positive(pid) else { continue };
                // StillAlive means: still our (running, unreaped) child, so the pid cannot
                // have been recycled by someone else and is safe to kill.
                if let Ok(WaitStatus::StillAlive) = waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                    let _ = kill(pid, Signal::SIGKILL);
                    let _ = waitpid(pid, None);
                }
            }
        }
        if let Ok(dirs) = OWNED_DIRS.try_lock() {
            for dir in dirs.iter() {
                let _ = fs::remove_dir_all(dir);
            }
        }
    });
}

fn lock<T>(m: &'static Mutex<Vec<T>>) -> std::sync::MutexGuard<'static, Vec<T>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forgets an attached child once it has been reaped.
pub fn untrack_child(pid: u32) {
    lock(&ATTACHED_PIDS).retain(|&p| p != pid);
}

/// Has the exit hook remove `dir` (a temporary directory of a server).
pub fn track_dir(dir: &Path) {
    register_exit_hook();
    lock(&OWNED_DIRS).push(dir.to_path_buf());
}

/// The directory was removed or is to be kept.
pub fn untrack_dir(dir: &Path) {
    lock(&OWNED_DIRS).retain(|d| d != dir);
}

/// Spawns `cmd` tied to this process as `mode` says.
pub fn spawn(mut cmd: Command, mode: SpawnMode) -> io::Result<Child> {
    match mode {
        SpawnMode::Attached => {
            let parent = nix::unistd::getpid();
            // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
            // system calls (prctl, getppid) without allocating.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                    // The parent may have died between fork and prctl: then nobody would
                    // ever send the signal, so do not start at all.
                    if nix::unistd::getppid() != parent {
                        return Err(Errno::ESRCH.into());
                    }
                    Ok(())
                });
            }
            let (reply, rx) = mpsc::channel();
            spawner()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send(SpawnJob { cmd, reply })
                .map_err(|_| io::Error::other("the spawner thread is gone"))?;
            register_exit_hook();
            let child = rx.recv().map_err(|_| io::Error::other("the spawner thread is gone"))??;
            lock(&ATTACHED_PIDS).push(child.id());
            Ok(child)
        }
        SpawnMode::Detached => {
            // SAFETY: setsid is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    nix::unistd::setsid()?;
                    Ok(())
                });
            }
            cmd.spawn()
        }
    }
}

/// A pid as `nix` takes it: positive only, never a process group or "every process".
fn positive(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().filter(|&p| p > 0).map(Pid::from_raw)
}

/// Sends `sig` to `pid`. `Ok(false)` if there is no such process.
pub fn signal(pid: u32, sig: Signal) -> io::Result<bool> {
    let Some(pid) = positive(pid) else { return Ok(false) };
    match kill(pid, sig) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether a process with this pid exists (possibly someone else's, possibly a zombie).
pub fn pid_exists(pid: u32) -> bool {
    positive(pid).is_some_and(|p| matches!(kill(p, None), Ok(()) | Err(Errno::EPERM)))
}

/// Reaps `pid` if it is an exited child of ours (no-op otherwise).
pub fn reap_if_child(pid: u32) {
    if let Some(pid) = positive(pid) {
        // ECHILD if it is not our child.
        let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
    }
}

/// Polls `done` every 50-200 ms until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(50);
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attached_child_survives_spawning_thread_and_is_reaped() {
        // Spawned from a short-lived thread: must not get its death signal when that thread
        // ends, because the fork happens on the spawner thread.
        let child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            spawn(cmd, SpawnMode::Attached).unwrap()
        })
        .join()
        .unwrap();
        let mut child = child;
        std::thread::sleep(Duration::from_millis(200));
        assert!(child.try_wait().unwrap().is_none(), "child died with its spawning thread");
        assert!(signal(child.id(), Signal::SIGKILL).unwrap());
        child.wait().unwrap();
        assert!(!pid_exists(child.id()), "child was not reaped");
        assert!(!signal(child.id(), Signal::SIGKILL).unwrap(), "no such process any more");
        assert!(!signal(0, Signal::SIGKILL).unwrap(), "never a process group");
    }
}
