//! A real, local Redis server for tests, examples and benchmarks.
//!
//! [`Redis::start`] starts `redis-server` (an installed Redis 7, else the one [`crate::fetch`]
//! brings from Maven Central) in a fresh `kafka-eos-redis-<pid>-<n>` temporary directory on a
//! free loopback port, with persistence as [`RedisConfig::persistence`] says, and returns
//! once the server answers a
//! real command (a `GET`, which a server still loading its append-only file refuses with
//! `-LOADING`). The package's own service (port 6379, `/var/lib/redis`) is never used.
//!
//! Redis runs fine as root, so it runs as the current user; like every harness server it
//! dies with the process that started it (see [`crate::server`]).
//!
//! For chaos tests, [`Redis::kill`] SIGKILLs it and [`Redis::restart`] starts it again on
//! the same port and directory: with [`Persistence::AofAlways`] (the default) every write
//! that was acknowledged survives the crash, which is what an effectively-once sink needs.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use crate::server::ServerError;
use crate::server::{self, ServerProcess};

/// What survives a Redis crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing: a restart starts empty (`appendonly no`, `save ""`). Fastest.
    None,
    /// Append-only file, fsynced once a second: a crash of the server process loses nothing
    /// (the kernel has the writes), a machine crash up to a second.
    AofEverySec,
    /// Append-only file fsynced before every reply: nothing acknowledged is ever lost.
    AofAlways,
}

/// How to start a [`Redis`].
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// The `redis-server` executable. Default: `$KAFKA_EOS_REDIS_SERVER`, else
    /// `/usr/bin/redis-server`, else the first on `PATH`, else the one [`crate::fetch`]
    /// brings.
    pub binary: Option<PathBuf>,
    /// Default [`Persistence::AofAlways`].
    pub persistence: Persistence,
    /// How long to wait for the server to answer, each start (default 30 s).
    pub startup_timeout: Duration,
    /// Extra `--name value` settings.
    pub settings: Vec<(String, String)>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            binary: None,
            persistence: Persistence::AofAlways,
            startup_timeout: Duration::from_secs(30),
            settings: Vec::new(),
        }
    }
}

/// A running local Redis server (see the module docs).
#[derive(Debug)]
pub struct Redis {
    cfg: RedisConfig,
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    server: Option<ServerProcess>,
}

impl Redis {
    /// Starts a server in a fresh temporary directory on a free port.
    pub fn start(cfg: RedisConfig) -> Result<Redis, ServerError> {
        let binary = binary(&cfg)?;
        let dir = server::fresh_temp_dir("redis", None)?;
        let mut r = Redis { cfg, binary, dir, port: 0, server: None };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = server::free_port()?;
            match r.launch(port) {
                Err(ServerError::Exited { tail, .. }) if attempt < 4 && tail.contains("Address already in use") => {
                    tracing::info!(port, "Redis port was taken meanwhile; retrying on another");
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(r),
            }
        }
    }

    /// The loopback port (kept across [`Redis::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`, for the `redis` crate.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The temporary directory (append-only files, `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The server's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.pid())
    }

    /// Whether the server process is running.
    pub fn is_running(&mut self) -> bool {
        let running = self.server.as_mut().is_some_and(|s| s.exited().is_none());
        if !running {
            self.server = None;
        }
        running
    }

    /// Sends one command and returns the first line of the reply as RESP shows it
    /// (`+OK`, `:42`, `$3` for a bulk string — whose body is the next line and not
    /// returned — `-ERR ...`). Independent of any Rust client, for probes and quick checks.
    pub fn command(&self, args: &[&str]) -> Result<String, ServerError> {
        let context = || format!("sending {:?} to Redis on port {}", args.first().unwrap_or(&""), self.port);
        let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(2))
            .map_err(|e| ServerError::io(context(), e))?;
        s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| ServerError::io(context(), e))?;
        s.write_all(&encode(args)).map_err(|e| ServerError::io(context(), e))?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).map_err(|e| ServerError::io(context(), e))?;
        Ok(line.trim_end().to_string())
    }

    /// The sum of the integer fields of hash `key` (0 if it does not exist), computed by the
    /// server: what a counter pipeline's check compares with its input.
    pub fn hash_sum(&self, key: &str) -> Result<i64, ServerError> {
        const SUM: &str =
            "local s = 0 for _, v in ipairs(redis.call('HVALS', KEYS[1])) do s = s + tonumber(v) end return s";
        let reply = self.command(&["EVAL", SUM, "1", key])?;
        reply.strip_prefix(':').and_then(|n| n.parse().ok()).ok_or_else(|| {
            ServerError::io(format!("summing {key}"), std::io::Error::other(format!("unexpected reply {reply:?}")))
        })
    }

    /// SIGKILLs the server, like a crash.
    pub fn kill(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill();
        }
    }

    /// Stops the server gracefully (SIGTERM: it writes its files and exits), or SIGKILLs it
    /// after 10 s.
    pub fn stop(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.stop(crate::process::Signal::SIGTERM, Duration::from_secs(10));
        }
    }

    /// Starts the server again on the same port and directory (a running one is killed
    /// first) and waits until it has loaded its data and answers.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        self.launch(self.port)
    }

    fn launch(&mut self, port: u16) -> Result<(), ServerError> {
        let mut cmd = Command::new(&self.binary);
        cmd.current_dir(&self.dir);
        let (aof, fsync) = match self.cfg.persistence {
            Persistence::None => ("no", "no"),
            Persistence::AofEverySec => ("yes", "everysec"),
            Persistence::AofAlways => ("yes", "always"),
        };
        let mut settings: Vec<(String, String)> = vec![
            ("port".into(), port.to_string()),
            ("bind".into(), "127.0.0.1".into()),
            ("dir".into(), self.dir.display().to_string()),
            ("daemonize".into(), "no".into()),
            ("save".into(), String::new()),
            ("appendonly".into(), aof.into()),
            ("appendfsync".into(), fsync.into()),
            ("protected-mode".into(), "no".into()),
            ("logfile".into(), String::new()),
        ];
        settings.extend(self.cfg.settings.iter().cloned());
        for (k, v) in &settings {
            cmd.arg(format!("--{k}")).arg(v);
        }
        let log = self.log_path();
        let mut proc_ = ServerProcess::spawn(cmd, &log)?;
        self.port = port;
        let ready = server::wait_ready("Redis", &mut proc_, &log, self.cfg.startup_timeout, || {
            match self.command(&["GET", "kafka-eos:harness:ready"]) {
                Ok(reply) if reply.starts_with('$') => Ok(()),
                Ok(reply) => Err(reply),
                Err(e) => Err(e.to_string()),
            }
        });
        match ready {
            Ok(()) => {
                self.server = Some(proc_);
                Ok(())
            }
            Err(e) => {
                proc_.kill();
                Err(e)
            }
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        // Its data dies with the directory: no point in a graceful shutdown.
        self.kill();
        server::remove_dir(&self.dir);
    }
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn binary(cfg: &RedisConfig) -> Result<PathBuf, ServerError> {
    let path = match (&cfg.binary, std::env::var_os("KAFKA_EOS_REDIS_SERVER").filter(|v| !v.is_empty())) {
        (Some(b), _) => b.clone(),
        (None, Some(b)) => PathBuf::from(b),
        (None, None) => {
            let default = PathBuf::from("/usr/bin/redis-server");
            let on_path = || {
                std::env::var_os("PATH")
                    .and_then(|p| std::env::split_paths(&p).map(|d| d.join("redis-server")).find(|p| p.is_file()))
            };
            match default.is_file().then_some(default).or_else(on_path) {
                Some(found) => found,
                None => return crate::fetch::redis_server(),
            }
        }
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(ServerError::BinaryMissing {
            what: "Redis 7".into(),
            path,
            hint: "set KAFKA_EOS_REDIS_SERVER to a redis-server 7, or unset it to use an installed one \
                   or the one the test kit fetches from Maven Central"
                .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_encoding() {
        assert_eq!(encode(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }

    /// Acknowledged writes survive a SIGKILL with the default persistence; restart keeps the
    /// port; drop removes the directory.
    #[test]
    fn start_write_kill_restart_drop() {
        let mut r = Redis::start(RedisConfig::default()).unwrap_or_else(|e| panic!("cannot start Redis: {e}"));
        let (port, dir) = (r.port(), r.dir().to_path_buf());
        assert_eq!(r.command(&["HINCRBY", "h", "f", "5"]).unwrap(), ":5");
        r.kill();
        assert!(!r.is_running());
        assert!(r.command(&["PING"]).is_err(), "killed server still answers");
        r.restart().unwrap();
        assert_eq!(r.port(), port);
        assert_eq!(r.command(&["HINCRBY", "h", "f", "1"]).unwrap(), ":6", "the write before the crash was lost");
        drop(r);
        assert!(!dir.exists(), "directory left behind");
    }

    #[test]
    fn without_persistence_a_restart_starts_empty() {
        let cfg = RedisConfig { persistence: Persistence::None, ..RedisConfig::default() };
        let mut r = Redis::start(cfg).unwrap_or_else(|e| panic!("cannot start Redis: {e}"));
        assert_eq!(r.command(&["INCR", "n"]).unwrap(), ":1");
        r.restart().unwrap();
        assert_eq!(r.command(&["INCR", "n"]).unwrap(), ":1");
    }
}
