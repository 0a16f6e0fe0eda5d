//! Scaling out and in: what a membership change costs the partitions of a consumer group.
//!
//! Two runs share the commit-gap analysis of `gaps`:
//! - [`join_third`] (module `join`): two instances in this process, a third joins, under
//!   each rebalance protocol. Shared by the integration test (`tests/it/scale.rs`, which
//!   asserts the targets) and the benchmark (`benches/rebalance.rs`, which prints the
//!   figures of `docs/scaling.md`).
//! - [`study`]: the scale study of `docs/scaling.md` — instances as OS processes going
//!   through a sequence of sizes (1 → 2 → 4 → 2), with their threads, sockets and memory
//!   (`benches/scale_study.rs`).
//! - [`rolling`]: a rolling restart of every instance, with and without static membership:
//!   partition-seconds paused, partitions moved, records restored (also
//!   `benches/scale_study.rs`).
//! - [`failover`]: an instance SIGKILLed for good, with and without standby replicas: how
//!   long its partitions wait to commit at their new owners (also `benches/scale_study.rs`).
//! - [`visibility`]: an instance SIGKILLed in the middle of its transactions: how long
//!   `read_committed` readers of every output partition wait for what was written before
//!   the kill, per guarantee and takeover (also `benches/scale_study.rs`).
//!
//! # The join run ([`join_third`])
//! Two instances share an input topic while a paced writer puts one record into every
//! partition every 20 ms; once both commit, and `settle` later, a third instance joins;
//! `settle` after its first commit the input stops, the group catches up and the copy is
//! verified exactly once. Every committed transaction is logged with its instant, instance
//! and partitions ([`TransactionEvent::partitions`](kafka_eos::observe::TransactionEvent)).
//! In the window from `settle` before the join to `settle` after the newcomer's first
//! commit:
//! - a partition committed by a single instance, not the newcomer, is **unmoved**: its
//!   longest gap between commits (the window's edges count as commits) is what incremental
//!   rebalancing promises to keep short;
//! - any other partition **moved**: its pause is the gap between its last commit at the
//!   old owner and its first at the new one.

pub mod failover;
mod gaps;
mod input;
mod join;
pub mod rolling;
pub mod study;
pub mod visibility;

pub use join::{join_third, JoinOptions, JoinReport};

use std::path::PathBuf;
use std::time::Duration;

use kafka_eos::Guarantee;

use crate::chaos::InstanceConfig;

/// A group of `kafka-eos chaos instance` processes copying an input topic: what the rolling
/// restart and the failover run.
#[derive(Debug, Clone)]
pub struct Group {
    /// The `kafka-eos` executable the instances run (`kafka-eos chaos instance`).
    pub exe: PathBuf,
    /// The cluster.
    pub bootstrap: String,
    /// Input (and output) partitions.
    pub partitions: i32,
    /// Replication factor of the topics: 3 on a 3-broker cluster.
    pub replication: i32,
    /// Instances in the group.
    pub instances: usize,
    /// The instances' guarantee (its default rebalance protocol).
    pub guarantee: Guarantee,
    /// Consumer `session.timeout.ms`: how long the group keeps a member that stopped
    /// heartbeating (crashed, or stopped under static membership).
    pub session_timeout: Duration,
    /// Where the instances' logs, commit logs and stores go.
    pub log_dir: PathBuf,
}

/// One run of a [`Group`]: its topics, created, and its directory.
pub(crate) struct Prepared {
    pub name: String,
    pub input: String,
    pub output: String,
    pub dir: PathBuf,
    pub client: kafka_eos::admin::Client,
}

impl Group {
    /// Two instances copying under per-partition exactly-once, a 6 s session timeout (the
    /// broker's minimum by default), topics replicated once: what the failover and the
    /// visibility runs start from.
    pub fn pair(exe: PathBuf, bootstrap: &str, partitions: i32, log_dir: &std::path::Path) -> Group {
        Group {
            exe,
            bootstrap: bootstrap.to_string(),
            partitions,
            replication: 1,
            instances: 2,
            guarantee: Guarantee::ExactlyOncePerPartition,
            session_timeout: Duration::from_secs(6),
            log_dir: log_dir.to_path_buf(),
        }
    }

    /// Creates the run's topics (named after `prefix`) and directory.
    pub(crate) fn prepare(&self, prefix: &str) -> Result<Prepared, String> {
        let name = crate::bench::unique_name(prefix);
        let (input, output) = (format!("{name}-in"), format!("{name}-out"));
        let client = kafka_eos::admin::Client::new(&self.bootstrap);
        for t in [&input, &output] {
            client.create_topic(t, self.partitions, self.replication).map_err(|e| format!("creating {t}: {e}"))?;
        }
        let dir = self.log_dir.join(&name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(Prepared { name, input, output, dir, client })
    }

    /// The plain copy of run `run`, logging its commits: the options a run adds to are off.
    pub(crate) fn instance(&self, run: &Prepared) -> InstanceConfig {
        InstanceConfig {
            session_timeout: self.session_timeout,
            commit_log: Some(run.dir.clone()),
            ..InstanceConfig::copy(&self.bootstrap, &run.name, &run.input, &run.output, self.guarantee)
        }
    }

    /// `cfg`'s command line for the fleet.
    pub(crate) fn args(cfg: &InstanceConfig) -> Vec<String> {
        ["chaos".to_string(), "instance".to_string()].into_iter().chain(cfg.to_args()).collect()
    }
}
