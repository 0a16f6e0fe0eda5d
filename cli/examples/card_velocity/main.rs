//! Card velocity: an alert when a card makes its 6th payment within 10 minutes, written to
//! PostgreSQL, and every merchant's running total — exactly once, checked against a batch
//! recomputation.
//!
//! The payments arrive keyed by card. The pipeline (`pipeline.rs`, beside this file) counts
//! each card's payments in 10-minute hopping windows (one starting every 5 minutes) with a
//! threshold trigger that fires once per window at the 6th payment; each alert goes to the
//! table `card_alerts` through an outbox sink, exactly once beside the windows' state. Each
//! payment is also re-keyed by merchant through a repartition topic, and the merchant's
//! running total, kept by merchant, is emitted to the totals topic. One pipeline, one
//! consumer group (plus the outbox's applier, which the pipeline runs).
//!
//! The example starts a broker (unless `KAFKA_BOOTSTRAP` is set) and PostgreSQL (the test
//! kit's: an installed one, or a build fetched from Maven Central), writes 20,000 payments
//! of 404 cards (a tenth of them from 4 cards that pay often) at 50 merchants to 4
//! partitions, runs the pipeline until it has consumed everything and the applier has
//! written every alert, then recomputes the alerts and totals from the generator and
//! compares. Its last line is `verified: <n> alerts and <m> merchant totals match the
//! batch recomputation` (exit code 1 on any mismatch).
//!
//! Run: `cargo run --release --example card_velocity [payments]`.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kafka_eos::{Guarantee, Pipeline};
use kafka_eos_cli::workloads::card_velocity::{self, Generate, ALERTS_TABLE, ALERT_AT};
use kafka_eos_testkit::admin;
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use kafka_eos_testkit::postgres::{Postgres, PostgresConfig};
use kafka_eos_testkit::verify::VerifyConfig;

const PARTITIONS: i32 = 4;

#[tokio::main]
async fn main() -> ExitCode {
    kafka_eos::ops::init_tracing(std::env::var_os("KAFKA_EOS_JSON_LOGS").is_some());
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("card_velocity failed: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let payments: u64 = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(20_000);
    let g = Generate { payments, ..Generate::default() };
    let cluster = tokio::task::spawn_blocking(|| Cluster::from_env_or_start(ClusterConfig::default())).await??;
    let pg = tokio::task::spawn_blocking(|| Postgres::start(PostgresConfig::default())).await??;
    pg.psql(
        "postgres",
        &format!(
            "CREATE TABLE {ALERTS_TABLE} (card text, window_start bigint, payments bigint NOT NULL, \
             PRIMARY KEY (card, window_start))"
        ),
    )?;
    let bootstrap = cluster.bootstrap_servers();
    let suffix = std::process::id();
    let app = format!("card-velocity-{suffix}");
    let topics = [format!("payments-{suffix}"), format!("merchant-totals-{suffix}"), format!("late-payments-{suffix}")];
    let (b, t, gen) = (bootstrap.clone(), topics.clone(), g.clone());
    tokio::task::spawn_blocking(move || {
        let admin = admin::Client::new(&b);
        for topic in &t {
            admin.create_topic(topic, PARTITIONS, 1)?;
        }
        card_velocity::generate(&admin, &t[0], PARTITIONS, &gen, 0..gen.payments)
    })
    .await??;
    println!("produced {payments} payments to {}", topics[0]);

    let builder = Pipeline::builder()
        .bootstrap_servers(&bootstrap)
        .application_id(&app)
        .guarantee(Guarantee::ExactlyOncePerPartition)
        .commit_interval(Duration::from_millis(100));
    let conn = pg.connection_string("postgres");
    let pipeline = card_velocity::pipeline(builder, (&topics[0], &topics[1], &topics[2]), &conn, &app)?.build()?;
    let handle = pipeline.shutdown_handle();
    let started = Instant::now();
    let running = tokio::spawn(pipeline.run());
    // Lag 0 on both topics at once: every payment read, and every repartitioned record its
    // batch wrote. Then the applier's on the outbox: every alert in PostgreSQL.
    let waits = [
        (app.clone(), vec![topics[0].clone(), format!("{app}-by-merchant-repartition")]),
        (format!("{app}-alerts-outbox"), vec![format!("{app}-alerts-outbox")]),
    ];
    for (group, on) in waits {
        let b = bootstrap.clone();
        tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &group, &on, Duration::from_secs(300)))
            .await??;
    }
    let elapsed = started.elapsed();
    handle.shutdown();
    let summary = running.await??;
    println!(
        "processed {} records (payments and repartitioned) in {:.2} s: {} outputs, {} changelog records in {} transactions",
        summary.records_in,
        elapsed.as_secs_f64(),
        summary.records_out,
        summary.changelog_records,
        summary.transactions_committed
    );

    let want = card_velocity::expected(&g, payments);
    let mut cfg = VerifyConfig::new(&bootstrap, &topics[0], &topics[1]);
    cfg.timeout = Duration::from_secs(120);
    let totals_topic = topics[1].clone();
    let totals = tokio::task::spawn_blocking(move || card_velocity::streamed_totals(&cfg, &totals_topic)).await??;
    let rows =
        pg.psql("postgres", &format!("SELECT card || ' ' || window_start || ' ' || payments FROM {ALERTS_TABLE}"))?;
    let mut alerts = BTreeSet::new();
    let mut wrong_counts = 0;
    for line in rows.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        alerts.insert((f[0].to_string(), f[1].parse::<i64>()?));
        wrong_counts += usize::from(f[2] != ALERT_AT.to_string());
    }
    drop(cluster);
    let missing = want.alerts.difference(&alerts).count();
    let extra = alerts.difference(&want.alerts).count();
    let totals_off = want.merchants.iter().filter(|(m, t)| totals.get(*m) != Some(t)).count()
        + totals.len().abs_diff(want.merchants.len());
    println!(
        "batch recomputation: {} alerts ({} in PostgreSQL: {missing} missing, {extra} extra, {wrong_counts} with another count \
         than {ALERT_AT}); {} merchants ({totals_off} whose last streamed total or update count differs)",
        want.alerts.len(),
        alerts.len(),
        want.merchants.len()
    );
    let exact = missing + extra + wrong_counts + totals_off == 0;
    if exact {
        println!(
            "verified: {} alerts and {} merchant totals match the batch recomputation",
            alerts.len(),
            want.merchants.len()
        );
    }
    Ok(exact)
}
