//! PostgreSQL, exactly-once: idempotent replay, rows and offsets atomic, zombies fenced.

use std::sync::OnceLock;
use std::time::Duration;

use kafka_eos_postgres::{connect, row, PostgresSink, Row, SinkError, TableSpec, TopicPartition};
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

/// A fresh database with the ledger table on `pg`; returns its connection string.
async fn ledger_db(pg: &'static Postgres) -> String {
    let db = unique("ledger").replace('-', "_");
    tokio::task::spawn_blocking(move || {
        pg.create_database(&db).expect("create database");
        pg.psql(&db, LEDGER).expect("create the ledger");
        pg.connection_string(&db)
    })
    .await
    .unwrap()
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
    let db = conn.rsplit("dbname=").next().unwrap().split(' ').next().unwrap().to_string();
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

    s.write_batch(&payments(0..100), &[(tp(), 100)]).await.unwrap();
    let first = snapshot(pg, &conn, "close").await;
    assert!(first.0.starts_with("100 "), "{first:?}");
    assert_eq!(first.1, "payments/0=100@1");

    // The same owner retries the batch (e.g. after CommitOutcomeUnknown).
    s.write_batch(&payments(0..100), &[(tp(), 100)]).await.unwrap();
    assert_eq!(snapshot(pg, &conn, "close").await, first);

    // A restarted instance resumes from the stored offset; a replay overlapping the last
    // batch (its consumer started earlier) upserts the same values.
    let mut s2 = sink(&conn, "close").await;
    let claims = s2.claim(&[tp()]).await.unwrap();
    assert_eq!((claims[0].epoch, claims[0].next_offset), (2, Some(100)));
    s2.write_batch(&payments(50..100), &[(tp(), 100)]).await.unwrap();
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
        &[(tp(), 101)],
    )
    .await
    .unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let db = conn.rsplit("dbname=").next().unwrap().split(' ').next().unwrap().to_string();
        pg.psql(&db, "SELECT merchant || cents FROM ledger WHERE payment_id = 'p-1'").unwrap()
    })
    .await
    .unwrap();
    assert_eq!(got, "y2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_refused_batch_leaves_neither_rows_nor_offsets() {
    let pg = server().await;
    let conn = ledger_db(pg).await;
    let mut s = sink(&conn, "close").await;
    s.claim(&[tp()]).await.unwrap();
    s.write_batch(&payments(0..100), &[(tp(), 100)]).await.unwrap();
    let before = snapshot(pg, &conn, "close").await;

    // Row 150 violates the CHECK: the offsets UPDATE had already run in the transaction.
    let mut rows = payments(100..200);
    rows[50] = row!["p-150".to_string(), "m".to_string(), -1_i64];
    let err = s.write_batch(&rows, &[(tp(), 200)]).await.unwrap_err();
    assert_eq!(err.sqlstate(), Some("23514"), "{err}");
    // The message names the server's error, not just "db error".
    assert!(
        err.to_string().contains("ERROR 23514: new row for relation \"ledger\" violates check constraint"),
        "{err}"
    );
    assert_eq!(snapshot(pg, &conn, "close").await, before);

    // The sink is usable afterwards.
    s.write_batch(&payments(100..200), &[(tp(), 200)]).await.unwrap();
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
    s.write_batch(&payments(0..10), &[(tp(), 10)]).await.unwrap();

    // The batch's last row takes a second; the server is SIGKILLed meanwhile.
    let mut rows = payments(10..20);
    rows.push(row!["slow-1".to_string(), "m".to_string(), 1_i64]);
    let batch = tokio::spawn(async move { s.write_batch(&rows, &[(tp(), 21)]).await });
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
    old.write_batch(&payments(0..10), &[(tp(), 10)]).await.unwrap();

    // A rebalance gives the partition to `new`; `old` has not noticed.
    let mut new = sink(&conn, "close").await;
    let claims = new.claim(&[tp()]).await.unwrap();
    assert_eq!((claims[0].epoch, claims[0].next_offset), (2, Some(10)));

    let before = snapshot(pg, &conn, "close").await;
    let zombie_rows: Vec<Row> = (0..20).map(|i| row![format!("p-{i}"), "zombie".to_string(), 999_i64]).collect();
    let err = old.write_batch(&zombie_rows, &[(tp(), 20)]).await.unwrap_err();
    match &err {
        SinkError::Fenced { tp: fenced, ours, current } => {
            assert_eq!((fenced, *ours, *current), (&tp(), 1, Some(2)));
        }
        other => panic!("expected Fenced, got {other}"),
    }
    assert_eq!(snapshot(pg, &conn, "close").await, before, "the zombie changed the table");

    // An older offset (a regression) is refused the same way.
    assert!(old.write_batch(&payments(0..5), &[(tp(), 5)]).await.unwrap_err().is_fenced());
    new.write_batch(&payments(10..20), &[(tp(), 20)]).await.unwrap();
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
    let in_flight = tokio::spawn(async move { old.write_batch(&rows, &[(tp(), 11)]).await });
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
    let err = s.write_batch(&payments(0..1), &[(tp(), 1)]).await.unwrap_err();
    assert!(matches!(err, SinkError::NotClaimed(_)), "{err}");
    s.claim(&[tp()]).await.unwrap();
    s.release(&[tp()]);
    assert!(matches!(s.write_batch(&payments(0..1), &[(tp(), 1)]).await, Err(SinkError::NotClaimed(_))));
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
