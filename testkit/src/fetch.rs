//! Server binaries from Maven Central, fetched once into the cache, so that the README's test
//! command needs nothing but Rust, Java and Maven: PostgreSQL 15 from
//! `io.zonky.test.postgres`'s per-platform archives, Redis 7 from `org.signal:embedded-redis`
//! (static executables). Used when no local install is found (`/usr/lib/postgresql/*/bin`,
//! `redis-server` on `PATH`, or the `KAFKA_EOS_PG_BIN` / `KAFKA_EOS_REDIS_SERVER` settings).
//!
//! Each artifact is unpacked into a scratch directory that is renamed into place, with a
//! marker written last, under a file lock: an interrupted fetch is redone and concurrent test
//! processes fetch once. Maven keeps its own copy in `~/.m2`, so a removed cache is rebuilt
//! offline.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::broker::{cache_dir, FileLock};
use crate::server::ServerError;

/// The PostgreSQL release fetched when none is installed.
pub const POSTGRES_VERSION: &str = "15.10.0";
/// The `org.signal:embedded-redis` release fetched when no `redis-server` is installed.
const REDIS_ARTIFACT_VERSION: &str = "0.9.1";
/// The Redis release that artifact carries.
pub const REDIS_VERSION: &str = "7.0.15";

const MARKER: &str = ".complete";

/// The directory holding `initdb` and `postgres` of PostgreSQL [`POSTGRES_VERSION`], fetched
/// and unpacked on first use.
///
/// As root the servers run as an unprivileged user that may not enter the root's home, so
/// the binaries are then unpacked under the system temp directory (world-readable) instead of
/// the cache; the download itself stays in Maven's repository.
pub fn postgres_bin_dir() -> Result<PathBuf, ServerError> {
    let platform = postgres_platform().ok_or_else(|| unsupported("PostgreSQL"))?;
    let root =
        if nix::unistd::geteuid().is_root() { std::env::temp_dir().join("kafka-eos-cache") } else { cache_dir() };
    let dir = root.join(format!("postgres-{POSTGRES_VERSION}"));
    let artifact = format!("io.zonky.test.postgres:embedded-postgres-binaries-{platform}:{POSTGRES_VERSION}");
    once(&dir, |scratch| {
        maven_unpack(&artifact, "*.txz", scratch)?;
        let archive = fs::read_dir(scratch)
            .map_err(|e| ServerError::io(format!("listing {}", scratch.display()), e))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "txz"))
            .ok_or_else(|| tool_failed(&artifact, "the artifact holds no .txz archive"))?;
        untar_xz(&archive, scratch)?;
        fs::remove_file(&archive).map_err(|e| ServerError::io(format!("removing {}", archive.display()), e))?;
        make_readable(scratch)
    })?;
    if nix::unistd::geteuid().is_root() {
        set_mode(&root, 0o755)?;
    }
    Ok(dir.join("bin"))
}

/// The `redis-server` executable of Redis [`REDIS_VERSION`], fetched on first use.
pub fn redis_server() -> Result<PathBuf, ServerError> {
    let platform = redis_platform().ok_or_else(|| unsupported("Redis"))?;
    let dir = cache_dir().join(format!("redis-{REDIS_VERSION}"));
    let name = format!("redis-server-{REDIS_VERSION}-{platform}");
    let artifact = format!("org.signal:embedded-redis:{REDIS_ARTIFACT_VERSION}");
    once(&dir, |scratch| {
        maven_unpack(&artifact, &name, scratch)?;
        let exe = scratch.join(&name);
        if !exe.is_file() {
            return Err(tool_failed(&artifact, &format!("the artifact holds no {name}")));
        }
        set_mode(&exe, 0o755)?;
        fs::rename(&exe, scratch.join("redis-server"))
            .map_err(|e| ServerError::io(format!("renaming {}", exe.display()), e))
    })?;
    Ok(dir.join("redis-server"))
}

/// zonky's platform names: `<os>-<arch>`.
fn postgres_platform() -> Option<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some("linux-amd64"),
        ("linux", "aarch64") => Some("linux-arm64v8"),
        ("macos", "x86_64") => Some("darwin-amd64"),
        ("macos", "aarch64") => Some("darwin-arm64v8"),
        _ => None,
    }
}

/// embedded-redis's executable suffixes.
fn redis_platform() -> Option<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some("linux-amd64"),
        ("linux", "aarch64") => Some("linux-arm64"),
        ("macos", "x86_64") => Some("darwin-amd64"),
        ("macos", "aarch64") => Some("darwin-arm64"),
        _ => None,
    }
}

fn unsupported(what: &str) -> ServerError {
    ServerError::BinaryMissing {
        what: what.into(),
        path: PathBuf::from("(no build on Maven Central for this platform)"),
        hint: format!(
            "no {what} build is published for {}-{}: install it and point the test kit at it \
             (KAFKA_EOS_PG_BIN or KAFKA_EOS_REDIS_SERVER)",
            std::env::consts::OS,
            std::env::consts::ARCH
        ),
    }
}

fn tool_failed(artifact: &str, output: &str) -> ServerError {
    ServerError::ToolFailed {
        command: format!("mvn dependency:unpack -Dartifact={artifact}"),
        status: "unexpected content".into(),
        output: output.into(),
    }
}

/// Fills `dir` once: runs `fill` on a scratch directory, renames it to `dir` and writes the
/// marker, under an in-process mutex and a file lock beside `dir`.
fn once(dir: &Path, fill: impl FnOnce(&Path) -> Result<(), ServerError>) -> Result<(), ServerError> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    if dir.join(MARKER).is_file() {
        return Ok(());
    }
    let parent = dir.parent().expect("a cache entry has a parent");
    fs::create_dir_all(parent).map_err(|e| ServerError::io(format!("creating {}", parent.display()), e))?;
    let sibling = |suffix: &str| {
        let mut name = dir.file_name().expect("a cache entry has a name").to_os_string();
        name.push(suffix);
        dir.with_file_name(name)
    };
    let lock_path = sibling(".lock");
    let _lock = FileLock::acquire(&lock_path)
        .map_err(|e| ServerError::io(format!("locking {}", lock_path.display()), std::io::Error::other(e)))?;
    if dir.join(MARKER).is_file() {
        return Ok(());
    }
    let scratch = sibling(".partial");
    for stale in [&scratch, &dir.to_path_buf()] {
        if stale.exists() {
            fs::remove_dir_all(stale).map_err(|e| ServerError::io(format!("removing {}", stale.display()), e))?;
        }
    }
    fs::create_dir_all(&scratch).map_err(|e| ServerError::io(format!("creating {}", scratch.display()), e))?;
    fill(&scratch)?;
    fs::File::create(scratch.join(MARKER))
        .and_then(|f| f.sync_all())
        .map_err(|e| ServerError::io(format!("writing the marker in {}", scratch.display()), e))?;
    fs::rename(&scratch, dir)
        .map_err(|e| ServerError::io(format!("renaming {} to {}", scratch.display(), dir.display()), e))?;
    Ok(())
}

/// Unpacks the files of `artifact` matching `includes` (an Ant pattern) into `out`.
fn maven_unpack(artifact: &str, includes: &str, out: &Path) -> Result<(), ServerError> {
    tracing::info!(artifact, "fetching a server's binaries with Maven (one time)");
    let mut cmd = Command::new("mvn");
    cmd.args(["-B", "-q", "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:unpack"])
        .arg(format!("-Dartifact={artifact}"))
        .arg(format!("-Dmdep.unpack.includes={includes}"))
        .arg(format!("-DoutputDirectory={}", out.display()))
        .current_dir(out)
        .stdin(Stdio::null());
    let shown = format!("mvn dependency:unpack -Dartifact={artifact}");
    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ServerError::BinaryMissing {
                what: "Maven".into(),
                path: PathBuf::from("mvn"),
                hint: format!("Maven fetches {artifact} from Maven Central: install Maven (`apt-get install maven`)"),
            })
        }
        Err(e) => return Err(ServerError::io(format!("running {shown}"), e)),
    };
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Err(ServerError::ToolFailed { command: shown, status: output.status.to_string(), output: text })
}

fn untar_xz(archive: &Path, out: &Path) -> Result<(), ServerError> {
    let io = |e: std::io::Error| ServerError::io(format!("unpacking {}", archive.display()), e);
    let file = fs::File::open(archive).map_err(io)?;
    let mut tar_bytes = Vec::new();
    lzma_rs::xz_decompress(&mut std::io::BufReader::new(file), &mut tar_bytes)
        .map_err(|e| io(std::io::Error::other(e.to_string())))?;
    tar::Archive::new(tar_bytes.as_slice()).unpack(out).map_err(io)
}

/// Opens the unpacked tree to every user (directories 755, files keep their execute bits and
/// gain read), for a server run as another user than the one who fetched it.
fn make_readable(dir: &Path) -> Result<(), ServerError> {
    use std::os::unix::fs::PermissionsExt;
    set_mode(dir, 0o755)?;
    for entry in fs::read_dir(dir).map_err(|e| ServerError::io(format!("listing {}", dir.display()), e))?.flatten() {
        let meta = fs::symlink_metadata(entry.path())
            .map_err(|e| ServerError::io(format!("reading {}", entry.path().display()), e))?;
        if meta.is_dir() {
            make_readable(&entry.path())?;
        } else if meta.is_file() {
            set_mode(&entry.path(), meta.permissions().mode() | 0o444)?;
        }
    }
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), ServerError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| ServerError::io(format!("chmod {mode:o} {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::{Postgres, PostgresConfig};
    use crate::redis::{Redis, RedisConfig};

    /// The fetched binaries start and answer, whatever this machine has installed: the path a
    /// machine without PostgreSQL or Redis takes.
    #[test]
    fn fetched_postgres_and_redis_start_and_answer() {
        let bin_dir = postgres_bin_dir().unwrap_or_else(|e| panic!("fetching PostgreSQL: {e}"));
        let pg = Postgres::start(PostgresConfig { bin_dir: Some(bin_dir), ..PostgresConfig::default() })
            .unwrap_or_else(|e| panic!("starting the fetched PostgreSQL: {e}"));
        let version = pg.psql("postgres", "SHOW server_version").unwrap();
        assert!(version.starts_with("15.10"), "server_version {version:?}");
        assert_eq!(pg.psql("postgres", "SELECT 1, NULL, 'a|b'; SELECT 2").unwrap(), "1||a|b\n2");

        let binary = redis_server().unwrap_or_else(|e| panic!("fetching Redis: {e}"));
        let version = Command::new(&binary).arg("--version").output().unwrap();
        let version = String::from_utf8_lossy(&version.stdout);
        assert!(version.contains(&format!("v={REDIS_VERSION}")), "{version}");
        let redis = Redis::start(RedisConfig { binary: Some(binary), ..RedisConfig::default() })
            .unwrap_or_else(|e| panic!("starting the fetched Redis: {e}"));
        redis.command(&["SET", "k", "v"]).unwrap();
        assert_eq!(redis.command(&["GET", "k"]).unwrap(), "$1");
    }

    /// A second call finds the marker and fetches nothing.
    #[test]
    fn a_complete_fetch_is_reused() {
        let first = redis_server().unwrap();
        let modified = fs::metadata(&first).unwrap().modified().unwrap();
        assert_eq!(redis_server().unwrap(), first);
        assert_eq!(fs::metadata(&first).unwrap().modified().unwrap(), modified);
    }
}
