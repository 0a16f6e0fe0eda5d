//! Which embedded key-value store backs `kafka-eos-disk`: redb against fjall, on batches
//! shaped like a store's committed transactions (one write batch per Kafka transaction, the
//! changelog checkpoint written in the same local transaction), then point gets.
//!
//! ```sh
//! cargo bench -p kafka-eos-disk --bench disk_candidates -- [--keys 200000] [--batch 1000] [--gets 100000]
//! ```
//!
//! Prints, per candidate and sync policy: batches/s and changes/s for the load, the median
//! and 99th percentile of a point get, and the size on disk. Keys are 16 bytes (random
//! order, like hashed business keys), values 100 bytes.

use std::path::Path;
use std::time::{Duration, Instant};

use redb::ReadableDatabase;

const CHECKPOINT_KEY: &[u8] = b"\0checkpoint";

/// What a candidate must do for the backend: commit a batch with its checkpoint atomically,
/// get a key.
trait Candidate {
    fn commit(&mut self, batch: &[(Vec<u8>, Vec<u8>)], checkpoint: i64, sync: bool);
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
}

struct Redb {
    db: redb::Database,
}

const TABLE: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("state");

impl Candidate for Redb {
    fn commit(&mut self, batch: &[(Vec<u8>, Vec<u8>)], checkpoint: i64, sync: bool) {
        let mut tx = self.db.begin_write().expect("begin");
        let durability = if sync { redb::Durability::Immediate } else { redb::Durability::None };
        tx.set_durability(durability).expect("durability");
        {
            let mut t = tx.open_table(TABLE).expect("table");
            for (k, v) in batch {
                t.insert(k.as_slice(), v.as_slice()).expect("insert");
            }
            t.insert(CHECKPOINT_KEY, checkpoint.to_be_bytes().as_slice()).expect("checkpoint");
        }
        tx.commit().expect("commit");
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let tx = self.db.begin_read().expect("read");
        let t = tx.open_table(TABLE).expect("table");
        t.get(key).expect("get").map(|v| v.value().to_vec())
    }
}

struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
}

impl Candidate for Fjall {
    fn commit(&mut self, batch: &[(Vec<u8>, Vec<u8>)], checkpoint: i64, sync: bool) {
        let mode = if sync { fjall::PersistMode::SyncAll } else { fjall::PersistMode::Buffer };
        let mut b = self.db.batch().durability(Some(mode));
        for (k, v) in batch {
            b.insert(&self.ks, k.as_slice(), v.as_slice());
        }
        b.insert(&self.ks, CHECKPOINT_KEY, checkpoint.to_be_bytes());
        b.commit().expect("commit");
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.ks.get(key).expect("get").map(|v| v.to_vec())
    }
}

fn open(name: &str, dir: &Path) -> Box<dyn Candidate> {
    match name {
        "redb" => Box::new(Redb { db: redb::Database::create(dir.join("state.redb")).expect("redb") }),
        _ => {
            let db = fjall::Database::builder(dir).open().expect("fjall");
            let ks = db.keyspace("state", fjall::KeyspaceCreateOptions::default).expect("keyspace");
            Box::new(Fjall { db, ks })
        }
    }
}

/// A xorshift generator: reproducible keys without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn key(i: u64) -> Vec<u8> {
    let mut r = Rng(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut k = r.next().to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn dir_size(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let (keys, batch, gets) = (arg("--keys", 200_000), arg("--batch", 1_000), arg("--gets", 100_000));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("{keys} keys of 16 B, values of 100 B, batches of {batch}, {gets} gets; loadavg {}", load.trim());
    println!(
        "{:<6} {:<10} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "store", "sync", "batches/s", "changes/s", "get p50", "get p99", "disk MiB"
    );
    for name in ["redb", "fjall"] {
        for sync in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut db = open(name, dir.path());
            let value = vec![7u8; 100];
            let started = Instant::now();
            let mut i = 0;
            let mut batches = 0u64;
            while i < keys {
                let chunk: Vec<_> = (i..(i + batch).min(keys)).map(|j| (key(j), value.clone())).collect();
                i += chunk.len() as u64;
                db.commit(&chunk, i as i64, sync);
                batches += 1;
            }
            let load_time = started.elapsed().as_secs_f64();
            let mut rng = Rng(42);
            let mut lat: Vec<Duration> = (0..gets)
                .map(|_| {
                    let k = key(rng.next() % keys);
                    let t = Instant::now();
                    assert!(db.get(&k).is_some());
                    t.elapsed()
                })
                .collect();
            lat.sort_unstable();
            let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
            drop(db);
            println!(
                "{:<6} {:<10} {:>10.0} {:>12.0} {:>8.1}us {:>8.1}us {:>10.1}",
                name,
                if sync { "per batch" } else { "none" },
                batches as f64 / load_time,
                keys as f64 / load_time,
                pct(0.5).as_secs_f64() * 1e6,
                pct(0.99).as_secs_f64() * 1e6,
                dir_size(dir.path()) as f64 / (1 << 20) as f64
            );
        }
    }
}
