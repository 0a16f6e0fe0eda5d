//! The broker's process plumbing: the generic part (spawning, signals) lives in
//! [`crate::process`]; this module adds what is particular to a Kafka node: recognising its
//! JVM by its command line, and reading its log since its latest launch.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

pub(crate) use crate::process::*;

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
