//! Sink storage throughput: the PostgreSQL exactly-once batch (rows + offsets in one
//! transaction) next to at-least-once upserts of the same rows, and Redis counters with and
//! without the dedup step — first without Kafka (what each batch costs the database), then
//! end to end: a pipeline reading Kafka into PostgreSQL through the exactly-once sink, next
//! to the same pipeline upserting row by row from its processor (the plain at-least-once
//! loop users write by hand).
//!
//! `cargo bench --bench sinks [-- --quick]`; figures go in docs/sinks.md.
//!
//! # How
//! One local PostgreSQL 15 (harness defaults: `fsync = off`, `synchronous_commit = on`; the
//! `durable` pass turns fsync on) and one Redis 7 (append-only file fsynced `always`, then
//! `everysec`), started by the test kit. Every PostgreSQL subject writes the same `N`
//! ledger rows (text key, text, bigint) into a freshly truncated table:
//!
//! - `exactly-once batch`: `PostgresSink::write_batch` per batch of `b` rows, with the
//!   batch's offset, conditional on the partition's epoch;
//! - `at-least-once batch`: the same one-statement upsert per batch, autocommitted, no
//!   offsets;
//! - `at-least-once row loop`: one autocommitted `INSERT … ON CONFLICT` per row.
//!
//! Redis subjects apply `N` page-view events (one `HINCRBY` each, 50 hashes × 20 fields) in
//! batches of `b`: `dedup` is one script call per batch setting a dedup key per event;
//! `no dedup` one pipeline of `HINCRBY`s per batch. Throughput is events (= increments)
//! per second, wall clock, one connection.
//!
//! End to end (`kafka → postgres`): `N` records in 4 partitions of a local one-node broker,
//! read by a fresh consumer group (at-least-once on the Kafka side, 100 ms commit interval);
//! the time runs from the pipeline's start until the group has committed everything (so it
//! includes the join), into a freshly truncated table. `exactly-once sink`: rows through
//! `PostgresSink` (one transaction per batch with the offsets, a connection per task);
//! `row loop`: the processor awaits one autocommitted upsert per record on one shared
//! connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_eos::{Guarantee, Pipeline};
use kafka_eos_testkit::admin;

use kafka_eos_postgres::{connect, row, PostgresSink, Row, TableSpec, TopicPartition};
use kafka_eos_redis::{event_id, Event, RedisCounterSink};
use kafka_eos_testkit::postgres::{Postgres, PostgresConfig};
use kafka_eos_testkit::redis::{Persistence, Redis, RedisConfig};

fn rows(n: i64) -> Vec<Row> {
    (0..n).map(|i| row![format!("payment-{i:08}"), format!("merchant-{}", i % 97), i * 7]).collect()
}

async fn truncate(sink: &PostgresSink) {
    // The stored offsets too: each run writes the offsets from 0 again.
    sink.client().batch_execute("TRUNCATE ledger, kafka_eos_offsets").await.unwrap();
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:>9.0}/s", n as f64 / d.as_secs_f64())
}

async fn postgres(durable: bool, n: i64, batches: &[usize]) {
    let pg = tokio::task::spawn_blocking(move || {
        Postgres::start(PostgresConfig { durable, ..PostgresConfig::default() }).expect("cannot start PostgreSQL")
    })
    .await
    .unwrap();
    pg.psql(
        "postgres",
        "CREATE TABLE ledger (payment_id text PRIMARY KEY, merchant text NOT NULL, cents bigint NOT NULL)",
    )
    .unwrap();
    let conn = pg.connection_string("postgres");
    let mut sink =
        PostgresSink::new(connect(&conn).await.unwrap(), "bench", &TableSpec::new("ledger", &["payment_id"]))
            .await
            .unwrap();
    let tp = TopicPartition::new("payments", 0);
    let data = rows(n);
    println!("\nPostgreSQL 15, fsync {}: {n} rows, rows/s", if durable { "on" } else { "off" });
    for &b in batches {
        truncate(&sink).await;
        sink.claim(std::slice::from_ref(&tp)).await.unwrap();
        let t = Instant::now();
        let mut next = 0;
        for chunk in data.chunks(b) {
            let first = next;
            next += chunk.len() as i64;
            sink.write_batch(chunk, &[(tp.clone(), first..next)]).await.unwrap();
        }
        let eos = t.elapsed();
        truncate(&sink).await;
        let t = Instant::now();
        for chunk in data.chunks(b) {
            sink.upsert(chunk).await.unwrap();
        }
        let alo = t.elapsed();
        println!(
            "  batch {b:>5}: exactly-once batch {}   at-least-once batch {}",
            rate(data.len(), eos),
            rate(data.len(), alo)
        );
    }
    truncate(&sink).await;
    let t = Instant::now();
    sink.upsert_each(&data).await.unwrap();
    println!("  at-least-once row loop (1 row per autocommitted statement): {}", rate(data.len(), t.elapsed()));
    tokio::task::spawn_blocking(move || drop(pg)).await.unwrap();
}

async fn redis(persistence: Persistence, n: i64, batches: &[usize]) {
    let r = tokio::task::spawn_blocking(move || {
        Redis::start(RedisConfig { persistence, ..RedisConfig::default() }).expect("cannot start Redis")
    })
    .await
    .unwrap();
    let events: Vec<Event> = (0..n)
        .map(|o| Event::new(event_id("views", 0, o)).incr(format!("pv:{}", o % 50), format!("page-{}", o % 20), 1))
        .collect();
    println!("\nRedis 7, {persistence:?}: {n} events (1 HINCRBY each), events/s");
    for &b in batches {
        let mut sink =
            RedisCounterSink::connect(&r.url(), &format!("bench-{b}"), Duration::from_secs(3600)).await.unwrap();
        let t = Instant::now();
        for chunk in events.chunks(b) {
            sink.apply(chunk).await.unwrap();
        }
        let dedup = t.elapsed();
        let t = Instant::now();
        for chunk in events.chunks(b) {
            sink.apply_without_dedup(chunk).await.unwrap();
        }
        let plain = t.elapsed();
        println!("  batch {b:>5}: dedup {}   no dedup {}", rate(events.len(), dedup), rate(events.len(), plain));
    }
    tokio::task::spawn_blocking(move || drop(r)).await.unwrap();
}

mod common;

/// Runs `builder` until its group has committed all of `topic`; the wall time.
async fn run_until_caught_up(builder: kafka_eos::PipelineBuilder, bootstrap: &str, app: &str, topic: &str) -> Duration {
    let started = Instant::now();
    let pipeline = builder.build().expect("pipeline");
    let handle = pipeline.shutdown_handle();
    let running = tokio::spawn(pipeline.run());
    let (b, g, t) = (bootstrap.to_string(), app.to_string(), vec![topic.to_string()]);
    tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &g, &t, Duration::from_secs(600)))
        .await
        .unwrap()
        .expect("caught up");
    let elapsed = started.elapsed();
    handle.shutdown();
    running.await.unwrap().expect("pipeline");
    elapsed
}

async fn kafka_to_postgres(n: u64) {
    let cluster = tokio::task::spawn_blocking(common::broker).await.unwrap();
    let bootstrap = cluster.bootstrap_servers();
    let topic = format!("sink-bench-{}", std::process::id());
    let (b, t) = (bootstrap.clone(), topic.clone());
    tokio::task::spawn_blocking(move || {
        admin::create_topic(&b, &t, 4, 1)?;
        admin::produce_sequence(&b, &t, 4, n, 100)
    })
    .await
    .unwrap()
    .expect("input");
    let pg =
        tokio::task::spawn_blocking(|| Postgres::start(PostgresConfig::default()).expect("PostgreSQL")).await.unwrap();
    pg.psql("postgres", "CREATE TABLE ledger (id text PRIMARY KEY, part integer NOT NULL, off bigint NOT NULL)")
        .unwrap();
    let conn = pg.connection_string("postgres");
    let base = |app: &str| {
        Pipeline::builder()
            .bootstrap_servers(&bootstrap)
            .application_id(app)
            .input_topic(&topic)
            .guarantee(Guarantee::AtLeastOnce)
    };
    println!(
        "
Kafka -> PostgreSQL (fsync off): {n} records in 4 partitions, records/s, group join included"
    );

    let app = format!("{topic}-eos");
    let mut b = base(&app);
    let c = conn.clone();
    let ledger = b.sink(move || {
        let c = c.clone();
        async move { PostgresSink::connect(&c, "bench", &TableSpec::new("ledger", &["id"])).await }
    });
    let b = b.processor(move |ctx, r| {
        ctx.sink(&ledger, row![r.origin(), r.partition, r.offset]);
        Ok(())
    });
    let eos = run_until_caught_up(b, &bootstrap, &app, &topic).await;
    let rows = pg.psql("postgres", "SELECT count(*) FROM ledger").unwrap();
    assert_eq!(rows.trim(), n.to_string(), "the sink wrote every record once");
    pg.psql("postgres", "TRUNCATE ledger").unwrap();

    let app = format!("{topic}-loop");
    let client = Arc::new(connect(&conn).await.unwrap());
    let stmt = client
        .prepare("INSERT INTO ledger (id, part, off) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET part = EXCLUDED.part, off = EXCLUDED.off")
        .await
        .unwrap();
    let b = base(&app).async_processor(async move |_ctx, r| {
        client.execute(&stmt, &[&r.origin(), &r.partition, &r.offset]).await?;
        Ok(())
    });
    let plain = run_until_caught_up(b, &bootstrap, &app, &topic).await;
    println!(
        "  exactly-once sink {}   at-least-once row loop {}   ratio {:.1}x",
        rate(n as usize, eos),
        rate(n as usize, plain),
        plain.as_secs_f64() / eos.as_secs_f64()
    );
    tokio::task::spawn_blocking(move || {
        drop(pg);
        drop(cluster);
    })
    .await
    .unwrap();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (pg_rows, redis_events) = if quick { (2_000, 5_000) } else { (100_000, 200_000) };
    postgres(false, pg_rows, &[100, 1000]).await;
    if !quick {
        postgres(true, pg_rows, &[100, 1000]).await;
    }
    redis(Persistence::AofAlways, redis_events, &[100, 1000]).await;
    if !quick {
        redis(Persistence::AofEverySec, redis_events, &[100, 1000]).await;
        redis(Persistence::None, redis_events, &[100, 1000]).await;
    }
    kafka_to_postgres(if quick { 5_000 } else { 100_000 }).await;
}
