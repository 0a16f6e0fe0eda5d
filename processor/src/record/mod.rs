//! Records: what a processor receives and what it returns.
//!
//! An [`InputRecord`] is an owned copy of one consumed Kafka record. The runtime keeps the
//! records of the open transaction so that, after an abort, it can replay them without
//! seeking the consumer (the replay starts exactly at the last committed offset, which is
//! what a rewind would do). An [`OutputRecord`] names its topic and, optionally, its
//! partition; without one, Kafka's default partitioner picks by key.
//!
//! Topic names are [`Topic`]s: a shared name (`Arc<str>`) cloned into every record for the
//! price of a reference count. Output topics are declared once with
//! [`PipelineBuilder::output_topic`](crate::PipelineBuilder::output_topic), so producing
//! allocates no topic name per record; an input record's [`topic`](InputRecord::topic) is
//! the runtime's one `Topic` per input topic, so consuming allocates none either.
//!
//! [`InputRecord`], [`OutputRecord`] and [`Topic`] are exported at the crate root; this
//! module holds the headers the runtime writes and reads.

mod header;
pub(crate) mod input;
pub(crate) mod output;
pub(crate) mod topic;

pub use header::{parse_origin, Header, DEAD_LETTER_ATTEMPTS_HEADER, DEAD_LETTER_ERROR_HEADER, ORIGIN_HEADER};

// Their one public path is the crate root.
pub(crate) use input::InputRecord;
pub(crate) use output::OutputRecord;
pub(crate) use topic::Topic;
