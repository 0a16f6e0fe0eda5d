//! Who runs the pipeline under the faults: our instances, or the same copy written with
//! Kafka's own Java clients (`cli/java/`), judged by the same verifier and reader. The Java
//! subjects are the control for a flaw that may be the broker's: if they show the same
//! anomalies under the same schedule, no client can be the cause.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kafka_eos::Guarantee;

use super::matrix::{Cell, Workload};
use super::plan::Scenario;
use crate::java::JavaApps;

/// The program the fleet runs as each instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Subject {
    /// `kafka-eos chaos instance`: this project's runtime.
    #[default]
    KafkaEos,
    /// `TxnCopyApp`: a read-process-write loop on the Java transactional producer and
    /// consumer (KIP-447: one producer per process, offsets sent with the group metadata).
    JavaTxn,
    /// `CopyApp`: Kafka Streams with `processing.guarantee=exactly_once_v2`.
    KafkaStreams,
}

impl Subject {
    /// The name `--subject` takes.
    pub fn name(self) -> &'static str {
        match self {
            Subject::KafkaEos => "kafka-eos",
            Subject::JavaTxn => "java-txn",
            Subject::KafkaStreams => "kafka-streams",
        }
    }

    /// Whether the subject runs on the JVM (and needs [`JavaApps`]).
    pub fn is_java(self) -> bool {
        self != Subject::KafkaEos
    }

    /// Why this subject cannot run `cell`, if it cannot. The Java subjects copy only, with
    /// one transactional producer per process (the analogue of
    /// `Guarantee::ExactlyOncePerConsumer`), and cannot stop themselves mid-transaction on
    /// a signal as the stall scenario asks.
    pub fn refuses(self, cell: &Cell) -> Option<String> {
        if !self.is_java() {
            return None;
        }
        let name = self.name();
        if cell.workload != Workload::Copy {
            return Some(format!("--subject {name} runs the copy workload only, not {}", cell.workload));
        }
        if cell.guarantee != Guarantee::ExactlyOncePerConsumer {
            return Some(format!(
                "--subject {name} has one transactional producer per process: run it with --guarantee exactly-once-per-consumer"
            ));
        }
        if cell.fault == Scenario::Stall {
            return Some(format!(
                "--subject {name} cannot run stall: its instances cannot stop themselves mid-transaction"
            ));
        }
        None
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a Java instance needs to know: the same topics, group and timeouts as ours.
pub(crate) struct JavaInstance<'a> {
    pub bootstrap: &'a str,
    pub app: &'a str,
    pub input: &'a str,
    pub output: &'a str,
    pub session_timeout: Duration,
    pub transaction_timeout: Duration,
    pub status_interval: Duration,
    /// Where the slot's state directory goes (Kafka Streams).
    pub log_dir: &'a Path,
}

/// The fleet's executable and arguments for a Java subject's instances (`{slot}` is each
/// instance's slot: a restart reuses the slot's transactional.id and state directory).
pub(crate) fn java_command(subject: Subject, apps: &JavaApps, i: &JavaInstance<'_>) -> (PathBuf, Vec<String>) {
    let ms = |d: Duration| d.as_millis().to_string();
    let jvm = ["-Xms128m", "-Xmx512m", "-XX:+UseG1GC"];
    let (main, own) = match subject {
        Subject::JavaTxn => (
            "TxnCopyApp",
            vec![
                i.bootstrap.to_string(),
                i.app.to_string(),
                i.input.to_string(),
                i.output.to_string(),
                format!("{}-java-{{slot}}", i.app),
                ms(i.session_timeout),
                ms(i.transaction_timeout),
                ms(i.status_interval),
            ],
        ),
        Subject::KafkaStreams | Subject::KafkaEos => (
            "CopyApp",
            vec![
                i.bootstrap.to_string(),
                i.app.to_string(),
                i.input.to_string(),
                i.output.to_string(),
                "exactly_once_v2".to_string(),
                // Kafka Streams' own default under exactly-once.
                "100".to_string(),
                i.log_dir.join("streams-{slot}").display().to_string(),
                ms(i.status_interval),
                ms(i.session_timeout),
                ms(i.transaction_timeout),
            ],
        ),
    };
    let mut args = apps.jvm_args(&jvm, main);
    args.extend(own);
    (apps.java().to_path_buf(), args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(workload: Workload, guarantee: Guarantee, fault: Scenario) -> Cell {
        Cell { workload, guarantee, fault }
    }

    #[test]
    fn our_runtime_runs_every_cell_and_the_java_subjects_only_the_per_process_copy_without_self_stops() {
        let eopc = Guarantee::ExactlyOncePerConsumer;
        for s in [Subject::JavaTxn, Subject::KafkaStreams] {
            assert_eq!(s.refuses(&cell(Workload::Copy, eopc, Scenario::CoordinatorKill)), None);
            assert!(s
                .refuses(&cell(Workload::Copy, Guarantee::ExactlyOncePerPartition, Scenario::CoordinatorKill))
                .is_some());
            assert!(s.refuses(&cell(Workload::Timers, eopc, Scenario::CoordinatorKill)).is_some());
            assert!(s.refuses(&cell(Workload::Copy, eopc, Scenario::Stall)).is_some());
        }
        for w in [Workload::Copy, Workload::Timers] {
            assert_eq!(Subject::KafkaEos.refuses(&cell(w, Guarantee::ExactlyOncePerPartition, Scenario::Stall)), None);
        }
    }
}
