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
//! Run: `cargo run --release -p kafka-eos-examples --example cdc_upsert [changes]` (starts a
//! broker unless `KAFKA_BOOTSTRAP` is set). The last line is `replayed: <n> rows, identical`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use kafka_eos::codec::Json;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder};
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};
use rdkafka::Message;
use serde::{Deserialize, Serialize};

const PARTITIONS: i32 = 4;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Customer {
    id: u32,
    name: String,
    tier: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Change {
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
pub(crate) fn changes(n: u64) -> Vec<(u32, Change)> {
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

/// The pipeline: change events -> the latest row per key, stale events dropped by their
/// `lsn`. `builder` brings the connection settings; the unit test below and
/// `tests/it/equivalence.rs` run this same definition with the test driver and on a real
/// broker.
pub fn pipeline(builder: PipelineBuilder, input: &str, table: &str) -> PipelineBuilder {
    let mut builder = builder.input_topic(input).guarantee(Guarantee::ExactlyOncePerPartition);
    // The last change applied per row id: typed once, here.
    let applied = builder.store::<u32, u64>(APPLIED_STORE);
    let out = builder.output_topic(table);
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
}

/// The store of the last `lsn` applied per row id.
const APPLIED_STORE: &str = "applied-lsn";

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

    let pipeline = || pipeline(Pipeline::builder().bootstrap_servers(&bootstrap).application_id(&app), &input, &table);

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
        let s = admin::run_until_caught_up(p, &bootstrap, &app, std::slice::from_ref(&input), Duration::from_secs(300))
            .await?;
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

/// The pipeline without a broker (`cargo test -p kafka-eos-examples --example cdc_upsert`): milliseconds, no Java.
#[cfg(test)]
mod tests {
    use kafka_eos_testkit::driver::{check_replay_safe, TestDriver, TestInput};

    use super::*;

    fn inputs(n: u64) -> Vec<TestInput> {
        changes(n)
            .into_iter()
            .map(|(id, c)| {
                let input = TestInput::new().partition((id % 4) as i32).key(id.to_be_bytes());
                input.encode_value(&Json, &c).expect("json")
            })
            .collect()
    }

    #[test]
    fn upserts_and_deletes_apply_once_and_stale_changes_are_dropped() {
        let mut driver = TestDriver::new(pipeline(Pipeline::builder(), "cdc", "customers")).unwrap();
        let row = |lsn| Customer { id: 7, name: format!("v{lsn}"), tier: "gold".into() };
        let change = |c: &Change| TestInput::new().key(7u32.to_be_bytes()).encode_value(&Json, c).unwrap();
        driver.pipe(change(&Change::Upsert { lsn: 1, row: row(1) })).unwrap();
        driver.pipe(change(&Change::Upsert { lsn: 3, row: row(3) })).unwrap();
        driver.pipe(change(&Change::Upsert { lsn: 2, row: row(2) })).unwrap(); // stale
        driver.pipe(change(&Change::Delete { lsn: 4, id: 7 })).unwrap();
        let out = driver.output("customers");
        let names: Vec<_> = out.iter().map(|r| r.value_as::<Customer>(&Json).ok().map(|c| c.name)).collect();
        assert_eq!(names, [Some("v1".into()), Some("v3".into()), None], "the delete is a tombstone");
        let applied = driver.store_handle::<u32, u64>(APPLIED_STORE).unwrap();
        assert_eq!(driver.store(&applied, 0).get(&7).unwrap(), Some(4));
    }

    #[test]
    fn replaying_the_whole_input_changes_nothing() {
        let mut driver = TestDriver::new(pipeline(Pipeline::builder(), "cdc", "customers")).unwrap();
        driver.pipe_all(inputs(500)).unwrap();
        let first = driver.output("customers").len();
        driver.pipe_all(inputs(500)).unwrap();
        assert_eq!(driver.output("customers").len(), first, "every replayed change is stale");
        check_replay_safe(|| pipeline(Pipeline::builder(), "cdc", "customers"), &inputs(300), 3).unwrap();
    }
}
