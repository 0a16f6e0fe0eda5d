//! A real, local PostgreSQL server for tests, examples and benchmarks.
//!
//! [`Postgres::start`] runs `initdb` into a fresh `kafka-eos-pg-<pid>-<n>` temporary
//! directory, starts `postgres` on a free loopback port (TCP only: no Unix socket, so
//! Debian's `/var/run/postgresql` is never touched and the package's own cluster, if its
//! service runs, is never used) and returns once the server answers a real query
//! (`SELECT 1`). Authentication is `trust` for user `postgres` on 127.0.0.1 only.
//!
//! The binaries come from [`PostgresConfig::bin_dir`], else `$KAFKA_EOS_PG_BIN`, else the
//! newest `/usr/lib/postgresql/<version>/bin` (Debian's layout), else PostgreSQL
//! [`POSTGRES_VERSION`](crate::fetch::POSTGRES_VERSION) fetched once from Maven Central
//! ([`crate::fetch`]).
//!
//! As root, `initdb` and `postgres` run as the `postgres` system user (or `nobody` where
//! there is none), and the server dies
//! with the process that started it even if that process is SIGKILLed: see
//! [`crate::server`]'s module notes (uid switch before the death signal is set).
//!
//! For chaos tests, [`Postgres::kill`] SIGKILLs the postmaster and every backend at once (a
//! crash: the next start runs crash recovery) and [`Postgres::restart`] brings the same
//! data directory back on the same port. Dropping the handle stops the server (fast
//! shutdown, SIGKILL after 10 s) and removes the directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use crate::server::ServerError;
use crate::server::{self, RunAs, ServerProcess};

/// How to start a [`Postgres`].
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// Directory holding `initdb` and `postgres`. Default: `$KAFKA_EOS_PG_BIN`, else the
    /// newest `/usr/lib/postgresql/*/bin`, else the binaries [`crate::fetch`] brings.
    pub bin_dir: Option<PathBuf>,
    /// `fsync` and `full_page_writes` on (default `false`). A killed server loses no
    /// acknowledged commit either way: `synchronous_commit` stays on, so a commit's WAL is
    /// handed to the kernel before the client hears of it, and only a machine crash needs
    /// fsync. (With `synchronous_commit = off` a SIGKILL loses the last commits, still
    /// sitting in the WAL buffers; the harness never sets that.) Turn it on to measure
    /// what a production server pays per commit.
    pub durable: bool,
    /// How long to wait for the server to answer, each start (default 60 s).
    pub startup_timeout: Duration,
    /// Extra `-c name=value` server settings.
    pub settings: Vec<(String, String)>,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig { bin_dir: None, durable: false, startup_timeout: Duration::from_secs(60), settings: Vec::new() }
    }
}

/// A running local PostgreSQL server (see the module docs).
#[derive(Debug)]
pub struct Postgres {
    cfg: PostgresConfig,
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    run_as: Option<RunAs>,
    server: Option<ServerProcess>,
}

/// The superuser the harness creates (`initdb -U`).
pub const USER: &str = "postgres";

impl Postgres {
    /// Initialises a cluster in a fresh temporary directory and starts it on a free port.
    pub fn start(cfg: PostgresConfig) -> Result<Postgres, ServerError> {
        let bin = bin_dir(&cfg)?;
        let run_as = server::run_as("PostgreSQL", "postgres").or_else(|_| server::run_as("PostgreSQL", "nobody"))?;
        let dir = server::fresh_temp_dir("pg", run_as)?;
        let mut pg = Postgres { cfg, bin, dir, port: 0, run_as, server: None };
        // On failure `pg` drops here and removes the directory.
        pg.initdb()?;
        pg.launch_on_free_port()?;
        Ok(pg)
    }

    /// The loopback port the server listens on (kept across [`Postgres::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq key/value connection string for database `dbname`, e.g. for
    /// `tokio_postgres::connect`.
    pub fn connection_string(&self, dbname: &str) -> String {
        format!("host=127.0.0.1 port={} user={USER} dbname={dbname} connect_timeout=10", self.port)
    }

    /// The URL form: `postgresql://postgres@127.0.0.1:<port>/<dbname>`.
    pub fn url(&self, dbname: &str) -> String {
        format!("postgresql://{USER}@127.0.0.1:{}/{dbname}", self.port)
    }

    /// The temporary directory (the data directory is its `data/`, the log its `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The postmaster's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.pid())
    }

    /// Whether the server process is running (it may still be starting or recovering).
    pub fn is_running(&mut self) -> bool {
        let running = self.server.as_mut().is_some_and(|s| s.exited().is_none());
        if !running {
            self.server = None;
        }
        running
    }

    /// Runs `sql` (one or more statements, in the simple query protocol) in database
    /// `dbname` on a connection of its own and returns the rows as `psql -A -t` prints them:
    /// `|`-separated columns in their text form, NULL as empty, one row per line. Tests
    /// check a sink's effects with it, outside the sink's connections and transactions.
    pub fn psql(&self, dbname: &str, sql: &str) -> Result<String, ServerError> {
        simple_query(self.port, dbname, sql)
    }

    /// Creates database `name` (for tests that share one server).
    pub fn create_database(&self, name: &str) -> Result<(), ServerError> {
        self.psql("postgres", &format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""))).map(drop)
    }

    /// SIGKILLs the postmaster and all its backends at once, like a crash. Open connections
    /// break; [`Postgres::restart`] starts it again with crash recovery.
    pub fn kill(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill();
        }
    }

    /// Stops the server gracefully (fast shutdown: open transactions are rolled back), or
    /// SIGKILLs it after 10 s.
    pub fn stop(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.stop(crate::process::Signal::SIGINT, Duration::from_secs(10));
        }
    }

    /// Starts the server again on the same port and data directory (after [`Postgres::kill`]
    /// or [`Postgres::stop`]; a running server is killed first) and waits until it answers.
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        // The port was ours a moment ago; another process may take it meanwhile, which
        // fails the restart loudly rather than moving the server to another port.
        self.launch(self.port)
    }

    fn run_as_cmd(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        server::apply_run_as(&mut cmd, self.run_as);
        // The server user may not be allowed into the caller's working directory.
        cmd.current_dir(&self.dir);
        cmd.env("LC_ALL", "C").env_remove("PGDATA");
        cmd
    }

    fn initdb(&self) -> Result<(), ServerError> {
        let mut cmd = self.run_as_cmd("initdb");
        cmd.arg("-D").arg(self.dir.join("data")).args([
            "-U",
            USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ]);
        server::run_tool(&mut cmd).map(drop)
    }

    fn launch_on_free_port(&mut self) -> Result<(), ServerError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = server::free_port()?;
            match self.launch(port) {
                Err(ServerError::Exited { tail, .. }) if attempt < 4 && tail.contains("could not bind") => {
                    tracing::info!(port, "PostgreSQL port was taken meanwhile; retrying on another");
                }
                other => return other,
            }
        }
    }

    fn launch(&mut self, port: u16) -> Result<(), ServerError> {
        let mut cmd = self.run_as_cmd("postgres");
        cmd.arg("-D").arg(self.dir.join("data"));
        let onoff = |b: bool| if b { "on" } else { "off" };
        let mut settings: Vec<(String, String)> = vec![
            ("listen_addresses".into(), "127.0.0.1".into()),
            ("port".into(), port.to_string()),
            ("unix_socket_directories".into(), String::new()),
            ("fsync".into(), onoff(self.cfg.durable).into()),
            ("synchronous_commit".into(), "on".into()),
            ("full_page_writes".into(), onoff(self.cfg.durable).into()),
            ("max_connections".into(), "200".into()),
            ("logging_collector".into(), "off".into()),
        ];
        settings.extend(self.cfg.settings.iter().cloned());
        for (k, v) in &settings {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        let log = self.log_path();
        let mut proc_ = ServerProcess::spawn(cmd, &log)?;
        self.port = port;
        let ready = server::wait_ready("PostgreSQL", &mut proc_, &log, self.cfg.startup_timeout, || {
            match self.psql("postgres", "SELECT 1") {
                Ok(out) if out.trim() == "1" => Ok(()),
                Ok(out) => Err(format!("SELECT 1 returned {out:?}")),
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

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
        server::remove_dir(&self.dir);
    }
}

fn bin_dir(cfg: &PostgresConfig) -> Result<PathBuf, ServerError> {
    let hint = "set KAFKA_EOS_PG_BIN to a directory holding initdb and postgres, or unset it \
                to use an installed PostgreSQL or the one the test kit fetches from Maven Central";
    let dir = match (&cfg.bin_dir, std::env::var_os("KAFKA_EOS_PG_BIN").filter(|v| !v.is_empty())) {
        (Some(d), _) => d.clone(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => match newest_debian_bin_dir() {
            Some(d) => d,
            None => crate::fetch::postgres_bin_dir()?,
        },
    };
    for tool in ["initdb", "postgres"] {
        let path = dir.join(tool);
        if !path.is_file() {
            return Err(ServerError::BinaryMissing { what: "PostgreSQL".into(), path, hint: hint.into() });
        }
    }
    Ok(dir)
}

/// The rows of `sql` as [`Postgres::psql`] returns them. The client runs on a thread of its
/// own: the `postgres` crate blocks on a runtime of its own, which may not start inside a
/// caller's async task.
fn simple_query(port: u16, dbname: &str, sql: &str) -> Result<String, ServerError> {
    let failed = |e: postgres::Error| ServerError::ToolFailed {
        command: format!("SQL {sql:?} in database {dbname} on 127.0.0.1:{port}"),
        status: "failed".into(),
        output: match e.as_db_error() {
            Some(db) => format!("{}: {}", db.severity(), db.message()),
            None => e.to_string(),
        },
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut client = postgres::Config::new()
                .host("127.0.0.1")
                .port(port)
                .user(USER)
                .dbname(dbname)
                .connect_timeout(Duration::from_secs(5))
                .connect(postgres::NoTls)
                .map_err(failed)?;
            let mut rows = Vec::new();
            for message in client.simple_query(sql).map_err(failed)? {
                if let postgres::SimpleQueryMessage::Row(row) = message {
                    rows.push((0..row.len()).map(|i| row.get(i).unwrap_or("")).collect::<Vec<_>>().join("|"));
                }
            }
            Ok(rows.join("\n"))
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

fn newest_debian_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One server, every operation: a real query, kill (data survives crash recovery),
    /// restart on the same port, drop removes the directory.
    #[test]
    fn start_query_kill_restart_drop() {
        let mut pg =
            Postgres::start(PostgresConfig::default()).unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"));
        let port = pg.port();
        let dir = pg.dir().to_path_buf();
        assert_eq!(pg.psql("postgres", "SELECT 40 + 2").unwrap(), "42");
        pg.create_database("t1").unwrap();
        pg.psql("t1", "CREATE TABLE x (k int PRIMARY KEY); INSERT INTO x VALUES (1), (2)").unwrap();
        let pid = pg.pid().unwrap();
        pg.kill();
        assert!(!pg.is_running());
        assert!(pg.psql("t1", "SELECT 1").is_err(), "killed server still answers");
        assert_eq!(server::live_group_members(pid), 0, "backends outlived the kill");
        pg.restart().unwrap();
        assert_eq!(pg.port(), port);
        assert_eq!(pg.psql("t1", "SELECT count(*) FROM x").unwrap(), "2");
        drop(pg);
        assert!(!dir.exists(), "directory left behind");
    }

    /// The server dies with the process that started it, even when that process is
    /// SIGKILLed: a child copy of this test binary starts one, prints its pid and waits.
    #[test]
    fn server_dies_with_the_process_that_started_it() {
        if std::env::var_os("KAFKA_EOS_PG_CHILD").is_some() {
            return; // the child's copy of this test does nothing; see child_holds_a_server
        }
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(["--exact", "postgres::tests::child_holds_a_server", "--nocapture", "--include-ignored"])
            .env("KAFKA_EOS_PG_CHILD", "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut started = None;
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0 {
            if let Some((p, dir)) = line.trim().strip_prefix("postmaster pid ").and_then(|l| l.split_once(" dir ")) {
                started = Some((p.parse::<u32>().unwrap(), PathBuf::from(dir)));
                break;
            }
            line.clear();
        }
        let (pid, dir) = started.expect("the child did not start PostgreSQL");
        assert!(crate::process::pid_exists(pid));
        child.kill().unwrap(); // SIGKILL: no destructor, no exit hook
        child.wait().unwrap();
        assert!(
            crate::process::wait_until(Duration::from_secs(10), || server::live_group_members(pid) == 0),
            "PostgreSQL outlived the process that started it"
        );
        // A SIGKILLed process leaves its directory (the next start in another process
        // would remove it as stale).
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    #[ignore = "helper run by server_dies_with_the_process_that_started_it"]
    fn child_holds_a_server() {
        if std::env::var_os("KAFKA_EOS_PG_CHILD").is_none() {
            return;
        }
        let pg = Postgres::start(PostgresConfig::default()).unwrap();
        println!("postmaster pid {} dir {}", pg.pid().unwrap(), pg.dir().display());
        std::thread::sleep(Duration::from_secs(120));
    }
}
