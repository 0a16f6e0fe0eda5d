//! Prerequisites and the jar cache: finds Java, checks its version, and fetches the broker's
//! classpath with Maven once per Kafka version.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use super::BrokerError;

/// The pom-only Maven project whose runtime dependencies are the broker classpath; a template
/// filled in by [`pom`].
const POM: &str = include_str!("pom.xml");

/// The log4j2 version to put beside Kafka `version`'s jars (the broker's, and the benchmark
/// peers'): log4j2 and its slf4j 1.x binding, which no Kafka pom declares, must be the
/// generation the release itself depends on: 2.24.x up to Kafka 4.1, 2.25.x from 4.2
/// (4.4.0 brings 2.25.5; all of them keep slf4j-api 1.7.36).
pub fn log4j_version(version: &str) -> &'static str {
    match version.split('.').take(2).collect::<Vec<_>>()[..] {
        ["4", "0" | "1"] => "2.24.3",
        _ => "2.25.5",
    }
}

/// The embedded pom for one Kafka version (see [`log4j_version`]).
fn pom(version: &str) -> String {
    POM.replace("@KAFKA_VERSION@", version).replace("@LOG4J_VERSION@", log4j_version(version))
}

/// Checks that `version` looks like a Kafka release (`4.1.1`, `4.4.0`, `4.2.0-rc1`): it names a
/// cache directory and goes into the pom, so nothing else is accepted.
pub(crate) fn check_version(version: &str) -> Result<(), BrokerError> {
    let ok = version.starts_with(|c: char| c.is_ascii_digit())
        && version.split('.').count() >= 2
        && version.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(BrokerError::InvalidConfig(format!("not a Kafka version: {version:?} (expected e.g. 4.1.1)")))
    }
}

/// Written into the version directory after a complete fetch; its absence means "fetch again".
const MARKER: &str = ".complete";

/// The main broker jar; its presence is checked before the marker is written.
fn broker_jar(version: &str) -> String {
    format!("kafka_2.13-{version}.jar")
}

/// Oldest Java the Kafka 4.x broker runs on.
const MIN_JAVA: u32 = 17;

/// Root of the jar cache: `$KAFKA_EOS_CACHE`, else `$HOME/.cache/kafka-eos`, else
/// `<temp>/kafka-eos-cache` when there is no home directory.
///
/// The jars themselves live in `<root>/kafka-<version>/libs`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KAFKA_EOS_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("kafka-eos"),
        None => std::env::temp_dir().join("kafka-eos-cache"),
    }
}

fn version_dir(version: &str) -> PathBuf {
    cache_dir().join(format!("kafka-{version}"))
}

/// Makes sure the jars of Kafka `version` (e.g. [`KAFKA_VERSION`](super::KAFKA_VERSION)) are in
/// the cache and returns the `libs` directory holding them (the broker classpath is `<libs>/*`).
/// Each version has its own directory, `<cache>/kafka-<version>`.
///
/// Fast and offline when a previous fetch completed. Otherwise it needs Java 17+ and Maven and
/// network access to Maven Central (or a mirror from `~/.m2/settings.xml`): it writes the
/// embedded pom into the cache and runs `maven-dependency-plugin:copy-dependencies` (about 10 s,
/// 43 MB). Jars go to a scratch directory that is renamed into place, and a marker file is
/// written last, so an interrupted fetch is simply redone. A file lock serializes concurrent
/// installs from several test processes. Public so that CI and the CLI can pre-fetch.
pub fn install(version: &str) -> Result<PathBuf, BrokerError> {
    check_version(version)?;
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());

    let dir = version_dir(version);
    let libs = dir.join("libs");
    if dir.join(MARKER).is_file() {
        return Ok(libs);
    }
    fs::create_dir_all(&dir).map_err(|e| BrokerError::io(format!("creating the jar cache {}", dir.display()), e))?;
    let _lock = FileLock::acquire(&dir.join(".install.lock"))?;
    if dir.join(MARKER).is_file() {
        // Another process finished the fetch while we waited for the lock.
        return Ok(libs);
    }

    // Maven runs on Java too: report a missing/old Java first, with the better message.
    java()?;
    let mvn = "mvn";
    match Command::new(mvn).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BrokerError::MavenMissing { version: version.into(), cache: dir });
        }
        Err(e) => return Err(BrokerError::io(format!("running `{mvn} --version`"), e)),
    }

    let partial = dir.join("libs.partial");
    for stale in [&partial, &libs] {
        if stale.exists() {
            fs::remove_dir_all(stale).map_err(|e| BrokerError::io(format!("removing {}", stale.display()), e))?;
        }
    }
    let pom = dir.join("pom.xml");
    fs::write(&pom, self::pom(version)).map_err(|e| BrokerError::io(format!("writing {}", pom.display()), e))?;

    tracing::info!(dir = %dir.display(), "fetching the Kafka {version} jars with Maven (one time)");
    let started = std::time::Instant::now();
    let out = copy_dependencies(&dir, &partial)
        .map_err(|e| BrokerError::io(format!("running {mvn} in {}", dir.display()), e))?;
    let mut combined = String::from_utf8_lossy(&out.stdout).into_owned();
    combined.push_str(&String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(BrokerError::MavenFailed {
            version: version.into(),
            status: out.status.to_string(),
            dir: libs,
            tail: last_lines(&combined, 40),
        });
    }
    if !partial.join(broker_jar(version)).is_file() {
        return Err(BrokerError::MavenFailed {
            version: version.into(),
            status: format!("succeeded but {} is missing", broker_jar(version)),
            dir: libs,
            tail: last_lines(&combined, 40),
        });
    }
    fs::rename(&partial, &libs)
        .map_err(|e| BrokerError::io(format!("renaming {} to {}", partial.display(), libs.display()), e))?;
    let jars = fs::read_dir(&libs)
        .map_err(|e| BrokerError::io(format!("listing {}", libs.display()), e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    let marker = dir.join(MARKER);
    let mut f = fs::File::create(&marker).map_err(|e| BrokerError::io(format!("writing {}", marker.display()), e))?;
    writeln!(f, "{}", jars.join("\n"))
        .and_then(|_| f.sync_all())
        .map_err(|e| BrokerError::io(format!("writing {}", marker.display()), e))?;
    tracing::info!(jars = jars.len(), elapsed = ?started.elapsed(), "Kafka jars installed in {}", libs.display());
    Ok(libs)
}

/// The `java` executable to use, checked once per process to be Java 17 or newer.
///
/// Like Kafka's own scripts: `$JAVA_HOME/bin/java` when `JAVA_HOME` is set, else `java` from
/// `PATH`.
pub(crate) fn java() -> Result<PathBuf, BrokerError> {
    static CHECKED: OnceLock<Result<PathBuf, (bool, String, String)>> = OnceLock::new();
    let checked = CHECKED.get_or_init(|| {
        let java = match std::env::var_os("JAVA_HOME").filter(|h| !h.is_empty()) {
            Some(home) if Path::new(&home).join("bin/java").is_file() => Path::new(&home).join("bin/java"),
            _ => PathBuf::from("java"),
        };
        let shown = java.display().to_string();
        let out = match Command::new(&java).arg("-version").stdin(Stdio::null()).output() {
            Ok(out) => out,
            Err(_) => return Err((true, shown, String::new())),
        };
        // `java -version` prints to stderr; be lenient and look at both streams.
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        match parse_java_major(&text) {
            Some(major) if major >= MIN_JAVA => Ok(java),
            Some(major) => Err((false, shown, format!("Java {major}"))),
            None => Err((false, shown, format!("an unrecognized version: {:?}", first_line(&text)))),
        }
    });
    match checked {
        Ok(java) => Ok(java.clone()),
        Err((true, java, _)) => Err(BrokerError::JavaMissing { java: java.clone() }),
        Err((false, java, found)) => Err(BrokerError::JavaTooOld { java: java.clone(), found: found.clone() }),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| l.contains("version")).or_else(|| text.lines().next()).unwrap_or("").trim()
}

/// Major Java version from `java -version` output: `"17.0.15"` → 17, `"1.8.0_381"` → 8,
/// `"21-ea"` → 21. Lines such as "Picked up JAVA_TOOL_OPTIONS" are skipped.
pub(crate) fn parse_java_major(output: &str) -> Option<u32> {
    for line in output.lines() {
        if !line.contains("version") {
            continue;
        }
        let version = match line.split('"').nth(1) {
            Some(quoted) => quoted,
            // Some builds print `java version 17.0.2 ...` without quotes.
            None => line.split_whitespace().skip_while(|w| *w != "version").nth(1)?,
        };
        let mut parts = version.split(|c: char| !c.is_ascii_digit());
        let first: u32 = parts.next()?.parse().ok()?;
        return if first == 1 { parts.next()?.parse().ok() } else { Some(first) };
    }
    None
}

/// The last `n` lines of `text`.
pub(crate) fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// An exclusive `flock` held until dropped (released by the kernel if the process dies).
pub(crate) struct FileLock(#[allow(dead_code)] nix::fcntl::Flock<fs::File>);

impl FileLock {
    pub(crate) fn acquire(path: &Path) -> Result<FileLock, BrokerError> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| BrokerError::io(format!("opening {}", path.display()), e))?;
        let mut file = file;
        loop {
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive) {
                Ok(lock) => return Ok(FileLock(lock)),
                Err((f, nix::errno::Errno::EINTR)) => file = f,
                Err((_, e)) => return Err(BrokerError::io(format!("locking {}", path.display()), e.into())),
            }
        }
    }
}

/// Runs Maven in `dir` (which holds a `pom.xml`) to copy the runtime classpath of its
/// dependencies into `output`. Shared by the broker's install and the benchmarks' Java peers.
pub fn copy_dependencies(dir: &Path, output: &Path) -> std::io::Result<std::process::Output> {
    Command::new("mvn")
        .current_dir(dir)
        .args([
            "-B",
            "-q",
            "-f",
            "pom.xml",
            "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
            "-DincludeScope=runtime",
        ])
        .arg(format!("-DoutputDirectory={}", output.display()))
        .stdin(Stdio::null())
        .output()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_versions() {
        let cases = [
            ("openjdk version \"17.0.15\" 2025-04-15\nOpenJDK Runtime Environment", Some(17)),
            ("java version \"1.8.0_381\"\nJava(TM) SE Runtime Environment", Some(8)),
            ("openjdk version \"21\" 2023-09-19", Some(21)),
            ("openjdk version \"22-ea\" 2024-03-19", Some(22)),
            ("openjdk version \"11.0.2\" 2019-01-15", Some(11)),
            ("Picked up JAVA_TOOL_OPTIONS: -Dfile.encoding=UTF8\nopenjdk version \"17.0.8.1\" 2023-08-24", Some(17)),
            ("java version 17.0.2 2022-01-18 LTS", Some(17)),
            ("bash: java: command not found", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_java_major(text), want, "{text:?}");
        }
    }

    #[test]
    fn pom_per_version() {
        let old = pom("4.1.1");
        assert!(old.contains("<kafka.version>4.1.1</kafka.version>") && old.contains("<log4j.version>2.24.3<"));
        let new = pom("4.4.0");
        assert!(new.contains("<kafka.version>4.4.0</kafka.version>") && new.contains("<log4j.version>2.25.5<"));
        assert!(!new.contains("_VERSION@"), "a placeholder is left: {new}");
        for good in ["4.1.1", "4.4.0", "4.2.0-rc1"] {
            assert!(check_version(good).is_ok(), "{good}");
        }
        for bad in ["", "4", "../4.1", "4.1.1/x", "latest", "4.1 1"] {
            assert!(check_version(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tail() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(last_lines("a", 5), "a");
        assert_eq!(last_lines("", 5), "");
    }
}
