//! An exactly-once PostgreSQL sink beside state stores, through the outbox: a stateful
//! pipeline counts payments per card and writes one ledger row per payment with the card's
//! running count; PostgreSQL is SIGKILLed and restarted mid-run, and the pipeline is stopped
//! and started again. Every payment's row lands once, and each card's counts in the rows run
//! 1..=n: state and rows agree, with nothing applied twice.

use std::time::Duration;

use kafka_eos::state::Store;
use kafka_eos::{Guarantee, Pipeline, PipelineBuilder};
use kafka_eos_postgres::{row, PostgresSink, TableSpec};
use kafka_eos_testkit::postgres::{Postgres, PostgresConfig};

use crate::common::{caught_up, spawn, topics, unique, Topics};

const RECORDS: u64 = 3_000;
const CARDS: u64 = 40;

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    payment: String,
    card: String,
    count: i64,
}

fn counting(t: &Topics, app: &str, conn: &str, guarantee: Guarantee) -> PipelineBuilder {
    let mut b = Pipeline::builder()
        .bootstrap_servers(&t.bootstrap)
        .application_id(app)
        .input_topic(&t.input)
        .guarantee(guarantee)
        .commit_interval(Duration::from_millis(100))
        .task_timeout(Duration::from_secs(60))
        .handle_signals(false);
    let conn = conn.to_string();
    let ledger = b.outbox_sink(
        "ledger",
        move || {
            let conn = conn.clone();
            async move {
                PostgresSink::connect(&conn, "outbox-ledger", &TableSpec::new("card_ledger", &["payment_id"])).await
            }
        },
        |e: Entry| row![e.payment, e.card, e.count],
    );
    let counts: Store<String, i64> = b.store("per-card");
    b.processor(move |ctx, r| {
        let card = format!("p{}-card-{}", r.partition, r.offset as u64 % CARDS);
        let n = ctx.store(&counts).get(&card)?.unwrap_or(0) + 1;
        ctx.store(&counts).put(&card, &n)?;
        ctx.sink(&ledger, Entry { payment: r.origin(), card, count: n });
        Ok(())
    })
}

async fn rows_reach(pg: &Postgres, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let rows: u64 =
            pg.psql("postgres", "SELECT count(*) FROM card_ledger").unwrap_or_default().trim().parse().unwrap_or(0);
        if rows >= n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{rows} of {n} rows in PostgreSQL after 120 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn rows_land_once_beside_state(name: &str, guarantee: Guarantee) {
    let mut pg =
        tokio::task::spawn_blocking(|| Postgres::start(PostgresConfig::default()).expect("PostgreSQL")).await.unwrap();
    pg.psql(
        "postgres",
        "CREATE TABLE card_ledger (payment_id text PRIMARY KEY, card text NOT NULL, n bigint NOT NULL)",
    )
    .expect("table");
    let conn = pg.connection_string("postgres");
    let t = topics(name, 4, RECORDS / 2, 20).await;
    let app = unique(name);

    let run = spawn(counting(&t, &app, &conn, guarantee));
    rows_reach(&pg, RECORDS / 2).await;
    run.stop().await;

    let run = spawn(counting(&t, &app, &conn, guarantee));
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg = tokio::task::spawn_blocking(move || {
        pg.kill();
        pg
    })
    .await
    .unwrap();
    t.produce(RECORDS / 2).await;
    caught_up(&t.bootstrap, &app, &t.input).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg = tokio::task::spawn_blocking(move || {
        pg.restart().expect("restart PostgreSQL");
        pg
    })
    .await
    .unwrap();
    rows_reach(&pg, RECORDS).await;
    run.stop().await;

    let check = pg
        .psql(
            "postgres",
            "SELECT count(*) || ' ' || count(DISTINCT payment_id) || ' ' || \
             (SELECT count(*) FROM (SELECT card FROM card_ledger GROUP BY card \
              HAVING count(*) <> max(n) OR count(DISTINCT n) <> count(*) OR min(n) <> 1) bad) FROM card_ledger",
        )
        .expect("psql");
    let v: Vec<u64> = check.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(v, [RECORDS, RECORDS, 0], "{guarantee:?}: rows, distinct payments, cards whose counts are not 1..=n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_rows_land_once_beside_state_per_partition() {
    rows_land_once_beside_state("outbox-pp", Guarantee::ExactlyOncePerPartition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_rows_land_once_beside_state_per_consumer() {
    rows_land_once_beside_state("outbox-pc", Guarantee::ExactlyOncePerConsumer).await;
}
