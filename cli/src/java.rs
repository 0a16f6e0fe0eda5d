//! The Java apps written with Kafka's own clients, run beside ours on the same broker and
//! the same input:
//!
//! - `cli/java/CopyApp.java`: a minimal Kafka Streams application doing the 1:1 copy (the
//!   benchmarks' peer, and a chaos suite subject);
//! - `cli/java/TxnCopyApp.java`: the same copy as a read-process-write loop on the Java
//!   transactional producer and consumer (a chaos suite subject);
//! - Kafka's own tools (`kafka-tools`: `TransactionalMessageCopier`, `FeatureCommand`).
//!
//! Their jars come from Maven Central once, like the broker's
//! (`kafka_eos_testkit::broker::install`): `cli/java/pom.xml`, with the Kafka version asked
//! for, is written into `<cache>/kafka-peers-<version>/` and Maven copies its runtime
//! classpath into `libs/` next to it; a marker file written last makes an interrupted fetch
//! start over. The sources are compiled into the caller's directory at every
//! [`JavaApps::prepare`], so an edit is always picked up.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kafka_eos_testkit::broker::{cache_dir, copy_dependencies, log4j_version, KAFKA_VERSION};

const POM: &str = include_str!("../java/pom.xml");
const SOURCES: [(&str, &str); 2] = [
    ("CopyApp.java", include_str!("../java/CopyApp.java")),
    ("TxnCopyApp.java", include_str!("../java/TxnCopyApp.java")),
];
/// The apps log warnings to stderr (their stdout carries status lines only).
const LOG4J2: &str = "\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1}: %m%n
";

type Res<T> = Result<T, String>;

/// The compiled apps and the classpath of one Kafka release.
#[derive(Debug, Clone)]
pub struct JavaApps {
    /// The Kafka release of the jars.
    pub version: String,
    java: PathBuf,
    libs: PathBuf,
    classes: PathBuf,
    log_config: PathBuf,
}

/// `$JAVA_HOME/bin/<name>` when it exists, else `<name>` from the `PATH`.
pub fn jdk_tool(name: &str) -> PathBuf {
    match std::env::var_os("JAVA_HOME").filter(|h| !h.is_empty()) {
        Some(home) if Path::new(&home).join("bin").join(name).is_file() => Path::new(&home).join("bin").join(name),
        _ => PathBuf::from(name),
    }
}

impl JavaApps {
    /// Fetches the jars of Kafka `version` (once) and compiles the apps into `out`
    /// (`classes-<version>/`). A JDK 17 or newer is needed, and Maven for the first fetch.
    pub fn prepare(version: &str, out: &Path) -> Res<JavaApps> {
        let dir = cache_dir().join(format!("kafka-peers-{version}"));
        let libs = dir.join("libs");
        if !dir.join(".complete").is_file() {
            fetch(&dir, version)?;
        }
        let src = out.join(format!("java-src-{version}"));
        let classes = out.join(format!("classes-{version}"));
        for d in [&src, &classes] {
            fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        let mut files = Vec::new();
        for (name, text) in SOURCES {
            let path = src.join(name);
            fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
            files.push(path);
        }
        let log_config = src.join("log4j2.properties");
        fs::write(&log_config, LOG4J2).map_err(|e| format!("writing {}: {e}", log_config.display()))?;
        let status = Command::new(jdk_tool("javac"))
            .args(["--release", "17", "-nowarn", "-d"])
            .arg(&classes)
            .arg("-cp")
            .arg(format!("{}/*", libs.display()))
            .args(&files)
            .status()
            .map_err(|e| format!("running javac (a JDK 17+ is needed for the Java apps): {e}"))?;
        if !status.success() {
            return Err(format!("javac failed on {}", src.display()));
        }
        Ok(JavaApps { version: version.to_string(), java: jdk_tool("java"), libs, classes, log_config })
    }

    /// The `java` executable.
    pub fn java(&self) -> &Path {
        &self.java
    }

    /// The apps' classes, then every jar of the release.
    pub fn classpath(&self) -> String {
        format!("{}:{}/*", self.classes.display(), self.libs.display())
    }

    /// The arguments of `java` before the main class's own: `jvm` (heap, GC), the log
    /// configuration (warnings to stderr) and the classpath.
    pub fn jvm_args(&self, jvm: &[&str], main: &str) -> Vec<String> {
        let mut args: Vec<String> = jvm.iter().map(|s| s.to_string()).collect();
        args.push(format!("-Dlog4j2.configurationFile={}", self.log_config.display()));
        args.extend(["-cp".to_string(), self.classpath(), main.to_string()]);
        args
    }

    /// A command running `main` with `args` under the JVM options `jvm`.
    pub fn command(&self, jvm: &[&str], main: &str, args: &[String]) -> Command {
        let mut cmd = Command::new(&self.java);
        cmd.args(self.jvm_args(jvm, main)).args(args);
        cmd
    }

    /// Runs a Kafka tool to completion and returns its output (stdout, then stderr).
    pub fn tool(&self, main: &str, args: &[&str]) -> Res<String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let out = self
            .command(&["-Xmx256m"], main, &args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {main}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!("{main} failed: {text}"))
        }
    }
}

/// Copies the apps' runtime classpath into `<dir>/libs` with Maven.
fn fetch(dir: &Path, version: &str) -> Res<()> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    // The template names the broker's release; the version asked for and its log4j
    // generation replace them.
    let pom = POM
        .replace(
            &format!("<kafka.version>{KAFKA_VERSION}</kafka.version>"),
            &format!("<kafka.version>{version}</kafka.version>"),
        )
        .replace(
            &format!("<log4j.version>{}</log4j.version>", log4j_version(KAFKA_VERSION)),
            &format!("<log4j.version>{}</log4j.version>", log4j_version(version)),
        );
    if !pom.contains(&format!("<kafka.version>{version}</kafka.version>")) {
        return Err(format!("cli/java/pom.xml does not name Kafka {KAFKA_VERSION} in <kafka.version>"));
    }
    fs::write(dir.join("pom.xml"), pom).map_err(|e| format!("writing the pom: {e}"))?;
    let partial = dir.join("libs.partial");
    let libs = dir.join("libs");
    for stale in [&partial, &libs] {
        let _ = fs::remove_dir_all(stale);
    }
    eprintln!("fetching Kafka Streams and kafka-tools {version} with Maven into {} (one time)", dir.display());
    let out = copy_dependencies(dir, &partial)
        .map_err(|e| format!("running mvn (Maven is needed once to fetch the Java apps' jars): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "Maven failed fetching the Java apps' jars: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if !partial.join(format!("kafka-streams-{version}.jar")).is_file() {
        return Err("Maven succeeded but kafka-streams is missing".into());
    }
    fs::rename(&partial, &libs).map_err(|e| format!("renaming {}: {e}", partial.display()))?;
    fs::write(dir.join(".complete"), "").map_err(|e| format!("writing the marker: {e}"))
}
