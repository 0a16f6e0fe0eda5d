//! Each of our subjects copies in a process of its own — this bench's executable run again
//! with [`FLAG`] — as each Java peer does. Its peak RSS and CPU are then the subject's
//! alone: the bench process also produced the inputs, verified earlier copies and keeps
//! their client libraries and allocator arenas, which a reset high-water mark cannot take
//! out of the figure.
//!
//! The child creates the output topic, copies, reads its peak RSS, verifies, and prints the
//! [`CopyResult`] as one line `RESULT <json>` on stdout; its logs go to stderr. It dies with
//! the bench (`SpawnMode::Attached`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kafka_eos::config::Properties;
use kafka_eos_cli::bench::{copy, CopyOptions, CopyResult, Input, Subject, Tuning};
use kafka_eos_testkit::process::{self, SpawnMode};
use serde::{Deserialize, Serialize};

/// The first argument that makes this executable a child running one copy.
pub const FLAG: &str = "--child-copy";
const RESULT: &str = "RESULT ";

/// One copy, as the bench hands it to a child.
#[derive(Debug, Serialize, Deserialize)]
pub struct Spec {
    pub bootstrap: String,
    pub input_topic: String,
    pub partitions: i32,
    pub records: u64,
    pub value_size: usize,
    pub broker_pids: Vec<u32>,
    pub output_topic: String,
    /// [`Subject::name`].
    pub subject: String,
    pub tuning_interval_ms: u64,
    pub max_records_per_transaction: usize,
    pub time_limit_secs: u64,
}

impl Spec {
    /// The input as the bench created it (with no client properties: this bench sets none).
    fn input(&self) -> Input {
        Input {
            bootstrap: self.bootstrap.clone(),
            topic: self.input_topic.clone(),
            partitions: self.partitions,
            records: self.records,
            value_size: self.value_size,
            client_properties: Properties::default(),
            broker_pids: self.broker_pids.clone(),
        }
    }
}

/// In the bench: runs `spec` in a child and returns what it measured.
pub fn copy_in_child(spec: &Spec) -> Result<CopyResult, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let json = serde_json::to_string(spec).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.arg(FLAG).arg(json).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = process::spawn(cmd, SpawnMode::Attached).map_err(|e| format!("starting the child: {e}"))?;
    let stdout = child.stdout.take().ok_or("the child has no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            match line.strip_prefix(RESULT) {
                Some(json) => {
                    let _ = tx.send(json.to_string());
                }
                None => println!("{line}"),
            }
        }
    });
    // The copy's own limit, then the verification's read-back.
    let wait = Duration::from_secs(spec.time_limit_secs + 300);
    let result = rx.recv_timeout(wait);
    if result.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| format!("waiting for the child: {e}"))?;
    match result {
        Ok(json) => serde_json::from_str(&json).map_err(|e| format!("the child's result: {e}")),
        Err(_) if status.success() => Err("the child ended without a result".into()),
        Err(_) => Err(format!("the child failed ({status}); its error is above")),
    }
}

/// In the child: runs the copy `json` describes, prints its result, and exits.
pub fn run(json: &str) -> ! {
    let outcome = serde_json::from_str::<Spec>(json).map_err(|e| format!("the spec: {e}")).and_then(|spec| {
        let subject = Subject::from_name(&spec.subject).ok_or(format!("no subject {}", spec.subject))?;
        let opts = CopyOptions {
            tuning: Tuning {
                commit_interval: Duration::from_millis(spec.tuning_interval_ms),
                max_records_per_transaction: spec.max_records_per_transaction,
                ..Tuning::default()
            },
            time_limit: Some(Duration::from_secs(spec.time_limit_secs)),
            verify: true,
            hook: None,
        };
        let rt = super::common::runtime();
        copy(rt.handle(), &spec.input(), &spec.output_topic, subject, &opts).map_err(|e| e.to_string())
    });
    match outcome.and_then(|r| serde_json::to_string(&r).map_err(|e| e.to_string())) {
        Ok(json) => {
            println!("{RESULT}{json}");
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("the copy failed: {e}");
            std::process::exit(1)
        }
    }
}
