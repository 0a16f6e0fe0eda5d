//! PostgreSQL, exactly-once: idempotent replay, rows and offsets atomic, zombies fenced.

use std::sync::OnceLock;
use std::time::Duration;

use kafka_eos::sink::{PartitionRange, Sink, SinkBatch, SinkRow};
use kafka_eos::Topic;
use kafka_eos_postgres::{connect, row, PostgresSink, Row, SinkError, TableSpec, TopicPartition, Written};
use kafka_eos_testkit::postgres::{Postgres, PostgresConfig};

use crate::common::unique;

/// The binary's shared server, started on first use.
async fn server() -> &'static Postgres {
    static PG: OnceLock<Postgres> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        PG.get_or_init(|| {
            Postgres::start(PostgresConfig::default()).unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"))
        })
    })
    .await
    .unwrap()
}

const LEDGER: &str = "
    CREATE TABLE ledger (
        payment_id text PRIMARY KEY,
        merchant   text   NOT NULL,
        cents      bigint NOT NULL CHECK (cents >= 0));
    -- Rows whose id starts with 'slow' take a second to insert: a window to act in.
    CREATE FUNCTION slow_down() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.payment_id LIKE 'slow%' THEN PERFORM pg_sleep(1); END IF; RETURN NEW; END $$;
    CREATE TRIGGER slow BEFORE INSERT ON ledger FOR EACH ROW EXECUTE FUNCTION slow_down();";

/// Per merchant, a total that the sink's upsert adds to: a trigger turns the upsert's
/// `SET total = EXCLUDED.total` into `SET total = totals.total + EXCLUDED.total`, the way an
/// application makes a counter out of a replacing upsert.
const TOTALS: &str = "
    CREATE TABLE totals (merchant text PRIMARY KEY, total bigint NOT NULL);
    CREATE FUNCTION add_to_total() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.total := OLD.total + NEW.total; RETURN NEW; END $$;
    CREATE TRIGGER additive BEFORE UPDATE ON totals FOR EACH ROW EXECUTE FUNCTION add_to_total();";

/// A fresh database with the ledger table on `pg`; returns its connection string.
async fn ledger_db(pg: &'static Postgres) -> String {
    database(pg, "ledger", LEDGER).await
}

/// A fresh database named after `prefix`, set up by `schema`; returns its connection string.
async fn database(pg: &'static Postgres, prefix: &str, schema: &'static str) -> String {
    let db = unique(prefix).replace('-', "_");
    tokio::task::spawn_blocking(move || {
        pg.create_database(&db).expect("create database");
        pg.psql(&db, schema).expect("create the tables");
        pg.connection_string(&db)
    })
    .await
    .unwrap()
}

fn db_name(conn: &str) -> String {
    conn.rsplit("dbname=").next().unwrap().split(' ').next().unwrap().to_string()
}

async fn sink(conn: &str, group: &str) -> PostgresSink {
    let client = connect(conn).await.expect("connect");
    PostgresSink::new(client, group, &TableSpec::new("ledger", &["payment_id"])).await.expect("sink")
}

fn payment(i: i64) -> Row {
    row![format!("p-{i}"), format!("m-{}", i % 7), i * 10]
}

fn payments(range: std::ops::Range<i64>) -> Vec<Row> {
    range.map(payment).collect()
}

/// Rows and a checksum of the table, and the stored offset, as psql sees them.
async fn snapshot(pg: &'static Postgres, conn: &str, group: &str) -> (String, String) {
    let db = db_name(conn);
    let group = group.to_string();
    tokio::task::spawn_blocking(move || {
        let rows = pg
            .psql(&db, "SELECT count(*) || ' ' || coalesce(md5(string_agg(payment_id || merchant || cents, ',' ORDER BY payment_id)), '') FROM ledger")
            .unwrap();
        let offsets = pg
            .psql(&db, &format!("SELECT coalesce(string_agg(topic || '/' || partition || '=' || coalesce(next_offset::text, 'null') || '@' || epoch, ','), '') FROM kafka_eos_offsets WHERE group_id = '{group}'"))
            .unwrap();
        (rows, offsets)
    })
    .await
    .unwrap()
}

fn tp() -> TopicPartition {
    TopicPartition::new("payments", 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_replaying_a_batch_changes_nothing() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    let mut s = sink(&conn, "close").await;
    let claims = s.claim(&[tp()]).await.unwrap();
    assert_eq!((claims[0].epoch, claims[0].next_offset), (1, None), "a new partition starts with no offset");

    s.write_batch(&payments(0..100), &[(tp(), 0..100)]).await.unwrap();
    let first = snapshot(pg, &conn, "close").await;
    assert!(first.0.starts_with("100 "), "{first:?}");
    assert_eq!(first.1, "payments/0=100@1");

    // The same owner retries the batch (e.g. after CommitOutcomeUnknown).
    assert_eq!(s.write_batch(&payments(0..100), &[(tp(), 0..100)]).await.unwrap(), Written::AlreadyApplied);
    assert_eq!(snapshot(pg, &conn, "close").await, first);

    // A restarted instance resumes from the stored offset; a replay of records the last
    // batch held (its consumer started earlier) is already applied.
    let mut s2 = sink(&conn, "close").await;
    let claims = s2.claim(&[tp()]).await.unwrap();
    assert_eq!((claims[0].epoch, claims[0].next_offset), (2, Some(100)));
    assert_eq!(s2.write_batch(&payments(50..100), &[(tp(), 50..100)]).await.unwrap(), Written::AlreadyApplied);
    let after = snapshot(pg, &conn, "close").await;
    assert_eq!(after.0, first.0);
    assert_eq!(after.1, "payments/0=100@2");
    assert_eq!(
        s2.stored_offsets(&[tp(), TopicPartition::new("payments", 9)]).await.unwrap()[..],
        [(tp(), Some(100)), (TopicPartition::new("payments", 9), None)]
    );

    // Two rows with one key in a batch: the last one wins.
    s2.write_batch(
        &[row!["p-1".to_string(), "x".to_string(), 1_i64], row!["p-1".to_string(), "y".to_string(), 2_i64]],
        &[(tp(), 100..101)],
    )
    .await
    .unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let db = db_name(&conn);
        pg.psql(&db, "SELECT merchant || cents FROM ledger WHERE payment_id = 'p-1'").unwrap()
    })
    .await
    .unwrap();
    assert_eq!(got, "y2");
}

/// The batch of input records `offsets` of payments/0 as the runtime hands it to the sink:
/// record `i` adds `i` to merchant `m-<i % 10>` (one row per merchant in a batch of ten).
fn totals_batch(offsets: std::ops::Range<i64>) -> SinkBatch<Row> {
    let partitions = vec![PartitionRange {
        topic: Topic::new("payments"),
        partition: 0,
        first_offset: offsets.start,
        next_offset: offsets.end,
    }];
    let rows = offsets
        .map(|i| SinkRow {
            topic: Topic::new("payments"),
            partition: 0,
            offset: i,
            row: row![format!("m-{}", i % 10), i],
        })
        .collect();
    SinkBatch { partitions, rows }
}

/// The sum of the totals and the stored offset, as psql sees them.
async fn totals(pg: &'static Postgres, conn: &str) -> String {
    let db = db_name(conn);
    tokio::task::spawn_blocking(move || {
        pg.psql(&db, "SELECT (SELECT sum(total) FROM totals) || ' @ ' || (SELECT next_offset FROM kafka_eos_offsets)")
            .unwrap()
    })
    .await
    .unwrap()
}

/// A batch whose COMMIT committed but whose answer was lost (the connection dropped during
/// COMMIT) is written again with the same rows by the runtime. With an upsert that adds, a
/// second application would count the batch twice: the sink must recognise it as already
/// applied (the stored offset is the batch's end) and report success without writing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_retried_batch_that_committed_is_not_applied_again() {
    let pg = server().await;
    let conn = database(pg, "totals", TOTALS).await;
    let client = connect(&conn).await.expect("connect");
    let mut s = PostgresSink::new(client, "close", &TableSpec::new("totals", &["merchant"])).await.expect("sink");
    assert_eq!(Sink::on_assigned(&mut s, &[(Topic::new("payments"), 0)]).await.unwrap(), [None]);
    // A partition with nothing stored is anchored at its first batch's first offset.
    Sink::write(&mut s, &totals_batch(10..10)).await.expect("anchor");

    let batch = totals_batch(10..20);
    Sink::write(&mut s, &batch).await.expect("the batch");
    let once = totals(pg, &conn).await;
    assert_eq!(once, "145 @ 20", "10 + 11 + ... + 19, stored offset 20");

    // The retry after the lost answer: success, and nothing added.
    Sink::write(&mut s, &batch).await.expect("a retried batch that committed is already applied");
    assert_eq!(totals(pg, &conn).await, once, "the retried batch was applied a second time");

    // The next batch applies once.
    Sink::write(&mut s, &totals_batch(20..30)).await.expect("the next batch");
    assert_eq!(totals(pg, &conn).await, "390 @ 30");
}

async fn stored(s: &PostgresSink, tps: &[TopicPartition]) -> Vec<Option<i64>> {
    s.stored_offsets(tps).await.unwrap().into_iter().map(|(_, o)| o).collect()
}

/// The stored offset decides whether a batch is written: at or before the batch's first
/// offset (Kafka offsets have holes) it is; at or past its end the batch is already applied;
/// inside its range, or with one partition applied and another not, it is refused. Fencing
/// is decided before the offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_batch_is_written_only_after_the_stored_offset() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    let mut s = sink(&conn, "close").await;
    let p1 = TopicPartition::new("payments", 1);
    s.claim(&[tp(), p1.clone()]).await.unwrap();
    assert_eq!(s.write_batch(&payments(0..10), &[(tp(), 0..10)]).await.unwrap(), Written::Applied);
    // A hole: offsets 10 and 11 held no records (transaction markers, say).
    assert_eq!(s.write_batch(&payments(10..20), &[(tp(), 12..22)]).await.unwrap(), Written::Applied);
    let before = snapshot(pg, &conn, "close").await;
    assert_eq!(stored(&s, &[tp(), p1.clone()]).await, [Some(22), None]);

    // The stored offset inside the range: records 15..22 are applied, 22..30 are not.
    let err = s.write_batch(&payments(15..30), &[(tp(), 15..30)]).await.unwrap_err();
    assert!(matches!(err, SinkError::Overlap { stored: 22, first: 15, next: 30, .. }), "{err}");
    // Partition 0's range applied, partition 1's not.
    let err = s.write_batch(&payments(30..40), &[(tp(), 12..22), (p1.clone(), 0..10)]).await.unwrap_err();
    assert!(matches!(&err, SinkError::Overlap { tp: t, stored: 22, .. } if *t == tp()), "{err}");
    assert_eq!(snapshot(pg, &conn, "close").await.0, before.0, "a refused batch changed the table");
    assert_eq!(stored(&s, &[tp(), p1.clone()]).await, [Some(22), None]);

    let both = [(tp(), 22..25), (p1.clone(), 0..10)];
    assert_eq!(s.write_batch(&payments(30..40), &both).await.unwrap(), Written::Applied);
    assert_eq!(s.write_batch(&payments(30..40), &both).await.unwrap(), Written::AlreadyApplied);
    assert_eq!(stored(&s, &[tp(), p1.clone()]).await, [Some(25), Some(10)]);

    // After a newer owner's claim, the same retry is fenced, not already applied.
    let mut new = sink(&conn, "close").await;
    new.claim(&[tp()]).await.unwrap();
    assert!(s.write_batch(&payments(30..40), &both).await.unwrap_err().is_fenced());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_refused_batch_leaves_neither_rows_nor_offsets() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    let mut s = sink(&conn, "close").await;
    s.claim(&[tp()]).await.unwrap();
    s.write_batch(&payments(0..100), &[(tp(), 0..100)]).await.unwrap();
    let before = snapshot(pg, &conn, "close").await;

    // Row 150 violates the CHECK: the offsets UPDATE had already run in the transaction.
    let mut rows = payments(100..200);
    rows[50] = row!["p-150".to_string(), "m".to_string(), -1_i64];
    let err = s.write_batch(&rows, &[(tp(), 100..200)]).await.unwrap_err();
    assert_eq!(err.sqlstate(), Some("23514"), "{err}");
    // The message names the server's error, not just "db error".
    assert!(
        err.to_string().contains("ERROR 23514: new row for relation \"ledger\" violates check constraint"),
        "{err}"
    );
    assert_eq!(snapshot(pg, &conn, "close").await, before);

    // The sink is usable afterwards.
    s.write_batch(&payments(100..200), &[(tp(), 100..200)]).await.unwrap();
    assert!(snapshot(pg, &conn, "close").await.0.starts_with("200 "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_server_crash_mid_batch_leaves_neither_rows_nor_offsets() {
    // A private server: this test kills it.
    let mut own = tokio::task::spawn_blocking(|| {
        Postgres::start(PostgresConfig::default()).unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"))
    })
    .await
    .unwrap();
    own.create_database("crash").unwrap();
    own.psql("crash", LEDGER).unwrap();
    let conn = own.connection_string("crash");
    let mut s = sink(&conn, "close").await;
    s.claim(&[tp()]).await.unwrap();
    s.write_batch(&payments(0..10), &[(tp(), 0..10)]).await.unwrap();

    // The batch's last row takes a second; the server is SIGKILLed meanwhile.
    let mut rows = payments(10..20);
    rows.push(row!["slow-1".to_string(), "m".to_string(), 1_i64]);
    let batch = tokio::spawn(async move { s.write_batch(&rows, &[(tp(), 10..21)]).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut own = tokio::task::spawn_blocking(move || {
        own.kill();
        own
    })
    .await
    .unwrap();
    let err = batch.await.unwrap().expect_err("the batch cannot have committed");
    assert!(matches!(err, SinkError::Postgres { .. } | SinkError::CommitOutcomeUnknown(_)), "{err}");

    let own = tokio::task::spawn_blocking(move || {
        own.restart().expect("restart after the crash");
        own
    })
    .await
    .unwrap();
    assert_eq!(own.psql("crash", "SELECT count(*), max(payment_id) FROM ledger").unwrap(), "10|p-9");
    let mut s = sink(&conn, "close").await;
    let claims = s.claim(&[tp()]).await.unwrap();
    assert_eq!(claims[0].next_offset, Some(10), "the crashed batch's offsets must not be stored");
    tokio::task::spawn_blocking(move || drop(own)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_zombie_writer_is_fenced() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    let mut old = sink(&conn, "close").await;
    old.claim(&[tp()]).await.unwrap();
    old.write_batch(&payments(0..10), &[(tp(), 0..10)]).await.unwrap();

    // A rebalance gives the partition to `new`; `old` has not noticed.
    let mut new = sink(&conn, "close").await;
    let claims = new.claim(&[tp()]).await.unwrap();
    assert_eq!((claims[0].epoch, claims[0].next_offset), (2, Some(10)));

    let before = snapshot(pg, &conn, "close").await;
    let zombie_rows: Vec<Row> = (0..20).map(|i| row![format!("p-{i}"), "zombie".to_string(), 999_i64]).collect();
    let err = old.write_batch(&zombie_rows, &[(tp(), 10..20)]).await.unwrap_err();
    match &err {
        SinkError::Fenced { tp: fenced, ours, current } => {
            assert_eq!((fenced, *ours, *current), (&tp(), 1, Some(2)));
        }
        other => panic!("expected Fenced, got {other}"),
    }
    assert_eq!(snapshot(pg, &conn, "close").await, before, "the zombie changed the table");

    // An older offset (a regression) is refused the same way.
    assert!(old.write_batch(&payments(0..5), &[(tp(), 0..5)]).await.unwrap_err().is_fenced());
    new.write_batch(&payments(10..20), &[(tp(), 10..20)]).await.unwrap();
    let after = snapshot(pg, &conn, "close").await;
    assert!(after.0.starts_with("20 "));
    assert_eq!(after.1, "payments/0=20@2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_claim_waits_for_the_batch_in_flight_and_reads_its_offsets() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    let mut old = sink(&conn, "close").await;
    old.claim(&[tp()]).await.unwrap();
    let mut rows = payments(0..10);
    rows.push(row!["slow-1".to_string(), "m".to_string(), 1_i64]);
    let in_flight = tokio::spawn(async move { old.write_batch(&rows, &[(tp(), 0..11)]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new = sink(&conn, "close").await;
    let claims = new.claim(&[tp()]).await.unwrap();
    in_flight.await.unwrap().expect("the batch that held the lock commits");
    assert_eq!(claims[0].next_offset, Some(11), "the claim did not see the batch that committed before it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_writing_an_unclaimed_partition_is_refused() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    let mut s = sink(&conn, "close").await;
    let err = s.write_batch(&payments(0..1), &[(tp(), 0..1)]).await.unwrap_err();
    assert!(matches!(err, SinkError::NotClaimed(_)), "{err}");
    s.claim(&[tp()]).await.unwrap();
    s.release(&[tp()]);
    assert!(matches!(s.write_batch(&payments(0..1), &[(tp(), 0..1)]).await, Err(SinkError::NotClaimed(_))));
}

/// Sinks connecting at once all create the offsets table (`CREATE TABLE IF NOT EXISTS`): all
/// but one fail with a duplicate in the catalog, in one of three ways by timing. One of them
/// (42710, the table's row type) used to stop the pipeline: a CI run's at-least-once
/// pipeline, whose two workers connect together, failed with "db error". 20 rounds of 8 at
/// once, each round a table of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sinks_connecting_at_once_all_get_the_offsets_table() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    for round in 0..20 {
        let table = format!("offsets_{round}");
        let sinks = futures::future::join_all((0..8).map(|_| {
            let (conn, table) = (conn.clone(), table.clone());
            async move {
                let client = connect(&conn).await.expect("connect");
                PostgresSink::with_offsets_table(client, "race", &TableSpec::new("ledger", &["payment_id"]), &table)
                    .await
            }
        }))
        .await;
        for (i, s) in sinks.into_iter().enumerate() {
            if let Err(e) = s {
                panic!("round {round}, sink {i}: {e}");
            }
        }
    }
}
