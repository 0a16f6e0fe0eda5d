//! Restore time with and without the disk backend's local checkpoint (issue 11's target:
//! a restart with the checkpoint restores at least 10x faster than from the changelog's
//! start).
//!
//! ```sh
//! cargo bench -p kafka-eos-disk --bench restore_checkpoint -- [--records 1000000] [--value 200] [--tail 0.01] [--sync-ms 1000]
//! ```
//!
//! Writes a changelog of `records` unique keys (values of `value` bytes, 4 partitions) as a
//! pipeline's store would have it, then times `state::measure_restore` of all 4 partitions:
//! into memory and into a fresh disk store (no checkpoint: the whole changelog), then —
//! after `tail` of the records were appended to the changelog by "another instance" — into
//! the same disk store again (its checkpoint: the tail only), and once more with nothing new.
//! The same changelog is also read as a stream–table join's table (`table::measure_read`).
//! The broker is `KAFKA_BOOTSTRAP` or a local one started for the run.

use std::time::{Duration, Instant};

use kafka_eos::state::{changelog_topic, format, StoreSpec};
use kafka_eos::{Pipeline, PipelineConfig};
use kafka_eos_disk::DiskStore;
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};

const PARTITIONS: i32 = 4;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config(bootstrap: &str, app: &str, input: &str, disk: Option<&DiskStore>) -> PipelineConfig {
    let mut builder = Pipeline::builder().bootstrap_servers(bootstrap).application_id(app);
    let spec = StoreSpec::<u64, Vec<u8>>::new("s");
    let _store = builder.store_spec(match disk {
        Some(d) => spec.backend(d.factory()),
        None => spec,
    });
    builder.input_topic(input).processor(|_, _| Ok(())).build().expect("pipeline").config().clone()
}

/// Appends keys `range` to the changelog, spread over the partitions, encoded as a store
/// writes them (`state::format`: a key is `[FORMAT] ++ bincode(key)`, a value
/// `[FORMAT, version] ++ bincode(value)`).
fn write(bootstrap: &str, topic: &str, range: std::ops::Range<u64>, value: usize) {
    let body = bincode::serialize(&vec![0x42u8; value]).expect("value");
    let records = range.map(|k| {
        let key = [&[format::FORMAT][..], &bincode::serialize(&k).expect("key")].concat();
        let value = [&[format::FORMAT, 1][..], &body].concat();
        (Some((k % PARTITIONS as u64) as i32), key, value)
    });
    kafka_eos_testkit::admin::produce(bootstrap, topic, records).expect("produce the changelog");
}

fn restore(cfg: &PipelineConfig) -> (u64, f64) {
    let started = Instant::now();
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    let deadline = Instant::now() + Duration::from_secs(1800);
    let n = kafka_eos::state::measure_restore(cfg, &partitions, deadline).expect("restore");
    (n, started.elapsed().as_secs_f64())
}

/// The same changelog read as a [table](kafka_eos::table) (a stream–table join's
/// assignment), its values kept as bytes.
fn read_table(bootstrap: &str, app: &str, input: &str, topic: &str) -> (u64, f64) {
    let mut builder = Pipeline::builder().bootstrap_servers(bootstrap).application_id(app);
    let _table = builder.table::<Vec<u8>, _>(topic, kafka_eos::codec::Raw);
    let pipeline = builder.input_topic(input).processor(|_, _| Ok(())).build().expect("pipeline");
    let started = Instant::now();
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    let deadline = Instant::now() + Duration::from_secs(1800);
    let n = kafka_eos::table::measure_read(pipeline.config(), &partitions, deadline).expect("table read");
    (n, started.elapsed().as_secs_f64())
}

fn main() {
    let (records, value, tail) = (arg("--records", 1_000_000u64), arg("--value", 200usize), arg("--tail", 0.01f64));
    let sync = Duration::from_millis(arg("--sync-ms", 1_000u64));
    let cluster = Cluster::from_env_or_start(ClusterConfig { heap_mb: 1024, ..ClusterConfig::default() })
        .unwrap_or_else(|e| panic!("cannot start a broker: {e}"));
    let bootstrap = cluster.bootstrap_servers();
    let suffix = std::process::id();
    let (app, input) = (format!("restore-bench-{suffix}"), format!("restore-bench-in-{suffix}"));
    let changelog = changelog_topic(&app, "s");
    let admin = kafka_eos::admin::Client::new(&bootstrap);
    admin.create_topic(&input, PARTITIONS, 1).expect("input topic");
    admin.create_topic_with(&changelog, PARTITIONS, 1, &[("cleanup.policy", "compact")]).expect("changelog topic");

    let started = Instant::now();
    write(&bootstrap, &changelog, 0..records, value);
    let mib = records as f64 * (value + 10) as f64 / (1 << 20) as f64;
    println!(
        "changelog: {records} records of {value} B values ({mib:.0} MiB of keys and values), {PARTITIONS} partitions, written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string();
    println!("loadavg before: {}", load());

    let dir = tempfile::tempdir().expect("state dir");
    let disk = DiskStore::at(dir.path()).sync_interval(sync);
    let rows = [
        ("memory, from the start", restore(&config(&bootstrap, &app, &input, None))),
        ("read as a table (in memory)", read_table(&bootstrap, &app, &input, &changelog)),
        ("disk, no checkpoint (full)", restore(&config(&bootstrap, &app, &input, Some(&disk)))),
    ];
    let extra = ((records as f64 * tail) as u64).max(1);
    write(&bootstrap, &changelog, records..records + extra, value);
    let cfg = config(&bootstrap, &app, &input, Some(&disk));
    let tail_row = ("disk, checkpoint + tail", restore(&cfg));
    let none_row = ("disk, checkpoint at the end", restore(&cfg));
    println!("{:<30} {:>10} {:>9} {:>12}", "restore", "records", "seconds", "records/s");
    for (what, (n, s)) in rows.iter().chain([&tail_row, &none_row]) {
        println!("{what:<30} {n:>10} {s:>9.2} {:>12.0}", *n as f64 / s.max(1e-9));
    }
    let (full, with_tail) = (rows[2].1 .1, tail_row.1 .1);
    println!(
        "speed-up with the checkpoint: {:.0}x (tail of {extra} records), {:.0}x (no tail)",
        full / with_tail,
        full / none_row.1 .1
    );
    println!("loadavg after: {}", load());
}
