//! Writing the nodes' configuration files and formatting their storage (a part of
//! [`LocalCluster`]'s start, in its own file).

use std::fs;
use std::process::Stdio;

use super::super::props;
use super::super::{BrokerError, SaslConfig};
use super::{LocalCluster, NodeSpec, TAIL_LINES};

impl LocalCluster {
    /// Writes every node's config and formats its storage (all nodes in parallel), creating the
    /// SCRAM credentials of `sasl`'s users in the metadata log and finalizing
    /// `transaction.version` when it is given; `log4j` is every node's log4j2 config.
    pub(super) fn write_and_format(
        &self,
        extra: &[(String, String)],
        sasl: Option<&SaslConfig>,
        transaction_version: Option<u8>,
        log4j: &str,
    ) -> Result<(), BrokerError> {
        let specs: Vec<NodeSpec> = self.nodes.iter().map(|n| n.spec.clone()).collect();
        for spec in &specs {
            for dir in [spec.log_dirs(), spec.logs_dir()] {
                fs::create_dir_all(&dir).map_err(|e| BrokerError::io(format!("creating {}", dir.display()), e))?;
            }
            let text = props::server_properties(spec, &specs, extra, sasl);
            let path = spec.properties_path();
            fs::write(&path, text).map_err(|e| BrokerError::io(format!("writing {}", path.display()), e))?;
            let path = spec.log4j_path();
            fs::write(&path, log4j).map_err(|e| BrokerError::io(format!("writing {}", path.display()), e))?;
        }

        let cluster_id = props::random_kafka_id();
        let controllers = props::initial_controllers(&specs);
        let mut running = Vec::new();
        for spec in &specs {
            let mut cmd = self.java_cmd();
            // A short-lived tool: small heap and the quick C1-only JIT start faster.
            cmd.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
                .arg(format!("-Dlog4j2.configurationFile={}", spec.log4j_path().display()))
                .arg("-cp")
                .arg(self.classpath())
                .args(["kafka.tools.StorageTool", "format", "--cluster-id", &cluster_id, "--config"])
                .arg(spec.properties_path());
            if specs.len() == 1 {
                cmd.arg("--standalone");
            } else {
                cmd.args(["--initial-controllers", &controllers]);
            }
            if let Some(level) = transaction_version {
                cmd.args(["--feature", &format!("transaction.version={level}")]);
            }
            if let Some(sasl) = sasl {
                // The same credentials on every node: they are bootstrap records, written to
                // the metadata log by whichever controller becomes the first leader.
                cmd.args(props::scram_format_args(sasl));
            }
            cmd.current_dir(&spec.dir).stdout(Stdio::piped()).stderr(Stdio::piped());
            let child = cmd
                .spawn()
                .map_err(|e| BrokerError::io(format!("running {} (storage format)", self.java.display()), e))?;
            running.push((spec, child));
        }
        let mut first_error = None;
        for (spec, child) in running {
            let out =
                child.wait_with_output().map_err(|e| BrokerError::io("waiting for the storage format tool", e))?;
            if !out.status.success() && first_error.is_none() {
                let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
                output.push_str(&String::from_utf8_lossy(&out.stderr));
                first_error = Some(BrokerError::FormatFailed {
                    node: spec.id,
                    status: out.status.to_string(),
                    config: spec.properties_path(),
                    output: props::redact_passwords(&super::super::install::last_lines(&output, TAIL_LINES), sasl),
                });
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
