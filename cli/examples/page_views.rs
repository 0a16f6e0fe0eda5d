//! Page views: hourly view count per page under **at-least-once**, with a batch
//! reconciliation that reports the drift — "stream for latency, batch for correctness".
//!
//! Delivery semantics: **at-least-once**. Outputs and the state's changelog are written
//! without a transaction and acknowledged before the input offsets are committed, so a
//! crash loses nothing, but records processed again after a crash count again: the running
//! counts can drift *upwards* (never downwards). That is the trade this pipeline makes for
//! lower latency than exactly-once (no transaction per batch; see `docs/semantics.md` for
//! what each guarantee costs). The batch job then recomputes the exact counts from the raw
//! events, and the drift it reports is what a dashboard fed by the stream was off by.
//!
//! Each update emits the page-hour's new running count keyed `page/hour`: downstream, the
//! latest record per key (a compacted topic, an upsert) is the current count.
//!
//! With `--redis`, the views are also counted **in Redis** (a local server the test kit
//! starts; Debian's `redis-server` package) by `kafka_eos_redis::RedisCounterSink`
//! (`HINCRBY` per view), twice: with its dedup step (a key per input record with a TTL, in
//! the same atomic script: effectively-once) and without it (at-least-once). Each counting
//! pipeline reads the input, then a second consumer group replays all of it — what a crash
//! replays after its last commit, taken to the extreme — and the drift of each is printed:
//! `redis drift after a full replay: with dedup +0 views (0 %), without dedup +<n> views`.
//!
//! Run: `cargo run --release --example page_views [events] [--redis]` (starts a broker unless
//! `KAFKA_BOOTSTRAP` is set). The drift line of the stream is `drift: <n> of <m> page-hours off, ...`.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::time::Duration;

use kafka_eos::codec::Json;
use kafka_eos::operators::Aggregate;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder};
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};
use rdkafka::Message;
use serde::{Deserialize, Serialize};

const PARTITIONS: i32 = 4;
const HOUR_MS: i64 = 3_600_000;

#[derive(Serialize, Deserialize)]
pub(crate) struct PageView {
    pub(crate) page: String,
    user: u32,
    time_ms: i64,
}

#[derive(Serialize, Deserialize)]
struct HourlyViews {
    page: String,
    /// Hours since the epoch.
    hour: i64,
    views: u64,
}

/// The pipeline: page views -> running count per page-hour, at-least-once. `builder` brings
/// the connection settings; the unit test below and `tests/it/equivalence.rs` run this
/// same definition with the test driver and on a real broker.
pub fn pipeline(builder: PipelineBuilder, views: &str, counts: &str) -> PipelineBuilder {
    let mut builder = builder.input_topic(views).guarantee(Guarantee::AtLeastOnce);
    let hourly = Aggregate::<(String, i64), u64>::new(&mut builder, "hourly-views");
    let out = builder.output_topic(counts);
    builder.processor(move |ctx, rec| {
        let v: PageView = rec.value_as(&Json)?;
        let key = (v.page, v.time_ms.div_euclid(HOUR_MS));
        let views = hourly.update(ctx, &key, |n| *n += 1)?;
        let value = HourlyViews { page: key.0.clone(), hour: key.1, views };
        ctx.emit(OutputRecord::to(&out).key(format!("{}/{}", key.0, key.1)).encode_value(&Json, &value)?);
        Ok(())
    })
}

/// View `i` of `events` (24 hours of views over 50 pages), keyed by page (a page's views
/// share a partition).
pub(crate) fn view(i: u64, events: u64) -> PageView {
    PageView {
        page: format!("/page/{}", (i * 7919) % 50),
        user: (i % 5000) as u32,
        time_ms: 1_767_225_600_000 + (i as i64 * 24 * HOUR_MS) / events as i64,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    kafka_eos::ops::init_tracing(std::env::var_os("KAFKA_EOS_JSON_LOGS").is_some());
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("page_views failed: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let with_redis = args.iter().any(|a| a == "--redis");
    let events: u64 = args.iter().find(|a| !a.starts_with("--")).map(|n| n.parse()).transpose()?.unwrap_or(100_000);
    let cluster = tokio::task::spawn_blocking(|| Cluster::from_env_or_start(ClusterConfig::default())).await??;
    let bootstrap = cluster.bootstrap_servers();
    let suffix = std::process::id();
    let (views, counts, app) =
        (format!("page-views-{suffix}"), format!("page-counts-{suffix}"), format!("page-views-{suffix}"));

    let (b, v, c) = (bootstrap.clone(), views.clone(), counts.clone());
    tokio::task::spawn_blocking(move || {
        let admin = admin::Client::new(&b);
        admin.create_topic(&v, PARTITIONS, 1)?;
        admin.create_topic_with(&c, PARTITIONS, 1, &[("cleanup.policy", "compact")])?;
        // 24 hours of views over 50 pages, keyed by page (a page's views share a partition).
        admin.produce(
            &v,
            (0..events).map(|i| {
                let view = view(i, events);
                (None, view.page.clone().into_bytes(), serde_json::to_vec(&view).expect("json"))
            }),
        )
    })
    .await??;
    println!("produced {events} page views to {views}");

    let builder = Pipeline::builder().bootstrap_servers(&bootstrap).application_id(&app);
    let pipeline = pipeline(builder, &views, &counts).build()?;
    let s =
        admin::run_until_caught_up(pipeline, &bootstrap, &app, std::slice::from_ref(&views), Duration::from_secs(300))
            .await?;
    println!(
        "streamed {} views into {} count updates ({} changelog records)",
        s.records_in, s.records_out, s.changelog_records
    );

    // The batch job: exact counts from the raw events, against the latest streamed count.
    let cfg = VerifyConfig::new(&bootstrap, &views, &counts);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let (v, c) = (views.clone(), counts.clone());
    let (batch, streamed) = tokio::task::spawn_blocking(move || {
        let mut batch: BTreeMap<(String, i64), u64> = BTreeMap::new();
        read_to_end(&cfg, &v, deadline, |m| {
            if let Some(Ok(v)) = m.payload().map(serde_json::from_slice::<PageView>) {
                *batch.entry((v.page, v.time_ms.div_euclid(HOUR_MS))).or_default() += 1;
            }
        })?;
        let mut streamed: HashMap<(String, i64), u64> = HashMap::new();
        read_to_end(&cfg, &c, deadline, |m| {
            if let Some(Ok(h)) = m.payload().map(serde_json::from_slice::<HourlyViews>) {
                streamed.insert((h.page, h.hour), h.views); // the latest per key wins
            }
        })?;
        Ok::<_, kafka_eos::Error>((batch, streamed))
    })
    .await??;
    if with_redis {
        redis_counts::run(&bootstrap, &views, &app, events).await?;
    }
    drop(cluster);
    let off = batch.iter().filter(|(k, n)| streamed.get(*k) != Some(n)).count();
    let (exact, stream_total) = (batch.values().sum::<u64>(), streamed.values().sum::<u64>());
    let drift = stream_total as f64 / exact.max(1) as f64 - 1.0;
    println!(
        "drift: {off} of {} page-hours off, {stream_total} views streamed vs {exact} in batch ({:+.3} %)",
        batch.len(),
        drift * 100.0
    );
    Ok(())
}

/// Counting the views in Redis, with and without the sink's dedup step.
pub(crate) mod redis_counts {
    use std::time::Duration;

    use kafka_eos::codec::Json;
    use kafka_eos::{Guarantee, Pipeline, PipelineBuilder};
    use kafka_eos_redis::{Increment, RedisCounterSink, RedisSinkError};
    use kafka_eos_testkit::admin;
    use kafka_eos_testkit::redis::{Redis, RedisConfig};

    use super::{PageView, HOUR_MS};

    /// Counts `views` into Redis under namespace `ns` with consumer group `group`.
    async fn count(
        bootstrap: &str,
        views: &str,
        group: &str,
        url: &str,
        ns: &str,
        dedup: bool,
    ) -> kafka_eos::Result<()> {
        let builder = Pipeline::builder().bootstrap_servers(bootstrap).application_id(group);
        let pipeline = pipeline(builder, views, url, ns, dedup).build()?;
        admin::run_until_caught_up(pipeline, bootstrap, group, &[views.to_string()], Duration::from_secs(300)).await?;
        Ok(())
    }

    /// The counting pipeline: each view of `views` is one `HINCRBY` of its page-hour in the
    /// hash `<ns>:views` of the Redis server at `url` (`builder` brings the connection).
    pub fn pipeline(mut builder: PipelineBuilder, views: &str, url: &str, ns: &str, dedup: bool) -> PipelineBuilder {
        let (url, ns) = (url.to_string(), ns.to_string());
        let hash = format!("{ns}:views");
        let counter = builder.sink(move || {
            let (url, ns) = (url.clone(), ns.clone());
            // A day's TTL: far longer than any replay here takes to come.
            async move {
                let sink = RedisCounterSink::connect(&url, &ns, Duration::from_secs(86_400)).await?;
                Ok::<_, RedisSinkError>(if dedup { sink } else { sink.without_dedup() })
            }
        });
        builder.input_topic(views).guarantee(Guarantee::AtLeastOnce).processor(move |ctx, rec| {
            let v: PageView = rec.value_as(&Json)?;
            let field = format!("{}/{}", v.page, v.time_ms.div_euclid(HOUR_MS));
            ctx.sink(&counter, Increment::new(&hash, field, 1));
            Ok(())
        })
    }

    /// The sum of the counters in `<ns>:views`.
    fn total(redis: &Redis, ns: &str) -> Result<u64, Box<dyn std::error::Error>> {
        Ok(redis.hash_sum(&format!("{ns}:views"))? as u64)
    }

    pub async fn run(bootstrap: &str, views: &str, app: &str, events: u64) -> Result<(), Box<dyn std::error::Error>> {
        let redis = tokio::task::spawn_blocking(|| Redis::start(RedisConfig::default())).await??;
        let mut line = Vec::new();
        for dedup in [true, false] {
            let ns = format!("{app}-{}", if dedup { "dedup" } else { "plain" });
            count(bootstrap, views, &format!("{ns}-first"), &redis.url(), &ns, dedup).await?;
            count(bootstrap, views, &format!("{ns}-replay"), &redis.url(), &ns, dedup).await?;
            let drift = total(&redis, &ns)? as i64 - events as i64;
            let pct = drift as f64 * 100.0 / events.max(1) as f64;
            line.push(format!("{} {drift:+} views ({pct:+.1} %)", if dedup { "with dedup" } else { "without dedup" }));
            if dedup && drift != 0 {
                println!("redis drift after a full replay: {}", line.join(", "));
                return Err(format!("the dedup step let {drift} views drift").into());
            }
        }
        println!("redis drift after a full replay: {}", line.join(", "));
        Ok(())
    }
}

/// The pipeline without a broker (`cargo test --example page_views`): milliseconds, no Java.
#[cfg(test)]
mod tests {
    use kafka_eos_testkit::driver::{check_replay_safe, TestDriver, TestInput};

    use super::*;

    fn input(i: u64, events: u64) -> TestInput {
        let v = view(i, events);
        TestInput::new().partition((i % 4) as i32).key(v.page.clone()).encode_value(&Json, &v).expect("json")
    }

    #[test]
    fn each_view_emits_its_page_hour_running_count() {
        let mut driver = TestDriver::new(pipeline(Pipeline::builder(), "views", "counts")).unwrap();
        // Views 0, 50 and 5,000 of 10,000 are all of /page/0; the last one twelve hours later.
        for i in [0, 50, 5_000] {
            driver.pipe(input(i, 10_000).partition(0)).unwrap();
        }
        let counts = driver.values::<HourlyViews>("counts", &Json).unwrap();
        let got: Vec<_> = counts.iter().map(|c| (c.page.as_str(), c.hour % 24, c.views)).collect();
        assert_eq!(got, [("/page/0", 0, 1), ("/page/0", 0, 2), ("/page/0", 12, 1)]);
        let store = driver.store_handle::<(String, i64), u64>("hourly-views").unwrap();
        assert_eq!(driver.store(&store, 0).entries().unwrap().len(), 2);
    }

    #[test]
    fn the_processor_is_replay_safe() {
        let inputs: Vec<_> = (0..200).map(|i| input(i, 200)).collect();
        check_replay_safe(|| pipeline(Pipeline::builder(), "views", "counts"), &inputs, 2).unwrap();
    }
}
