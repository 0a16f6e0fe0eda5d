//! The exactly-once sink: rows and input offsets in one transaction, fenced per partition.

use std::collections::HashMap;
use std::ops::Range;

use futures_util::future::try_join_all;
use tokio_postgres::{Client, Statement};

use crate::error::SinkError;
use crate::upsert::{ident, Row, TableSpec, UpsertTable};
use crate::TopicPartition;

/// The default name of the offsets table.
pub const DEFAULT_OFFSETS_TABLE: &str = "kafka_eos_offsets";

/// What [`PostgresSink::claim`] found for a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The partition.
    pub tp: TopicPartition,
    /// The epoch this sink now holds; every later write of the partition is conditional on it.
    pub epoch: i64,
    /// The next offset to consume, as stored with the last committed batch; `None` if no
    /// batch of this group was ever committed for the partition (start where the consumer's
    /// `auto.offset.reset` says).
    pub next_offset: Option<i64>,
}

/// What [`PostgresSink::write_batch`] did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The rows and the offsets committed.
    Applied,
    /// Every partition's stored offset was already at or past the batch's end: the batch
    /// committed before (a retry after [`SinkError::CommitOutcomeUnknown`], or a replay of
    /// records already applied). Nothing was written.
    AlreadyApplied,
}

/// A PostgreSQL sink for one consumer group and one target table (see the crate docs).
///
/// Holds one connection; every method that writes takes `&mut self`, so a sink serves one
/// partition task (or a few, one batch at a time).
pub struct PostgresSink {
    client: Client,
    group: String,
    table: UpsertTable,
    batch: Statement,
    row: Statement,
    claim: Statement,
    fence: Statement,
    state: Statement,
    read: Statement,
    epochs: HashMap<TopicPartition, i64>,
    /// What [`reconnect`](Self::reconnect) needs: the connection string (if the sink
    /// connected itself), the table spec and the offsets table.
    config: Option<String>,
    spec: TableSpec,
    offsets_table: String,
}

impl std::fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSink")
            .field("group", &self.group)
            .field("table", &self.table.name)
            .field("epochs", &self.epochs)
            .finish_non_exhaustive()
    }
}

impl PostgresSink {
    /// Creates the offsets table ([`DEFAULT_OFFSETS_TABLE`]) if it does not exist, describes
    /// the target table and prepares the statements.
    pub async fn new(client: Client, group: impl Into<String>, spec: &TableSpec) -> Result<Self, SinkError> {
        Self::with_offsets_table(client, group, spec, DEFAULT_OFFSETS_TABLE).await
    }

    /// Connects without TLS ([`crate::connect`]) and creates the sink; a sink made this way
    /// can [`reconnect`](Self::reconnect) after the connection broke (a server restart).
    pub async fn connect(config: &str, group: impl Into<String>, spec: &TableSpec) -> Result<Self, SinkError> {
        let mut sink = Self::new(crate::connect(config).await?, group, spec).await?;
        sink.config = Some(config.to_string());
        Ok(sink)
    }

    /// If the connection is closed and the sink has its connection string
    /// ([`connect`](Self::connect)): connects again and prepares the statements anew,
    /// **keeping the epochs it holds** — a reconnect is not a claim, so a sink that was
    /// fenced meanwhile stays fenced. Otherwise does nothing.
    pub async fn reconnect(&mut self) -> Result<(), SinkError> {
        let Some(config) = self.config.clone().filter(|_| self.client.is_closed()) else { return Ok(()) };
        let client = crate::connect(&config).await?;
        let mut fresh = Self::with_offsets_table(client, self.group.clone(), &self.spec, &self.offsets_table).await?;
        fresh.epochs = std::mem::take(&mut self.epochs);
        fresh.config = Some(config);
        tracing::info!(group = %self.group, table = %self.table.name, "reconnected to PostgreSQL");
        *self = fresh;
        Ok(())
    }

    /// Like [`PostgresSink::new`] with another offsets table (optionally schema-qualified;
    /// quoted as one identifier if it contains no dot).
    pub async fn with_offsets_table(
        client: Client,
        group: impl Into<String>,
        spec: &TableSpec,
        offsets_table: &str,
    ) -> Result<Self, SinkError> {
        let offsets = if offsets_table.contains('.') { offsets_table.to_string() } else { ident(offsets_table) };
        create_offsets_table(&client, &offsets).await?;
        let table = UpsertTable::describe(&client, spec).await?;
        let prep = |sql: String, what: &'static str| {
            let client = &client;
            async move {
                client.prepare(&sql).await.map_err(SinkError::pg(format!("preparing the {what} statement: {sql}")))
            }
        };
        let batch = prep(table.batch_sql(), "batch upsert").await?;
        let row = prep(table.row_sql(), "row upsert").await?;
        let claim = prep(
            format!(
                "INSERT INTO {offsets} AS o (group_id, topic, partition, next_offset, epoch) VALUES ($1, $2, $3, NULL, 1) \
                 ON CONFLICT (group_id, topic, partition) DO UPDATE SET epoch = o.epoch + 1, updated_at = now() \
                 RETURNING epoch, next_offset"
            ),
            "claim",
        )
        .await?;
        // $6 is the batch's first offset: see `write_batch` for why the stored offset must be
        // at or before it (or NULL: nothing stored yet).
        let fence = prep(
            format!(
                "UPDATE {offsets} SET next_offset = $4, updated_at = now() \
                 WHERE group_id = $1 AND topic = $2 AND partition = $3 AND epoch = $5 \
                 AND (next_offset IS NULL OR next_offset <= $6)"
            ),
            "offset commit",
        )
        .await?;
        let state = prep(
            format!("SELECT epoch, next_offset FROM {offsets} WHERE group_id = $1 AND topic = $2 AND partition = $3"),
            "offset state",
        )
        .await?;
        let read = prep(
            format!("SELECT next_offset FROM {offsets} WHERE group_id = $1 AND topic = $2 AND partition = $3"),
            "offset read",
        )
        .await?;
        Ok(PostgresSink {
            client,
            group: group.into(),
            table,
            batch,
            row,
            claim,
            fence,
            state,
            read,
            epochs: HashMap::new(),
            config: None,
            spec: spec.clone(),
            offsets_table: offsets_table.to_string(),
        })
    }

    /// The described target table.
    pub fn table(&self) -> &UpsertTable {
        &self.table
    }

    /// The connection, for the application's own queries.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The epoch this sink holds for `tp`, if it claimed it.
    pub fn epoch(&self, tp: &TopicPartition) -> Option<i64> {
        self.epochs.get(tp).copied()
    }

    /// **On assignment:** takes ownership of `partitions` and returns, for each, where to
    /// resume.
    ///
    /// # Details
    /// In one transaction, each partition's row in the offsets table is created (epoch 1,
    /// no offset) or has its epoch incremented; the new epoch and the stored next offset
    /// are returned. Any other sink that claimed the partition before is fenced from then
    /// on: its writes are conditional on the epoch it holds. The runtime seeks each
    /// partition to `next_offset` (when `Some`) before fetching from it.
    ///
    /// A writer still in the middle of a batch holds the partition's row lock; the claim
    /// waits for that transaction to end, so the offsets it returns are final.
    pub async fn claim(&mut self, partitions: &[TopicPartition]) -> Result<Vec<Claim>, SinkError> {
        let mut sorted: Vec<&TopicPartition> = partitions.iter().collect();
        // One lock order for every transaction that touches several offset rows.
        sorted.sort();
        sorted.dedup();
        let tx = self.client.transaction().await.map_err(SinkError::pg("beginning the claim"))?;
        let rows = try_join_all(sorted.iter().map(|tp| {
            let (tx, stmt, group) = (&tx, &self.claim, &self.group);
            async move { tx.query_one(stmt, &[group, &tp.topic, &tp.partition]).await }
        }))
        .await
        .map_err(SinkError::pg("claiming partitions"))?;
        commit(tx).await?;
        let claims: Vec<Claim> = sorted
            .into_iter()
            .zip(rows)
            .map(|(tp, r)| Claim { tp: tp.clone(), epoch: r.get(0), next_offset: r.get(1) })
            .collect();
        for c in &claims {
            self.epochs.insert(c.tp.clone(), c.epoch);
        }
        Ok(claims)
    }

    /// **On revocation:** forgets the epochs of `partitions`. Nothing to write: a batch not
    /// committed yet is simply not committed, and the next owner's claim fences this sink.
    pub fn release(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.epochs.remove(tp);
        }
    }

    /// The stored next offset of each partition (`None`: nothing committed), read-only. A
    /// batch committed exactly when the stored offsets equal its next offsets; to resolve
    /// [`SinkError::CommitOutcomeUnknown`], writing the same batch again is enough (it
    /// returns [`Written::AlreadyApplied`] if the first attempt committed).
    pub async fn stored_offsets(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Option<i64>)>, SinkError> {
        let rows = try_join_all(partitions.iter().map(|tp| async move {
            self.client.query_opt(&self.read, &[&self.group, &tp.topic, &tp.partition]).await
        }))
        .await
        .map_err(SinkError::pg("reading stored offsets"))?;
        Ok(partitions.iter().cloned().zip(rows.into_iter().map(|r| r.and_then(|r| r.get(0)))).collect())
    }

    /// **Per batch, exactly-once:** upserts `rows` and stores the batch's offsets in one
    /// transaction, conditional on this sink's epochs. `offsets` holds, per partition, the
    /// batch's input range `first..next`: its first input offset, and the *next* offset to
    /// consume (the last input offset + 1), which is what is stored.
    ///
    /// The rows of a range are applied at most once: the stored offset must be at or before
    /// `first` (or nothing stored yet) for the batch to be written. If every partition's
    /// stored offset is already at or past its `next`, the batch committed before (a retry
    /// after [`SinkError::CommitOutcomeUnknown`]): nothing is written and
    /// [`Written::AlreadyApplied`] returned. So an upsert that is not idempotent (one that
    /// adds) is exact too.
    ///
    /// # Errors
    /// - [`SinkError::Fenced`]: a partition was claimed by another sink since (checked
    ///   before the offsets).
    /// - [`SinkError::Overlap`]: a stored offset lies past a partition's `first` and the
    ///   batch is not one already applied: the stored offset is inside the range, or another
    ///   partition of the batch is not written yet. Writing it would apply some records
    ///   twice.
    ///
    /// In each case the transaction is rolled back: neither rows nor offsets are written.
    ///
    /// # Details
    /// Pipelined on the connection: `BEGIN`; one `UPDATE` of the offsets row per partition
    /// (`WHERE … AND epoch = <ours> AND (next_offset IS NULL OR next_offset <= <first>)`);
    /// the batch upsert; `COMMIT`, or, if an `UPDATE` matched no row, a read of that row to
    /// tell which case it is, and `ROLLBACK`. The offsets `UPDATE` runs first so that it
    /// takes the partition's row lock before any target row: a concurrent
    /// [`claim`](Self::claim) either waits for this commit (and then reads its offsets) or
    /// commits first (and this `UPDATE` then sees the new epoch and matches nothing).
    ///
    /// A stored offset *before* `first` is accepted: Kafka offsets have holes (transaction
    /// markers, records of aborted transactions, compaction, retention), so a partition's
    /// next batch often starts past the offset stored after the last one.
    ///
    /// Rows with the same key within a batch: the last one wins.
    pub async fn write_batch(
        &mut self,
        rows: &[Row],
        offsets: &[(TopicPartition, Range<i64>)],
    ) -> Result<Written, SinkError> {
        self.write_rows(rows.iter(), offsets).await
    }

    /// [`write_batch`](Self::write_batch) over borrowed rows (the runtime's batch holds them
    /// with their input records).
    pub(crate) async fn write_rows<'r>(
        &mut self,
        rows: impl ExactSizeIterator<Item = &'r Row>,
        offsets: &[(TopicPartition, Range<i64>)],
    ) -> Result<Written, SinkError> {
        if offsets.is_empty() {
            return Err(SinkError::InvalidBatch("an exactly-once batch must carry its input offsets".into()));
        }
        if let Some((tp, range)) = offsets.iter().find(|(_, r)| r.start > r.end) {
            return Err(SinkError::InvalidBatch(format!("{tp}: the input range {range:?} ends before it starts")));
        }
        let mut offsets: Vec<&(TopicPartition, Range<i64>)> = offsets.iter().collect();
        offsets.sort_by(|a, b| a.0.cmp(&b.0));
        let mut epochs = Vec::with_capacity(offsets.len());
        for (tp, _) in &offsets {
            epochs.push(self.epochs.get(tp).copied().ok_or_else(|| SinkError::NotClaimed(tp.clone()))?);
        }
        let n_rows = rows.len();
        let arrays = self.table.arrays(rows)?;
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            arrays.iter().map(|a| a as &(dyn tokio_postgres::types::ToSql + Sync)).collect();

        let group = &self.group;
        let tx = self.client.transaction().await.map_err(SinkError::pg("beginning the batch"))?;
        let fences =
            try_join_all(
                offsets.iter().zip(&epochs).map(|((tp, range), epoch)| {
                    let (tx, stmt) = (&tx, &self.fence);
                    async move {
                        tx.execute(stmt, &[group, &tp.topic, &tp.partition, &range.end, epoch, &range.start]).await
                    }
                }),
            );
        let upsert = async {
            if n_rows == 0 {
                Ok(0)
            } else {
                tx.execute(&self.batch, &params).await
            }
        };
        let (matched, _) = futures_util::future::try_join(fences, upsert)
            .await
            .map_err(SinkError::pg(format!("writing a batch of {n_rows} rows into {}", self.table.name)))?;
        if matched.iter().all(|&n| n > 0) {
            return commit(tx).await.map(|()| Written::Applied);
        }
        // Some offsets row did not match: read why, then roll back (the rows were sent).
        let mut found = Vec::with_capacity(offsets.len());
        for ((tp, _), n) in offsets.iter().zip(&matched) {
            if *n > 0 {
                found.push(Found::Matched);
                continue;
            }
            let row = tx
                .query_opt(&self.state, &[group, &tp.topic, &tp.partition])
                .await
                .map_err(SinkError::pg(format!("reading the stored offset of {tp}")))?;
            found.push(row.map_or(Found::Missing, |r| Found::Row { epoch: r.get(0), stored: r.get(1) }));
        }
        let _ = tx.rollback().await;
        let outcome = classify(&offsets, &epochs, &found);
        if matches!(outcome, Ok(Written::AlreadyApplied)) {
            tracing::info!(group = %self.group, table = %self.table.name, ?offsets, "batch already applied: not written again");
        }
        outcome
    }

    /// **At-least-once baseline:** the same batch upsert in its own implicit transaction,
    /// no offsets. Replays are harmless (upserts), but where to resume is up to Kafka's
    /// committed offsets, which commit separately.
    pub async fn upsert(&self, rows: &[Row]) -> Result<u64, SinkError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let arrays = self.table.arrays(rows.iter())?;
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            arrays.iter().map(|a| a as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
        self.client
            .execute(&self.batch, &params)
            .await
            .map_err(SinkError::pg(format!("upserting into {}", self.table.name)))
    }

    /// **At-least-once baseline, row by row:** one autocommitted `INSERT … ON CONFLICT` per
    /// row, awaited in turn — the loop applications write by hand.
    pub async fn upsert_each(&self, rows: &[Row]) -> Result<u64, SinkError> {
        let mut n = 0;
        for (i, row) in rows.iter().enumerate() {
            if row.0.len() != self.table.columns.len() {
                return Err(SinkError::InvalidBatch(format!("row {i} has {} values", row.0.len())));
            }
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                row.0.iter().map(|v| &**v as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
            n += self
                .client
                .execute(&self.row, &params)
                .await
                .map_err(SinkError::pg(format!("upserting into {}", self.table.name)))?;
        }
        Ok(n)
    }
}

/// What a batch's offsets `UPDATE` found for one partition.
#[derive(Debug, Clone, Copy)]
enum Found {
    /// It matched: the batch follows the stored offset.
    Matched,
    /// It matched nothing, and there is no offsets row.
    Missing,
    /// It matched nothing; the row holds this epoch and stored next offset.
    Row { epoch: i64, stored: Option<i64> },
}

/// Why a batch whose offsets `UPDATE` matched nothing for some partition was not written.
fn classify(offsets: &[&(TopicPartition, Range<i64>)], epochs: &[i64], found: &[Found]) -> Result<Written, SinkError> {
    // Fencing first: a sink that lost a partition must stop, whatever the offsets say. A row
    // in our epoch with nothing stored would have matched: it changed between the two
    // statements (a claim, or an edit of the table), so the partition is claimed again too.
    for (((tp, _), &ours), f) in offsets.iter().zip(epochs).zip(found) {
        match *f {
            Found::Missing => return Err(SinkError::Fenced { tp: tp.clone(), ours, current: None }),
            Found::Row { epoch, stored } if epoch != ours || stored.is_none() => {
                return Err(SinkError::Fenced { tp: tp.clone(), ours, current: Some(epoch) })
            }
            _ => {}
        }
    }
    // Our epoch everywhere, and each unmatched partition has an offset stored past its
    // batch's first. Already applied only if every partition's is at or past the batch's
    // end. A partition whose `UPDATE` matched is not written yet, and the batch's rows cannot
    // be split by partition: such a mix is refused like an offset inside a range.
    let mut applied_everywhere = true;
    let mut applied = None;
    for ((tp, range), f) in offsets.iter().zip(found) {
        let Found::Row { stored: Some(s), .. } = *f else {
            applied_everywhere = false;
            continue;
        };
        let overlap = || SinkError::Overlap { tp: tp.clone(), stored: s, first: range.start, next: range.end };
        if s < range.end {
            return Err(overlap());
        }
        applied.get_or_insert_with(overlap);
    }
    match applied {
        Some(overlap) if !applied_everywhere => Err(overlap),
        _ => Ok(Written::AlreadyApplied),
    }
}

/// COMMIT, telling a refused commit (the server answered: rolled back) from one whose
/// outcome is unknown (the connection broke).
async fn commit(tx: tokio_postgres::Transaction<'_>) -> Result<(), SinkError> {
    match tx.commit().await {
        Ok(()) => Ok(()),
        Err(e) if e.as_db_error().is_some() => Err(SinkError::Postgres { context: "COMMIT refused".into(), source: e }),
        Err(e) => Err(SinkError::CommitOutcomeUnknown(e)),
    }
}

async fn create_offsets_table(client: &Client, offsets: &str) -> Result<(), SinkError> {
    let ddl = format!(
        "CREATE TABLE IF NOT EXISTS {offsets} (
            group_id    text        NOT NULL,
            topic       text        NOT NULL,
            partition   integer     NOT NULL,
            next_offset bigint,
            epoch       bigint      NOT NULL,
            updated_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (group_id, topic, partition))"
    );
    let failed = |e| SinkError::Postgres { context: format!("creating the offsets table {offsets}"), source: e };
    match client.batch_execute(&ddl).await {
        Ok(()) => Ok(()),
        // Sinks creating it at once (an instance's workers connect together): one wins, and
        // the others fail, after it committed, with a duplicate in the catalog (23505), the
        // relation (42P07) or its row type (42710), by timing — 42710 stopped a CI test run.
        // The table exists then; checked, so that another object of the name does not pass.
        Err(e) if matches!(e.code().map(|c| c.code()), Some("23505" | "42P07" | "42710")) => {
            let exists = client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&offsets])
                .await
                .map_err(SinkError::pg(format!("looking up the offsets table {offsets}")))?;
            if exists.get::<_, bool>(0) {
                Ok(())
            } else {
                Err(failed(e))
            }
        }
        Err(e) => Err(failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("in", p)
    }

    fn check(offsets: &[(TopicPartition, Range<i64>)], found: &[Found]) -> Result<Written, SinkError> {
        let offsets: Vec<_> = offsets.iter().collect();
        classify(&offsets, &vec![3; offsets.len()], found)
    }

    fn row(epoch: i64, stored: i64) -> Found {
        Found::Row { epoch, stored: Some(stored) }
    }

    #[test]
    fn a_batch_whose_stored_offsets_are_all_at_or_past_its_end_is_already_applied() {
        let offsets = [(tp(0), 10..20), (tp(1), 5..5)];
        assert_eq!(check(&offsets, &[row(3, 20), row(3, 7)]).unwrap(), Written::AlreadyApplied);
    }

    #[test]
    fn fencing_is_decided_before_the_offsets() {
        let offsets = [(tp(0), 10..20), (tp(1), 10..20)];
        let err = check(&offsets, &[row(3, 20), row(4, 20)]).unwrap_err();
        assert!(matches!(err, SinkError::Fenced { ours: 3, current: Some(4), .. }), "{err}");
        let err = check(&offsets, &[row(3, 15), Found::Missing]).unwrap_err();
        assert!(matches!(err, SinkError::Fenced { current: None, .. }), "{err}");
    }

    #[test]
    fn a_stored_offset_inside_the_range_is_an_overlap() {
        let err = check(&[(tp(0), 10..20)], &[row(3, 15)]).unwrap_err();
        assert!(matches!(err, SinkError::Overlap { stored: 15, first: 10, next: 20, .. }), "{err}");
    }

    #[test]
    fn a_batch_with_one_partition_applied_and_one_not_is_an_overlap() {
        // tp(0)'s UPDATE matched (not written yet), tp(1)'s stored offset is at its end.
        let err = check(&[(tp(0), 10..20), (tp(1), 0..5)], &[Found::Matched, row(3, 5)]).unwrap_err();
        assert!(matches!(&err, SinkError::Overlap { tp: t, stored: 5, .. } if *t == tp(1)), "{err}");
    }
}
