//! CDC upsert: change events with a primary key → the latest row per key on a compacted
//! topic, idempotent under replay.
//!
//! Delivery semantics: **exactly-once**, plus idempotence by version. Each change event
//! carries its source log position (`lsn`, increasing per key). A state store keeps, per
//! primary key, the last position applied; an event at or below it is stale — a replay, a
//! redelivery — and produces nothing. So replaying the whole input a second time leaves the
//! output exactly as it was: the example does that and compares the two final tables (and
//! both with the table rebuilt in batch from the change events).
//!
//! Output: key = primary key, value = the row as JSON, or a tombstone for a delete, on a
//! compacted topic: its latest record per key *is* the table.
//!
//! Run: `cargo run --release --example cdc_upsert [changes]` (starts a broker unless
//! `KAFKA_BOOTSTRAP` is set). The last line is `replayed: <n> rows, identical`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use kafka_eos::codec::Json;
use kafka_eos::{Guarantee, OutputRecord, Pipeline};
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};
use rdkafka::Message;
use serde::{Deserialize, Serialize};

const PARTITIONS: i32 = 4;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Customer {
    id: u32,
    name: String,
    tier: String,
}

#[derive(Serialize, Deserialize)]
enum Change {
    Upsert { lsn: u64, row: Customer },
    Delete { lsn: u64, id: u32 },
}

type Table = BTreeMap<u32, Customer>;

#[tokio::main]
async fn main() -> ExitCode {
    kafka_eos::ops::init_tracing(std::env::var_os("KAFKA_EOS_JSON_LOGS").is_some());
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cdc_upsert failed: {e}");
            ExitCode::from(2)
        }
    }
}

/// The change stream: 2,000 customers, updated and now and then deleted and re-created.
fn changes(n: u64) -> Vec<(u32, Change)> {
    (0..n)
        .map(|lsn| {
            let id = ((lsn * 2_654_435_761) % 2_000) as u32;
            let change = if lsn % 11 == 0 {
                Change::Delete { lsn, id }
            } else {
                let tier = ["bronze", "silver", "gold"][(lsn % 3) as usize].to_string();
                Change::Upsert { lsn, row: Customer { id, name: format!("customer {id} v{lsn}"), tier } }
            };
            (id, change)
        })
        .collect()
}

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let n: u64 = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(50_000);
    let cluster = tokio::task::spawn_blocking(|| Cluster::from_env_or_start(ClusterConfig::default())).await??;
    let bootstrap = cluster.bootstrap_servers();
    let suffix = std::process::id();
    let (input, table, app) = (format!("cdc-{suffix}"), format!("customers-{suffix}"), format!("cdc-upsert-{suffix}"));
    let (b, i, t) = (bootstrap.clone(), input.clone(), table.clone());
    tokio::task::spawn_blocking(move || {
        let admin = admin::Client::new(&b);
        admin.create_topic(&i, PARTITIONS, 1)?;
        admin.create_topic_with(&t, PARTITIONS, 1, &[("cleanup.policy", "compact")])
    })
    .await??;

    // The table the change stream describes, rebuilt in batch.
    let mut expected = Table::new();
    for (_, c) in changes(n) {
        match c {
            Change::Upsert { row, .. } => expected.insert(row.id, row),
            Change::Delete { id, .. } => expected.remove(&id),
        };
    }

    let pipeline = || {
        let mut builder = Pipeline::builder()
            .bootstrap_servers(&bootstrap)
            .application_id(&app)
            .input_topic(&input)
            .guarantee(Guarantee::ExactlyOnce);
        // The last change applied per row id: typed once, here.
        let applied = builder.store::<u32, u64>("applied-lsn");
        let out = builder.output_topic(&table);
        builder.processor(move |ctx, rec| {
            let change: Change = rec.value_as(&Json)?;
            let (lsn, id) = match &change {
                Change::Upsert { lsn, row } => (*lsn, row.id),
                Change::Delete { lsn, id } => (*lsn, *id),
            };
            let mut applied = ctx.store(&applied);
            if applied.get(&id)?.is_some_and(|last| lsn <= last) {
                return Ok(()); // stale: already applied (a replay)
            }
            applied.put(&id, &lsn)?;
            let out = OutputRecord::to(&out).key(id.to_be_bytes());
            ctx.emit(match change {
                Change::Upsert { row, .. } => out.encode_value(&Json, &row)?,
                Change::Delete { .. } => out, // a tombstone: no value
            });
            Ok(())
        })
    };

    let mut tables = Vec::new();
    for pass in 1..=2 {
        // Pass 2 replays the very same change events (a connector restarted from an old position).
        let (b, i) = (bootstrap.clone(), input.clone());
        tokio::task::spawn_blocking(move || {
            let records = changes(n)
                .into_iter()
                .map(|(id, c)| (None, id.to_be_bytes().to_vec(), serde_json::to_vec(&c).expect("json")));
            admin::Client::new(&b).produce(&i, records)
        })
        .await??;
        let p = pipeline().build()?;
        let handle = p.shutdown_handle();
        let running = tokio::spawn(p.run());
        let (b, g, t) = (bootstrap.clone(), app.clone(), vec![input.clone()]);
        tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &g, &t, Duration::from_secs(300))).await??;
        handle.shutdown();
        let s = running.await??;
        let cfg = VerifyConfig::new(&bootstrap, &input, &table);
        let t = table.clone();
        let rows = tokio::task::spawn_blocking(move || read_table(&cfg, &t)).await??;
        println!(
            "pass {pass}: {} change events in, {} rows out; table has {} rows",
            s.records_in,
            s.records_out,
            rows.len()
        );
        tables.push(rows);
    }
    drop(cluster);
    let same = tables[0] == tables[1] && tables[1] == expected;
    println!("expected (batch): {} rows; after pass 1 == after pass 2 == batch: {same}", expected.len());
    println!("replayed: {} rows, {}", tables[1].len(), if same { "identical" } else { "DIFFERENT" });
    Ok(same)
}

/// The compacted topic read as a table: the latest record per key, tombstones delete.
fn read_table(cfg: &VerifyConfig, topic: &str) -> kafka_eos::Result<Table> {
    let mut rows = Table::new();
    read_to_end(cfg, topic, std::time::Instant::now() + Duration::from_secs(120), |m| {
        let Some(id) = m.key().and_then(|k| k.try_into().ok()).map(u32::from_be_bytes) else { return };
        match m.payload().map(serde_json::from_slice::<Customer>) {
            Some(Ok(row)) => {
                rows.insert(id, row);
            }
            None => {
                rows.remove(&id);
            }
            Some(Err(e)) => tracing::warn!(error = %e, "undecodable row"),
        }
    })?;
    Ok(rows)
}
