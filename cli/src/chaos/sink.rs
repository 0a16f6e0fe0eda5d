//! The sink scenarios: instances write each input record's effect to PostgreSQL or Redis
//! instead of an output topic, and the check reads the database's own contents.
//!
//! - **PostgreSQL** (`kafka_eos_postgres`, exactly-once): one row per input record, id =
//!   its position (`topic/partition/offset`), in `chaos_ledger`. Exact when every position
//!   below a partition's end has its row, there is no other row, and the offsets stored
//!   under the application id are the partitions' ends.
//! - **Redis** (`kafka_eos_redis`): `HINCRBY <app>:counts p<partition>-m<offset % 10> 1` per
//!   record, so each counter's exact value follows from the partition's end offset. With
//!   dedup a counter above it is a duplicate; without, it is the drift, reported. Below it
//!   is a loss either way.

use std::collections::HashMap;
use std::time::Duration;

use kafka_eos::processor::ProcessError;
use kafka_eos::{InputRecord, PipelineBuilder};
use kafka_eos_postgres::{row, PostgresSink, TableSpec};
use kafka_eos_redis::{Increment, RedisCounterSink, RedisSinkError};
use kafka_eos_testkit::postgres::{Postgres, PostgresConfig};
use kafka_eos_testkit::redis::{Redis, RedisConfig};
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::workload::SinkKind;

const TABLE: &str = "CREATE TABLE chaos_ledger (id text PRIMARY KEY, part integer NOT NULL, off bigint NOT NULL)";
const DEDUP_TTL: Duration = Duration::from_secs(3600);

/// The pipeline of an instance writing to the sink `spec` names (`postgres=<conn>`,
/// `redis=<url>`, `redis-plain=<url>`); `before` runs first on every record (stalls,
/// deliberate failures).
pub(crate) fn instance_pipeline(
    mut builder: PipelineBuilder,
    spec: &str,
    app: &str,
    before: impl Fn(&InputRecord) -> Result<(), ProcessError> + Clone + Send + 'static,
) -> kafka_eos::Result<PipelineBuilder> {
    let bad = || kafka_eos::Error::Config(format!("--sink {spec:?}: expected postgres=, redis= or redis-plain="));
    let (kind, target) = spec.split_once('=').ok_or_else(bad)?;
    let (target, app) = (target.to_string(), app.to_string());
    Ok(match kind {
        "postgres" => {
            let ledger = builder.sink(move || {
                let (conn, group) = (target.clone(), app.clone());
                async move { PostgresSink::connect(&conn, group, &TableSpec::new("chaos_ledger", &["id"])).await }
            });
            builder.processor(move |ctx, r| {
                before(r)?;
                ctx.sink(&ledger, row![r.origin(), r.partition, r.offset]);
                Ok(())
            })
        }
        "redis" | "redis-plain" => {
            let dedup = kind == "redis";
            let hash = format!("{app}:counts");
            let counter = builder.sink(move || {
                let (url, ns) = (target.clone(), app.clone());
                async move {
                    let sink = RedisCounterSink::connect(&url, &ns, DEDUP_TTL).await?;
                    Ok::<_, RedisSinkError>(if dedup { sink } else { sink.without_dedup() })
                }
            });
            builder.processor(move |ctx, r| {
                before(r)?;
                ctx.sink(&counter, Increment::new(&hash, field(r.partition, r.offset), 1));
                Ok(())
            })
        }
        _ => return Err(bad()),
    })
}

fn field(partition: i32, offset: i64) -> String {
    format!("p{partition}-m{}", offset % 10)
}

/// A sink scenario's server.
pub(crate) enum Server {
    Postgres(Postgres),
    Redis { redis: Redis, dedup: bool },
}

/// What the check found: anomalies by class, and notes.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub lost: u64,
    pub duplicate: u64,
    pub other: u64,
    pub records: u64,
    pub notes: Vec<String>,
}

impl Server {
    /// Starts the server (PostgreSQL: with the ledger table).
    pub(crate) fn start(kind: SinkKind) -> Result<Server, String> {
        match kind {
            SinkKind::Postgres => {
                let pg = Postgres::start(PostgresConfig::default()).map_err(|e| format!("starting PostgreSQL: {e}"))?;
                pg.psql("postgres", TABLE).map_err(|e| format!("creating the ledger table: {e}"))?;
                Ok(Server::Postgres(pg))
            }
            SinkKind::Redis { dedup } => {
                let redis = Redis::start(RedisConfig::default()).map_err(|e| format!("starting Redis: {e}"))?;
                Ok(Server::Redis { redis, dedup })
            }
        }
    }

    /// The PostgreSQL server, if it is one.
    pub(crate) fn postgres(&self) -> Option<&Postgres> {
        match self {
            Server::Postgres(pg) => Some(pg),
            Server::Redis { .. } => None,
        }
    }

    /// The instances' `--sink` argument.
    pub(crate) fn spec(&self) -> String {
        match self {
            Server::Postgres(pg) => format!("postgres={}", pg.connection_string("postgres")),
            Server::Redis { redis, dedup: true } => format!("redis={}", redis.url()),
            Server::Redis { redis, dedup: false } => format!("redis-plain={}", redis.url()),
        }
    }

    /// SIGKILLs the server and starts it again after `down`.
    pub(crate) fn crash(&mut self, down: Duration) -> Result<(), String> {
        let r = match self {
            Server::Postgres(pg) => {
                pg.kill();
                std::thread::sleep(down);
                pg.restart()
            }
            Server::Redis { redis, .. } => {
                redis.kill();
                std::thread::sleep(down);
                redis.restart()
            }
        };
        r.map_err(|e| format!("restarting the sink's server: {e}"))
    }

    /// Compares the server's contents with the input, whose partitions end at `ends`.
    pub(crate) fn check(&self, app: &str, input: &str, ends: &[i64]) -> Result<Found, String> {
        let mut found = Found { records: ends.iter().map(|e| *e as u64).sum(), ..Found::default() };
        match self {
            Server::Postgres(pg) => {
                let psql = |sql: &str| pg.psql("postgres", sql).map_err(|e| format!("psql: {e}"));
                for (p, end) in ends.iter().enumerate() {
                    let prefix = format!("{input}/{p}/");
                    let out = psql(&format!(
                        "SELECT count(*) FILTER (WHERE off >= 0 AND off < {end} AND id = '{prefix}' || off) || ' ' || \
                         count(*) FILTER (WHERE NOT (off >= 0 AND off < {end} AND id = '{prefix}' || off)) \
                         FROM chaos_ledger WHERE part = {p}"
                    ))?;
                    let v: Vec<u64> = out.split_whitespace().filter_map(|x| x.parse().ok()).collect();
                    let (good, bad) = (v.first().copied().unwrap_or(0), v.get(1).copied().unwrap_or(0));
                    found.lost += (*end as u64).saturating_sub(good);
                    found.other += bad;
                    let stored = psql(&format!(
                        "SELECT coalesce(next_offset, -1) FROM kafka_eos_offsets \
                         WHERE group_id = '{app}' AND topic = '{input}' AND partition = {p}"
                    ))?;
                    if stored.trim() != end.to_string() {
                        found.other += 1;
                        found.notes.push(format!("partition {p}: stored offset {:?}, end {end}", stored.trim()));
                    }
                }
                let rows = psql("SELECT count(*) FROM chaos_ledger")?;
                found.notes.push(format!("postgres: {} rows for {} input records", rows.trim(), found.records));
            }
            Server::Redis { redis, dedup } => {
                let mut con = kafka_eos_redis::redis::Client::open(redis.url())
                    .and_then(|c| c.get_connection())
                    .map_err(|e| format!("connecting to Redis: {e}"))?;
                let counts: HashMap<String, i64> = kafka_eos_redis::redis::cmd("HGETALL")
                    .arg(format!("{app}:counts"))
                    .query(&mut con)
                    .map_err(|e| format!("HGETALL: {e}"))?;
                let mut drift = 0i64;
                for (p, end) in ends.iter().enumerate() {
                    for m in 0..10 {
                        let want = if *end > m { (end - 1 - m) / 10 + 1 } else { 0 };
                        let got = counts.get(&field(p as i32, m)).copied().unwrap_or(0);
                        if got < want {
                            found.lost += (want - got) as u64;
                        } else if *dedup {
                            found.duplicate += (got - want) as u64;
                        }
                        drift += got - want;
                    }
                }
                let total: i64 = counts.values().sum();
                found.notes.push(format!(
                    "redis ({}): counted {total} for {} input records, drift {drift:+}",
                    if *dedup { "with dedup" } else { "without dedup" },
                    found.records
                ));
            }
        }
        Ok(found)
    }
}

/// The end offset of every partition of `topic`.
pub(crate) fn end_offsets(client: &kafka_eos::admin::Client, topic: &str, partitions: i32) -> Result<Vec<i64>, String> {
    let consumer: BaseConsumer = client.config().create().map_err(|e| format!("consumer: {e}"))?;
    (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(30))
                .map(|(_, high)| high)
                .map_err(|e| format!("watermarks of {topic}/{p}: {e}"))
        })
        .collect()
}
