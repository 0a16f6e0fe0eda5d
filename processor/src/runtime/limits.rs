//! What per-partition mode costs the process, against what the process may open. In
//! [`Guarantee::ExactlyOncePerPartition`] every partition's producer holds
//! a few open files and a thread per broker; past the open-file limit every transaction times
//! out (figures: `docs/scaling.md`). The library never raises the limit (a process-wide
//! setting): it bounds the partition tasks
//! ([`PipelineBuilder::max_partition_tasks`](crate::PipelineBuilder::max_partition_tasks), by
//! default what the limit holds), leaves the partitions past it paused until room frees, and
//! says so at start-up and at each assignment that leaves partitions unserved.

use crate::config::PipelineConfig;
use crate::Guarantee;

/// Open files one per-partition producer needs per broker of the cluster (a connection and
/// wake-up pipes; about 13 per partition on 3 brokers, `docs/scaling.md`).
const FILES_PER_BROKER: u64 = 4;

/// Open files of everything else in the instance: the consumer (it knows the brokers too),
/// logs, the metrics endpoint, the application's own.
const BASE_FILES: u64 = 64;

/// The process's soft limit on open files (`RLIMIT_NOFILE`), where the platform has one.
pub(crate) fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct we own and reads nothing else.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 && rl.rlim_cur != libc::RLIM_INFINITY {
            #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every Unix
            return Some(rl.rlim_cur as u64);
        }
        None
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Open files an instance needs to hold `partitions` per-partition producers on a cluster of
/// `brokers` brokers.
pub(crate) fn files_needed(partitions: usize, brokers: usize) -> u64 {
    BASE_FILES + partitions as u64 * brokers.max(1) as u64 * FILES_PER_BROKER
}

/// How many partitions `limit` open files hold in per-partition mode.
pub(crate) fn partitions_within(limit: u64, brokers: usize) -> u64 {
    limit.saturating_sub(BASE_FILES) / (brokers.max(1) as u64 * FILES_PER_BROKER)
}

/// `Some(message)` when `partitions` per-partition producers would need more open files than
/// `limit`: what to do about it.
pub(crate) fn over_limit(partitions: usize, brokers: usize, limit: Option<u64>) -> Option<String> {
    let limit = limit?;
    let needed = files_needed(partitions, brokers);
    (needed > limit).then(|| {
        format!(
            "per-partition exactly-once: {partitions} partition(s) need about {needed} open files in this \
             instance (a producer per partition, about {FILES_PER_BROKER} files per broker each, {brokers} \
             broker(s)), but the process may open {limit} (RLIMIT_NOFILE), enough for about {} partitions; \
             past it librdkafka cannot connect and every transaction times out. Raise the limit (`ulimit -n`, \
             systemd `LimitNOFILE=`, the container runtime's nofile ulimit), run more instances, or use \
             Guarantee::ExactlyOncePerConsumer",
            partitions_within(limit, brokers)
        )
    })
}

/// Per-partition mode's bound on running partition tasks: the configured one, or as many
/// as the open-file limit holds (at least one); `None` in the other guarantees, or where
/// no limit is known and none is configured.
pub(crate) fn task_bound(cfg: &PipelineConfig, brokers: usize) -> Option<usize> {
    if cfg.guarantee != Guarantee::ExactlyOncePerPartition {
        return None;
    }
    match cfg.max_partition_tasks {
        Some(usize::MAX) => None,
        Some(n) => Some(n),
        None => open_files_limit().map(|l| usize::try_from(partitions_within(l, brokers)).unwrap_or(usize::MAX).max(1)),
    }
}

/// What an assignment that leaves `unserved` partitions without a task says: why, and what
/// to do.
pub(crate) fn unserved_message(unserved: usize, bound: usize, brokers: usize, configured: bool) -> String {
    let why = if configured {
        "PipelineBuilder::max_partition_tasks".to_string()
    } else {
        match open_files_limit() {
            Some(l) => format!("what the open-file limit of {l} (RLIMIT_NOFILE) holds on {brokers} broker(s)"),
            None => "the configured bound".to_string(),
        }
    };
    format!(
        "per-partition exactly-once: {unserved} assigned partition(s) are left unserved (paused, their lag \
         growing) because this instance runs {bound} partition tasks, {why}; each is a producer with about \
         {FILES_PER_BROKER} open files and 2 threads per broker. They start as soon as a revocation makes room. \
         Run more instances, raise the limit (`ulimit -n`, systemd `LimitNOFILE=`, the container runtime's \
         nofile ulimit) or max_partition_tasks, or use Guarantee::ExactlyOncePerConsumer"
    )
}

/// Start-up: warns if this instance, alone in its group, could not hold every input
/// partition's producer.
pub(crate) fn warn_at_start(cfg: &PipelineConfig, input_partitions: usize, brokers: usize) {
    if cfg.guarantee != Guarantee::ExactlyOncePerPartition {
        return;
    }
    match task_bound(cfg, brokers) {
        Some(bound) if bound < input_partitions => tracing::warn!(
            "per-partition exactly-once runs at most {bound} partition tasks in this instance, and the inputs \
             have {input_partitions} partitions: alone in its group, it would leave {} of them unserved",
            input_partitions - bound
        ),
        _ => {
            if let Some(message) = over_limit(input_partitions, brokers, open_files_limit()) {
                tracing::warn!("{message} (if this instance ever owns every input partition)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_named_with_the_partitions_it_holds() {
        // 3 brokers: 12 files per partition.
        assert_eq!(files_needed(1024, 3), 64 + 1024 * 12);
        assert_eq!(partitions_within(1024, 3), 80);
        assert!(over_limit(80, 3, Some(1024)).is_none());
        let m = over_limit(81, 3, Some(1024)).expect("81 partitions need 1,036 files");
        assert!(m.contains("about 80 partitions") && m.contains("LimitNOFILE"), "{m}");
        assert!(over_limit(100_000, 3, None).is_none(), "no limit known, nothing said");
    }

    #[test]
    fn the_limit_read_is_the_one_the_kernel_reports() {
        // /proc/self/limits: "Max open files  <soft>  <hard>  files".
        let Ok(limits) = std::fs::read_to_string("/proc/self/limits") else { return };
        let soft = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next())
            .expect("the kernel lists the open-files limit");
        match soft {
            "unlimited" => assert_eq!(open_files_limit(), None),
            n => assert_eq!(open_files_limit(), Some(n.parse().expect("a number"))),
        }
    }
}
