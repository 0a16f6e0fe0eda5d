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
    /// The partitions of the last batch dropped by an interrupt, moved back once the
    /// revocation is answered (`Task::rewind_dropped`).
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
    /// inbox already, and committing one of them would commit past the dropped ones.
    pub(super) fn batch_dropped(&mut self, partitions: Vec<TopicPartition>) {
        self.rewinding.extend(partitions.iter().cloned());
        self.dropped = partitions;
    }

    /// The consumer moved `partitions` back: their records from here on follow the rewind.
    pub(super) fn rewound(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.rewinding.remove(tp);
        }
    }

    /// The partitions of the last dropped batch, to move back once a revocation is answered.
    pub(super) fn take_dropped(&mut self) -> Vec<TopicPartition> {
        std::mem::take(&mut self.dropped)
    }

    /// `partitions` were revoked: the next owner reads them from the committed offset.
    pub(super) fn revoked(&mut self, partitions: &[TopicPartition]) {
        self.dropped.retain(|tp| !partitions.contains(tp));
        self.rewound(partitions);
    }
}
