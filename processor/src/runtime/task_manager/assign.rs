//! Assignment: the tasks of newly assigned partitions are started (per-partition mode: one
//! per partition, or per partition *n* of co-partitioned inputs, each initialising its own
//! producer, which fences the previous owner) or the partitions are handed to the long-lived
//! workers. A partition whose task cannot start stays assigned, paused, and is retried from
//! the consumer thread's loop ([`recovery`](super::recovery)).

use std::collections::BTreeMap;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use super::start::{
    by_task, give_up_start, retry_later, send_bounded, spawn_partition_task, wait_ready, Ready, Unstarted,
};
use super::TaskManager;
use crate::config::Guarantee;
use crate::error::Error;
use crate::partition::{Resume, TopicPartition};
use crate::runtime::limits;
use crate::runtime::protocol::TaskMsg;

impl TaskManager {
    /// Starts the tasks of newly assigned `partitions` (per-partition mode) or hands them to
    /// the workers; adds to `resume` where an exactly-once sink has them start. Every wait on
    /// a task is bounded by the task timeout, and no task waits for this thread.
    pub(crate) fn on_assign(&self, partitions: Vec<TopicPartition>, resume: &mut Resume) {
        let shared = &self.shared;
        shared.shutdown.stats().rebalances.inc();
        crate::metrics::rebalance(&shared.cfg.application_id);
        tracing::info!(?partitions, "partitions assigned");
        shared.shutdown.health_state().assigned(&partitions);
        let deadline = Instant::now() + shared.cfg.task_timeout;
        if shared.cfg.guarantee == Guarantee::ExactlyOncePerPartition {
            let groups = by_task(&shared.cfg, partitions);
            // A producer per partition: say so before the process runs out of open files
            // (a bound above the limit, or none where the limit is unknown).
            let (producers, mut room) = {
                let reg = self.registry();
                let wanted = reg.tasks.len() + reg.unstarted.len() + groups.len();
                (
                    wanted.min(shared.max_tasks.unwrap_or(usize::MAX)),
                    shared.max_tasks.map(|b| b.saturating_sub(reg.tasks.len())),
                )
            };
            if let Some(m) = limits::over_limit(producers, shared.brokers, limits::open_files_limit()) {
                tracing::error!("{m}");
            }
            let mut pending = Vec::new();
            let mut unserved = Vec::new();
            for group in groups {
                // Co-partitioned inputs: partition n of another input may be running
                // already (an incremental protocol assigns in steps): its task takes it.
                let sharing = self.registry().task_sharing(&shared.cfg, &group[0]);
                if let Some(id) = sharing {
                    if let Err(e) = self.hand_over(id, group, deadline, resume) {
                        return self.set_fatal(e);
                    }
                    continue;
                }
                // Past the task bound the partition stays assigned but unserved (paused
                // once the assignment is applied), until a revocation makes room.
                if room == Some(0) {
                    unserved.extend(group);
                    continue;
                }
                if let Some(r) = room.as_mut() {
                    *r -= 1;
                }
                let id = self.registry().next_id();
                match spawn_partition_task(shared, id, &group) {
                    Ok((handle, ready)) => pending.push((id, group, handle, ready)),
                    Err(e) => return self.set_fatal(e),
                }
            }
            for (id, group, handle, ready) in pending {
                match wait_ready(ready, deadline) {
                    Ok(started) => {
                        resume.extend(started);
                        let mut reg = self.registry();
                        for tp in group {
                            reg.routes.insert(tp, id);
                        }
                        reg.tasks.insert(id, handle);
                    }
                    Err(e) if retry_later(&e) => {
                        // One partition's trouble must not stop the others: paused once
                        // assigned, retried from the loop (`start_unstarted`).
                        tracing::warn!(partitions = ?group, error = %e, "the partition's producer cannot be initialised; retrying it while the others run");
                        let previous = Some(give_up_start(handle));
                        let mut reg = self.registry();
                        for tp in group {
                            self.note_unserved(&tp, &e.to_string());
                            reg.unstarted.insert(tp, Unstarted::new(e.to_string()).after(previous.clone()));
                        }
                    }
                    Err(e) => self.set_fatal(e),
                }
            }
            if let (false, Some(bound)) = (unserved.is_empty(), shared.max_tasks) {
                let configured = shared.cfg.max_partition_tasks.is_some();
                tracing::error!("{}", limits::unserved_message(unserved.len(), bound, shared.brokers, configured));
                let mut reg = self.registry();
                for tp in unserved {
                    self.leave_waiting(&mut reg, tp, bound);
                }
            }
        } else {
            // Each new partition goes to the worker with the fewest, and stays there while
            // assigned: under incremental rebalancing the others keep theirs. Co-partitioned
            // inputs' partition n go to one worker together (they share its state).
            let mut reg = self.registry();
            let mut load: BTreeMap<u64, usize> = reg.tasks.keys().map(|id| (*id, 0)).collect();
            if load.is_empty() {
                drop(reg);
                return self.set_fatal(Error::Internal("the instance's workers are missing".into()));
            }
            for id in reg.routes.values() {
                *load.entry(*id).or_default() += 1;
            }
            let mut shares: BTreeMap<u64, Vec<TopicPartition>> = BTreeMap::new();
            for group in by_task(&shared.cfg, partitions) {
                let id = match reg.task_sharing(&shared.cfg, &group[0]) {
                    Some(id) => id,
                    None => *load.iter().min_by_key(|(id, n)| (**n, **id)).expect("not empty").0,
                };
                *load.entry(id).or_default() += group.len();
                shares.entry(id).or_default().extend(group);
            }
            let mut replies = Vec::new();
            for (id, share) in shares {
                let (reply, claimed) = sync_channel(1);
                let msg = TaskMsg::Assign { partitions: share.clone(), reply };
                let Some(task) = reg.tasks.get(&id).filter(|h| send_bounded(&h.tx, msg, deadline)) else {
                    drop(reg);
                    return self.set_fatal(Error::Internal("a worker did not accept its assignment".into()));
                };
                replies.push(Ready::new(claimed, task));
                for tp in share {
                    reg.routes.insert(tp, id);
                }
            }
            drop(reg);
            // Only a sink can move where partitions start; without one the workers are not
            // waited for (they never wait for this thread, so waiting would be safe too).
            if shared.cfg.sink.is_some() {
                for claimed in replies {
                    match wait_ready(claimed, deadline) {
                        Ok(claimed) => resume.extend(claimed),
                        Err(e) => self.set_fatal(e),
                    }
                }
            }
        }
    }

    /// Hands `partitions` to the running per-partition task `id`, which owns their
    /// co-partitioned siblings already, and waits for its claim.
    fn hand_over(
        &self,
        id: u64,
        partitions: Vec<TopicPartition>,
        deadline: Instant,
        resume: &mut Resume,
    ) -> Result<(), Error> {
        let (reply, claimed) = sync_channel(1);
        let ready = {
            let mut reg = self.registry();
            let msg = TaskMsg::Assign { partitions: partitions.clone(), reply };
            let Some(task) = reg.tasks.get(&id).filter(|h| send_bounded(&h.tx, msg, deadline)) else {
                return Err(Error::Internal(format!("the task of {partitions:?} did not accept them")));
            };
            let ready = Ready::new(claimed, task);
            for tp in partitions {
                reg.routes.insert(tp, id);
            }
            ready
        };
        resume.extend(wait_ready(ready, deadline)?);
        Ok(())
    }
}
