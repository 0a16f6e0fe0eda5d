//! Tables: a compacted topic read into memory beside the stream, for stream–table joins
//! (payments enriched from a merchant table): co-partitioned with the stream, or global.
//!
//! A table is declared once on the builder with the topic that holds it and the codec of
//! its values; the builder returns its typed handle. The processor looks records up through
//! the record's [`Context`](crate::Context):
//!
//! ```
//! use kafka_eos::{codec::Json, OutputRecord, Pipeline};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Merchant { name: String, country: String }
//!
//! let mut builder = Pipeline::builder().application_id("enrich").input_topic("payments");
//! let merchants = builder.table::<Merchant, _>("merchants", Json);
//! let out = builder.output_topic("payments-enriched");
//! let builder = builder.processor(move |ctx, rec| {
//!     // Payments are keyed by merchant id, like the table: the same partition holds both.
//!     let country = match ctx.table(&merchants).get(rec.key.as_deref().unwrap_or_default())? {
//!         Some(m) => m.country.clone(),
//!         None => "unknown".to_string(),
//!     };
//!     ctx.emit(OutputRecord::to(&out).key(rec.key.clone().unwrap_or_default()).value(country));
//!     Ok(())
//! });
//! ```
//!
//! # Co-partitioned, and read where the stream is processed
//! Input partition *n* sees table partition *n* only: the stream and the table topic must
//! have the same number of partitions and be keyed the same way (the same key bytes, the
//! default partitioner), so that a stream record and the table row it looks up land in the
//! same partition number. Start-up refuses a table topic whose partition count differs.
//! The table topic must be compacted (or retain forever): its records are the table.
//!
//! ```text
//!   assign input partition n  -> table partition n read from its start to its end,
//!                                read_committed, before the partition's first record
//!   every batch attempt       -> the table updates fetched since, applied first
//!   revoke                    -> the partition's table dropped
//! ```
//! - **What a lookup sees.** A table row as of the start of the batch attempt: every
//!   update committed to the table topic by the time the partition was assigned, and, after
//!   that, whatever the table's reader fetched by the time the attempt began (usually within
//!   the broker's fetch latency, tens of milliseconds). A null value (tombstone) deletes the
//!   key. There is no timestamp synchronisation between the stream and the table (Kafka
//!   Streams' `max.task.idle.ms`): a payment joins the merchant row that is *current*, not
//!   the one that was valid at the payment's event time.
//! - **Exactly-once.** The table is read-only for the pipeline; the join's outputs commit
//!   with the stream record's offsets, so each stream record's effect lands once. A replay
//!   after an abort (or a crash) looks up the table again and may see a newer row than the
//!   aborted attempt did: only the committed attempt is ever visible, with the row it saw.
//! - **Restore.** The table is rebuilt from its topic on every assignment; that costs a
//!   read of the table partition (about 145,000 rows a second on the 2-core test machine, see
//!   `docs/state.md`) and memory for its live rows, decoded once per update. It needs no
//!   changelog: the topic is its own.
//! - **Bad rows.** A row whose value the codec cannot decode is kept as the decode error:
//!   a lookup of that key fails (a processor error, handled by the pipeline's
//!   [`ProcessorErrorPolicy`](crate::ProcessorErrorPolicy)), other keys are unaffected, and
//!   a later good row for the key heals it. A row without a key is skipped with a warning.
//!
//! Each instance holds the tables of the partitions it owns; per partition task (under
//! [`ExactlyOncePerPartition`](crate::Guarantee::ExactlyOncePerPartition)) that is one extra consumer per table,
//! with librdkafka's threads (two plus one per broker).
//!
//! # Global tables
//! A table declared with [`global_table`](crate::PipelineBuilder::global_table) is read
//! whole by every instance: every partition of its topic, any partition count, any keys,
//! so a record looks up any key whatever its own partition. One copy per instance is shared
//! by all its tasks (`table::global`), read by one consumer on a thread of its own
//! (`table::global_reader`).
//!
//! ```text
//!   start            -> every partition read to the high watermark seen at the start,
//!                       read_committed, before the group is joined
//!   while running    -> updates applied by the reader, published as a new version at
//!                       most every 20 ms
//!   every batch attempt -> the latest version taken; the attempt's lookups all see it
//! ```
//! - **What a lookup sees.** The table as of the batch attempt's begin: never a change in
//!   the middle of an attempt. Tombstones delete; bad rows fail their key's lookup with
//!   [`TableError::Decode`], as in a co-partitioned table.
//! - **Replay.** A replayed batch takes the version current at its own begin, which may be
//!   newer than the aborted attempt's: its outputs may differ. Each input record's committed
//!   effect is still one attempt's (exactly-once is about what is committed). Kafka
//!   Streams' `GlobalKTable` has the same caveat.
//! - Partitions added to the table topic while the pipeline runs are read at its next start.

mod def;
mod entry;
pub(crate) mod global;
pub(crate) mod global_reader;
pub(crate) mod reader;
mod rows;

pub(crate) use def::declare;
pub use def::{Table, TableDef};
pub use entry::TableError;
pub use rows::TableRef;
pub(crate) use rows::{PartitionTables, TableViews};

/// Reads the tables of input `partitions` from their topics exactly as an assignment
/// would, then drops them, and returns the number of table records read: what a table read
/// costs, for benchmarks (feature `test-hooks`, outside semver). Blocks until done or
/// `deadline`.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn measure_read(
    cfg: &crate::PipelineConfig,
    partitions: &[i32],
    deadline: std::time::Instant,
) -> crate::Result<u64> {
    let mut tables = std::collections::HashMap::new();
    reader::TableReader::new(cfg)?.bootstrap(cfg, partitions, &mut tables, deadline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Json;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Merchant {
        country: String,
    }

    #[test]
    fn rows_are_upserted_deleted_and_bad_rows_fail_only_their_key() {
        let (def, handle) = declare::<Merchant, _>(0, false, "merchants".into(), Json);
        let mut t = PartitionTables::new(1);
        t.apply(&def, 0, b"m1", Some(br#"{"country":"DE"}"#));
        t.apply(&def, 0, b"m2", Some(br#"{"country":"FR"}"#));
        t.apply(&def, 0, b"m1", Some(br#"{"country":"AT"}"#));
        t.apply(&def, 0, b"m3", Some(b"not json"));
        let view = TableRef::new(&handle, TableViews { partition: Some(&t), global: None });
        assert_eq!(view.get("m1").unwrap().unwrap().country, "AT", "the latest row wins");
        assert_eq!(view.get(b"m2").unwrap().unwrap().country, "FR");
        assert!(view.get("m9").unwrap().is_none());
        let err = view.get("m3").unwrap_err().to_string();
        assert!(err.contains("merchants") && err.contains("m3") && err.contains("json"), "{err}");
        assert_eq!(view.len(), 3);

        t.apply(&def, 0, b"m1", None);
        t.apply(&def, 0, b"m3", Some(br#"{"country":"IT"}"#));
        let view = TableRef::new(&handle, TableViews { partition: Some(&t), global: None });
        assert!(view.get("m1").unwrap().is_none(), "a tombstone deletes the row");
        assert_eq!(view.get("m3").unwrap().unwrap().country, "IT", "a good row heals a bad one");
        assert_eq!(t.sizes(), vec![2]);
    }

    #[test]
    fn a_partition_without_its_table_yet_finds_nothing() {
        let (_, handle) = declare::<Merchant, _>(0, false, "merchants".into(), Json);
        let view = TableRef::new(&handle, TableViews::default());
        assert!(view.get("m1").unwrap().is_none());
        assert!(view.is_empty());
    }
}
