//! A task's partitions that wait for a rewind ([`Rewinds`]): their records are dropped as
//! they come until the consumer thread has moved them back and said so
//! ([`TaskMsg::Rewound`](crate::runtime::protocol::TaskMsg::Rewound)). Two things lead
//! here: a producer replaced in place (`failed.rs`, `Task::recover_in_place`) and a batch
//! dropped by an interruption (`failed.rs`; its kept partitions are moved back after the
//! revocation, `revoke.rs`, `Task::rewind_dropped`).

use std::collections::HashSet;

use crate::partition::TopicPartition;

/// The partitions whose records are dropped as they come, and why: waiting for
/// [`TaskMsg::Rewound`](crate::runtime::protocol::TaskMsg::Rewound) after a producer was
/// replaced in place (their records until then came before the rewind), or whose batch an
/// interruption dropped (a later batch of theirs must never commit past it: revoked, the next
/// owner reads them again from the committed offset; kept, the revocation rewinds them).
#[derive(Default)]
pub(super) struct Rewinds {
    rewinding: HashSet<TopicPartition>,
    /// The partitions of the batches dropped by an interrupt (the one being written and the
    /// one collected behind it, say), moved back once the revocation is answered
    /// (`Task::rewind_dropped`).
    dropped: Vec<TopicPartition>,
}

impl Rewinds {
    /// Whether `tp`'s records are dropped as they come.
    pub(super) fn holds(&self, tp: &TopicPartition) -> bool {
        self.rewinding.contains(tp)
    }

    /// `partitions` wait for the consumer's rewind.
    pub(super) fn wait_for(&mut self, partitions: &[TopicPartition]) {
        self.rewinding.extend(partitions.iter().cloned());
    }

    /// A batch of `partitions` was dropped uncommitted: the records after it are in the
    /// inbox already, and committing one of them would commit past the dropped ones. Added
    /// to the batches dropped before it: a partition of any of them left out would stay held.
    pub(super) fn batch_dropped(&mut self, partitions: Vec<TopicPartition>) {
        for tp in partitions {
            if !self.dropped.contains(&tp) {
                self.dropped.push(tp.clone());
            }
            self.rewinding.insert(tp);
        }
    }

    /// The consumer moved `partitions` back: their records from here on follow the rewind.
    pub(super) fn rewound(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.rewinding.remove(tp);
        }
    }

    /// The partitions of the dropped batches, to move back once a revocation is answered.
    pub(super) fn take_dropped(&mut self) -> Vec<TopicPartition> {
        std::mem::take(&mut self.dropped)
    }

    /// `partitions` were revoked: the next owner reads them from the committed offset.
    pub(super) fn revoked(&mut self, partitions: &[TopicPartition]) {
        self.dropped.retain(|tp| !partitions.contains(tp));
        self.rewound(partitions);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("in".into(), p)
    }

    /// Two batches dropped by one interruption (the one being written, then the one
    /// collected behind it): the kept partitions of both are moved back, whichever came last.
    #[test]
    fn every_batch_dropped_before_the_revocation_is_answered_is_rewound() {
        let mut r = Rewinds::default();
        r.batch_dropped(vec![tp(0), tp(1)]);
        r.batch_dropped(vec![tp(0)]);
        r.revoked(&[tp(0)]);
        assert_eq!(r.take_dropped(), vec![tp(1)], "partition 1 of the first batch is kept, so rewound");
        assert!(r.holds(&tp(1)) && !r.holds(&tp(0)), "kept: held until rewound; revoked: let go");
        assert!(r.take_dropped().is_empty(), "taken once");
    }

    /// Nothing dropped, or everything dropped revoked: nothing to move back.
    #[test]
    fn no_drop_or_every_dropped_partition_revoked_rewinds_nothing() {
        let mut r = Rewinds::default();
        assert!(r.take_dropped().is_empty());
        r.batch_dropped(vec![tp(2)]);
        r.batch_dropped(vec![tp(2), tp(3)]);
        r.revoked(&[tp(2), tp(3)]);
        assert!(r.take_dropped().is_empty());
        assert!(!r.holds(&tp(2)) && !r.holds(&tp(3)));
    }
}
