//! The partitions whose committed state this instance offers to queries: a reader per store
//! for each partition a task has restored, withdrawn when the task lets the partition go.
//!
//! A task offers a partition once its stores are restored (never during the restore, whose
//! state is incomplete) and withdraws it when it drops them: on revocation, when a backend
//! failed after a commit, when it gives its partitions up. Each offer names its task, so
//! that a task abandoned on a revocation (it never answered in time) cannot withdraw the
//! offer of the task the partition went to next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::state::backend::CommittedReader;

/// What the registry holds of one store of one partition.
pub(crate) enum Offer {
    /// Not offered: not restored here (yet), or let go.
    Absent,
    /// Offered, but the store's backend has no reader.
    NoReader,
    /// Offered: its committed state.
    Reader(Arc<dyn CommittedReader>),
}

struct Offered {
    task: u64,
    readers: Vec<Option<Arc<dyn CommittedReader>>>,
}

/// The offers of every task of the instance.
#[derive(Default)]
pub(crate) struct Registry {
    partitions: RwLock<HashMap<i32, Offered>>,
    /// Something queries this pipeline's state: tasks then restore a partition as soon as
    /// it is assigned, so that a partition without input answers too.
    wanted: AtomicBool,
}

impl Registry {
    /// Task `task` restored `partition`: its stores' readers, in declaration order.
    pub(crate) fn offer(&self, partition: i32, task: u64, readers: Vec<Option<Arc<dyn CommittedReader>>>) {
        let mut map = self.partitions.write().unwrap_or_else(|p| p.into_inner());
        map.insert(partition, Offered { task, readers });
    }

    /// Task `task` dropped `partition`'s state; another task's offer stays.
    pub(crate) fn withdraw(&self, partition: i32, task: u64) {
        let mut map = self.partitions.write().unwrap_or_else(|p| p.into_inner());
        if map.get(&partition).is_some_and(|o| o.task == task) {
            map.remove(&partition);
        }
    }

    /// Store `store` of `partition`.
    pub(crate) fn reader(&self, partition: i32, store: usize) -> Offer {
        let map = self.partitions.read().unwrap_or_else(|p| p.into_inner());
        match map.get(&partition) {
            None => Offer::Absent,
            Some(o) => match o.readers.get(store).cloned().flatten() {
                Some(reader) => Offer::Reader(reader),
                None => Offer::NoReader,
            },
        }
    }

    /// Withdraws every offer: the pipeline stopped.
    pub(crate) fn clear(&self) {
        self.partitions.write().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Asks the tasks to restore their partitions as soon as they are assigned.
    pub(crate) fn want(&self) {
        self.wanted.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_wanted(&self) -> bool {
        self.wanted.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::backend::{KeyValueBackend, MemoryBackend};

    fn readers(n: usize) -> Vec<Option<Arc<dyn CommittedReader>>> {
        (0..n).map(|_| MemoryBackend::default().committed_reader()).collect()
    }

    #[test]
    fn only_the_offering_task_withdraws_its_offer() {
        let r = Registry::default();
        assert!(matches!(r.reader(3, 0), Offer::Absent));
        r.offer(3, 1, readers(1));
        assert!(matches!(r.reader(3, 0), Offer::Reader(_)));
        r.offer(3, 2, readers(1)); // the partition went to task 2; task 1 was abandoned
        r.withdraw(3, 1);
        assert!(matches!(r.reader(3, 0), Offer::Reader(_)), "task 1 cannot withdraw task 2's offer");
        r.withdraw(3, 2);
        assert!(matches!(r.reader(3, 0), Offer::Absent));
    }

    #[test]
    fn a_store_without_a_reader_is_offered_as_such() {
        let r = Registry::default();
        let mut stores = readers(1);
        stores.push(None);
        r.offer(0, 1, stores);
        assert!(matches!(r.reader(0, 1), Offer::NoReader));
        assert!(matches!(r.reader(0, 2), Offer::NoReader), "an index past the stores: nothing to read");
        r.clear();
        assert!(matches!(r.reader(0, 0), Offer::Absent));
    }
}
