//! The messages between the consumer thread and the partition tasks, both ways: what the
//! consumer thread asks of a task ([`TaskMsg`], with the answers it waits for) and what a task
//! tells the consumer thread ([`Control`]). A task never waits for an answer from the consumer
//! thread, so the consumer thread may wait for a task, always bounded, inside a rebalance
//! callback.

use std::sync::mpsc::SyncSender;

use crate::error::{Error, Result};
use crate::partition::{Resume, TopicPartition};
use crate::record::InputRecord;

/// What the consumer thread sends a task.
pub(crate) enum TaskMsg {
    /// A consumed record of one of the task's partitions.
    Record(InputRecord),
    /// New partitions (long-lived tasks only); the reply says where the sink, if any, has
    /// them resume.
    Assign { partitions: Vec<TopicPartition>, reply: SyncSender<Result<Resume>> },
    /// Give these partitions up; reply when their batch is committed (or dropped, if lost).
    Revoke { partitions: Vec<TopicPartition>, lost: bool, reply: SyncSender<RevokeReply> },
    /// The consumer moved these partitions back to their committed offsets (after
    /// [`Control::Rewind`]): their records from here on follow the rewind.
    Rewound { partitions: Vec<TopicPartition> },
    /// Commit what is collected and exit.
    Shutdown,
}

/// A task's answer to a revocation.
pub(crate) struct RevokeReply {
    /// At-least-once: the next offsets acknowledged for the revoked partitions, for the
    /// consumer to commit synchronously before the revocation completes.
    pub acked_offsets: Vec<(TopicPartition, i64)>,
}

/// What a task tells the consumer thread.
pub(crate) enum Control {
    /// At-least-once: these next offsets are acknowledged; store them for librdkafka's
    /// periodic commit.
    CommitOffsets(Vec<(TopicPartition, i64)>),
    /// The task's producer was fenced, or its member left the group: give its partitions up.
    Fenced { task: u64, error: String },
    /// The task dropped a batch (or replaced a failed producer in place): move its
    /// partitions back to the offsets `resume` gives (an exactly-once sink's), the others to
    /// their committed offsets, then send it [`TaskMsg::Rewound`].
    Rewind { task: u64, partitions: Vec<TopicPartition>, resume: Resume },
    /// Stop the pipeline with this error.
    Fatal(Error),
}
