//! Process plumbing: the process-lifetime spawner thread (PDEATHSIG), signals by PID, `/proc`
//! checks and log tails.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

/// How a broker process is tied to this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpawnMode {
    /// Dies with this process: PR_SET_PDEATHSIG=SIGKILL, forked by the spawner thread.
    Attached,
    /// Outlives this process: own session (setsid), no death signal.
    Detached,
}

struct SpawnJob {
    cmd: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// The channel to the spawner thread, started on first use and never stopped.
///
/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits. Test threads are
/// short-lived, so forking from them would kill a broker held in a `static` as soon as the
/// test that started it returned. This thread only ends when the whole process does.
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("kafka-eos-broker-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop runs until the process exits.
                for mut job in rx {
                    let _ = job.reply.send(job.cmd.spawn());
                }
            })
            .expect("starting the kafka-eos broker spawner thread");
        Mutex::new(tx)
    })
}

/// PIDs of attached brokers and temporary cluster dirs of clusters that were not dropped yet,
/// for the exit hook.
static ATTACHED_PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static OWNED_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Registers the exit hook once. A cluster in a `static` is never dropped; when the process
/// exits normally (including the test harness's `exit(101)` after a failure) the hook kills
/// its brokers and removes its temporary directory. PDEATHSIG would kill the brokers anyway,
/// but the directory would stay until the next start cleaned it up.
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
                let Ok(pid @ 1..) = libc::pid_t::try_from(pid) else {
                    continue;
                };
                let mut status = 0;
                // 0 means: still our (running, unreaped) child, so the pid cannot have been
                // recycled by someone else and is safe to kill.
                // SAFETY: waitpid/kill on one positive pid.
                if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        libc::waitpid(pid, &mut status, 0);
                    }
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

/// Forgets an attached broker once it has been reaped.
pub(crate) fn untrack_child(pid: u32) {
    lock(&ATTACHED_PIDS).retain(|&p| p != pid);
}

/// Has the exit hook remove `dir` (a temporary cluster directory).
pub(crate) fn track_dir(dir: &Path) {
    register_exit_hook();
    lock(&OWNED_DIRS).push(dir.to_path_buf());
}

/// The directory was removed or is to be kept.
pub(crate) fn untrack_dir(dir: &Path) {
    lock(&OWNED_DIRS).retain(|d| d != dir);
}

/// Spawns `cmd` tied to this process as `mode` says.
pub(crate) fn spawn(mut cmd: Command, mode: SpawnMode) -> io::Result<Child> {
    match mode {
        SpawnMode::Attached => {
            // SAFETY: getpid is always safe.
            let parent = unsafe { libc::getpid() };
            // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
            // system calls (prctl, getppid) without allocating.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // The parent may have died between fork and prctl: then nobody would
                    // ever send the signal, so do not start at all.
                    if libc::getppid() != parent {
                        return Err(io::Error::from_raw_os_error(libc::ESRCH));
                    }
                    Ok(())
                });
            }
            let (reply, rx) = mpsc::channel();
            spawner()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send(SpawnJob { cmd, reply })
                .map_err(|_| io::Error::other("the broker spawner thread is gone"))?;
            register_exit_hook();
            let child = rx.recv().map_err(|_| io::Error::other("the broker spawner thread is gone"))??;
            lock(&ATTACHED_PIDS).push(child.id());
            Ok(child)
        }
        SpawnMode::Detached => {
            // SAFETY: setsid is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() == -1 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.spawn()
        }
    }
}

/// Sends `sig` to `pid`. `Ok(false)` if there is no such process.
pub(crate) fn signal(pid: u32, sig: libc::c_int) -> io::Result<bool> {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Ok(false);
    };
    if pid <= 0 {
        return Ok(false);
    }
    // SAFETY: plain kill(2) on a positive pid (never a process group).
    if unsafe { libc::kill(pid, sig) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// Whether a process with this pid exists (possibly someone else's, possibly a zombie).
pub(crate) fn pid_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks for existence.
    pid > 0 && (unsafe { libc::kill(pid, 0) } == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Whether `pid` is alive and is the broker started with `properties` (its command line names
/// `kafka.Kafka` and that file). Zombies have an empty command line, so they count as dead.
pub(crate) fn is_our_broker(pid: u32, properties: &Path) -> bool {
    let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<String> = raw.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let props = properties.display().to_string();
    args.iter().any(|a| a == "kafka.Kafka") && args.contains(&props)
}

/// Reaps `pid` if it is an exited child of ours (no-op otherwise).
pub(crate) fn reap_if_child(pid: u32) {
    if let Ok(pid @ 1..) = libc::pid_t::try_from(pid) {
        let mut status = 0;
        // SAFETY: non-blocking waitpid on one pid; ECHILD if it is not our child.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Polls `done` every 50-200 ms until it returns true or `timeout` passes.
pub(crate) fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
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

/// First words of the line the harness writes into a node's log before each launch.
pub(crate) const LAUNCH_MARKER: &str = "===== kafka-eos: launching node";

/// The part of a node's log written since its latest launch (at most the last 512 KiB).
pub(crate) fn current_log(path: &Path) -> io::Result<String> {
    const MAX: u64 = 512 * 1024;
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
    let mut buf = Vec::new();
    f.take(MAX).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    Ok(match text.rfind(LAUNCH_MARKER) {
        Some(i) => text[i..].to_string(),
        None => text,
    })
}

/// What an error quotes from a node's log: the first ERROR lines of the latest launch (each
/// with the line after it, usually the exception) and the last `n` lines.
///
/// The tail alone is not enough: a broker that fails at startup logs the cause and then a
/// few hundred lines of orderly shutdown.
pub(crate) fn log_excerpt(path: &Path, n: usize) -> String {
    let text = match current_log(path) {
        Ok(text) if text.trim().is_empty() => return "(log is empty)".to_string(),
        Ok(text) => text,
        Err(e) => return format!("(cannot read log: {e})"),
    };
    excerpt(&text, n)
}

fn excerpt(text: &str, n: usize) -> String {
    const MAX_ERRORS: usize = 5;
    let lines: Vec<&str> = text.lines().collect();
    let tail_start = lines.len().saturating_sub(n);
    let mut errors = Vec::new();
    for (i, line) in lines[..tail_start].iter().enumerate() {
        if errors.len() >= MAX_ERRORS {
            break;
        }
        if line.contains("] ERROR ") || line.contains("] FATAL ") {
            errors.push(*line);
            if let Some(next) = lines.get(i + 1).filter(|_| i + 1 < tail_start) {
                if !next.starts_with('[') {
                    errors.push(*next);
                }
            }
        }
    }
    let tail = lines[tail_start..].join("\n");
    if errors.is_empty() {
        tail
    } else {
        format!("first errors:\n{}\n... last {} lines:\n{tail}", errors.join("\n"), lines.len() - tail_start)
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
        assert!(signal(child.id(), libc::SIGKILL).unwrap());
        child.wait().unwrap();
        assert!(!pid_exists(child.id()), "child was not reaped");
    }

    #[test]
    fn tail_of_missing_file() {
        assert!(log_excerpt(Path::new("/nonexistent/kafka.log"), 5).starts_with("(cannot read log"));
    }

    #[test]
    fn excerpt_shows_the_cause_and_the_tail() {
        let mut log = String::from("old launch\n[t] ERROR old failure\n");
        log.push_str(LAUNCH_MARKER);
        log.push_str(" 1 =====\n[t] INFO starting\n[t] ERROR Unable to start acceptor\n");
        log.push_str("org.apache.kafka.common.KafkaException: Address already in use.\n");
        for i in 0..50 {
            log.push_str(&format!("[t] INFO shutdown step {i}\n"));
        }
        let current = &log[log.rfind(LAUNCH_MARKER).unwrap()..];
        let text = excerpt(current, 3);
        assert!(!text.contains("old failure"));
        assert!(text.starts_with("first errors:\n[t] ERROR Unable to start acceptor\norg.apache"));
        assert!(text.ends_with(
            "... last 3 lines:\n[t] INFO shutdown step 47\n[t] INFO shutdown step 48\n[t] INFO shutdown step 49"
        ));
        assert_eq!(excerpt("a\nb", 5), "a\nb");
    }

    #[test]
    fn our_broker_check_rejects_other_processes() {
        assert!(!is_our_broker(std::process::id(), Path::new("/x/server.properties")));
        assert!(!is_our_broker(u32::MAX, Path::new("/x/server.properties")));
    }
}
