//! Standby replicas: warm copies of the state of partitions another instance owns, so that
//! taking one over restores only the changelog's tail
//! ([`PipelineBuilder::standby_replicas`](crate::PipelineBuilder::standby_replicas)).
//!
//! ```text
//!   follower thread: group description --placement--> partitions to keep warm
//!                    changelogs, read_committed --> Warm { state, next offset per store }
//!   assignment:      restore --activate(p)--> takes Warm p (if any) and continues it from
//!                    its offsets to the end, as from a local checkpoint
//! ```
//! - **Never served before it is the owner's.** A standby is not a state the processor or a
//!   query can see: it becomes one only through the restore of the task that owns the
//!   partition, which first waits out any open transaction of a previous owner (stable
//!   offsets) and reads the changelog to its high watermark, exactly as from a checkpoint.
//!   A standby holds only records of committed transactions, in changelog order, so its
//!   offset is a checkpoint: the state reflects the changelog below it.
//! - **One holder per partition at a time.** [`Standbys::activate`] marks the partition
//!   active under the registry's lock and takes its warm copy; the follower adds a copy only
//!   under that lock and only for a partition that is not active, and drops one it opened
//!   meanwhile. The active mark is a [`Lease`] the partition's state carries: it ends when
//!   the state is dropped (revoked, given up, failed), and the partition may be kept warm
//!   again.
//! - **Dated like a checkpoint.** A copy's offsets carry the last time its read was at the
//!   changelog's end (or, before that, the date of the checkpoint it was opened from, or the
//!   start of its read): `state/checkpoint.rs`'s rule for tombstones then applies unchanged.
//!
//! The follower's locks: it takes the registry's lock only to add, drop or write to a copy,
//! never while it waits for Kafka; a task's `activate` waits at most for one such write.

pub(crate) mod follower;
pub(crate) mod placement;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use super::backend::Checkpoint;
use super::changelog::Handed;
use super::PartitionState;
use crate::config::PipelineConfig;

/// The standby copies of one instance, and the partitions its tasks hold.
pub(crate) struct Standbys {
    cfg: Arc<PipelineConfig>,
    inner: Mutex<Inner>,
    /// This instance's member id in the group, set by the consumer thread on every
    /// assignment: where the instance is in the placement's ring.
    member: Mutex<Option<String>>,
}

#[derive(Default)]
struct Inner {
    /// Partitions whose state a task of this instance holds.
    active: BTreeSet<i32>,
    warm: BTreeMap<i32, Warm>,
}

/// A partition's standby copy: every store's state and where its changelog read is.
pub(crate) struct Warm {
    pub state: PartitionState,
    /// Per store: the state reflects the changelog below this offset.
    pub next: Vec<i64>,
    /// Per store: what dates the offset as a checkpoint (see the module docs).
    pub dated: Vec<SystemTime>,
}

impl Warm {
    /// Store `store`'s offset as a checkpoint.
    pub(crate) fn checkpoint(&self, store: usize) -> Checkpoint {
        Checkpoint { next_offset: self.next[store], written_at: self.dated[store] }
    }
}

/// Marks a partition's state as held by a task of this instance while it lives.
pub(crate) struct Lease {
    standbys: Arc<Standbys>,
    partition: i32,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.standbys.lock().active.remove(&self.partition);
    }
}

impl Standbys {
    pub(crate) fn new(cfg: Arc<PipelineConfig>) -> Arc<Standbys> {
        Arc::new(Standbys { cfg, inner: Mutex::new(Inner::default()), member: Mutex::new(None) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A task is about to restore `partition`: marks it active for as long as the returned
    /// lease lives, and hands over its warm copy if there is one.
    pub(crate) fn activate(self: &Arc<Self>, partition: i32) -> (Lease, Option<Warm>) {
        let mut inner = self.lock();
        inner.active.insert(partition);
        let warm = inner.warm.remove(&partition);
        (Lease { standbys: self.clone(), partition }, warm)
    }

    /// [`activate`](Self::activate) as a restore takes it: the lease as the state's guard,
    /// and the warm copy with its stores' checkpoints.
    pub(crate) fn hand(self: &Arc<Self>, partition: i32) -> Handed {
        let (lease, warm) = self.activate(partition);
        let warm = warm.map(|w| {
            let checkpoints = (0..w.next.len()).map(|s| w.checkpoint(s)).collect();
            (w.state, checkpoints)
        });
        Handed { guard: Some(Box::new(lease)), warm }
    }

    /// Records this instance's member id (the consumer thread, on an assignment).
    pub(crate) fn set_member(&self, id: Option<String>) {
        *self.member.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    fn member(&self) -> Option<String> {
        self.member.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Partitions with a warm copy.
    fn warm_partitions(&self) -> BTreeSet<i32> {
        self.lock().warm.keys().copied().collect()
    }

    /// Whether a task holds `partition`.
    fn is_active(&self, partition: i32) -> bool {
        self.lock().active.contains(&partition)
    }

    /// Adds a copy the follower opened, unless a task took the partition meanwhile (then the
    /// copy is given back, to be dropped, which closes its stores).
    fn add(&self, partition: i32, warm: Warm) -> Option<Warm> {
        let mut inner = self.lock();
        if inner.active.contains(&partition) {
            return Some(warm);
        }
        inner.warm.insert(partition, warm);
        None
    }

    /// Removes the copies of `partitions` (no longer placed here), to be dropped.
    fn remove(&self, partitions: &BTreeSet<i32>) -> Vec<Warm> {
        let mut inner = self.lock();
        partitions.iter().filter_map(|p| inner.warm.remove(p)).collect()
    }

    /// Applies `f` to `partition`'s copy, if it is still here.
    fn with<R>(&self, partition: i32, f: impl FnOnce(&mut Warm) -> R) -> Option<R> {
        self.lock().warm.get_mut(&partition).map(f)
    }

    /// The next offsets of every copy, per store: where the follower's reads continue.
    fn positions(&self) -> BTreeMap<i32, Vec<i64>> {
        self.lock().warm.iter().map(|(p, w)| (*p, w.next.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warm(cfg: &PipelineConfig, p: i32) -> Warm {
        Warm {
            state: PartitionState::new(&cfg.application_id, &cfg.stores, p),
            next: vec![7],
            dated: vec![SystemTime::UNIX_EPOCH],
        }
    }

    fn standbys() -> Arc<Standbys> {
        let mut b = crate::Pipeline::builder().bootstrap_servers("127.0.0.1:1").application_id("a").input_topic("in");
        let _store = b.store::<String, u64>("s");
        let cfg = b.processor(|_, _| Ok(())).build().unwrap().config().clone();
        Standbys::new(Arc::new(cfg))
    }

    #[test]
    fn a_task_takes_the_warm_copy_and_the_follower_cannot_add_one_while_the_task_holds_it() {
        let s = standbys();
        assert!(s.add(3, warm(&s.cfg, 3)).is_none());
        let (lease, taken) = s.activate(3);
        assert_eq!(taken.map(|w| w.next), Some(vec![7]));
        assert!(s.add(3, warm(&s.cfg, 3)).is_some(), "refused while active");
        assert!(s.warm_partitions().is_empty());
        drop(lease);
        assert!(!s.is_active(3));
        assert!(s.add(3, warm(&s.cfg, 3)).is_none(), "warm again once the state is dropped");
        let (_lease, none) = s.activate(4);
        assert!(none.is_none());
        assert_eq!(s.remove(&BTreeSet::from([3, 4])).len(), 1);
    }
}
