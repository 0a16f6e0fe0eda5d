//! Redis, effectively-once: replays are no-ops within the TTL, count again after it, and
//! a refused batch applies nothing.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use kafka_eos_redis::redis::AsyncCommands;
use kafka_eos_redis::{event_id, Applied, Event, RedisCounterSink};
use kafka_eos_testkit::redis::{Redis, RedisConfig};

use crate::common::unique;

async fn server() -> &'static Redis {
    static R: OnceLock<Redis> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        R.get_or_init(|| Redis::start(RedisConfig::default()).unwrap_or_else(|e| panic!("cannot start Redis: {e}")))
    })
    .await
    .unwrap()
}

/// `n` page views from offset `from`: each increments `<hash>` field `page-<offset % 5>`.
fn views(hash: &str, from: i64, n: i64) -> Vec<Event> {
    (from..from + n).map(|o| Event::new(event_id("views", 0, o)).incr(hash, format!("page-{}", o % 5), 1)).collect()
}

/// The integer fields of `hash`.
async fn counts(sink: &mut RedisCounterSink, hash: &str) -> HashMap<String, i64> {
    let all: HashMap<String, String> = sink.connection().hgetall(hash).await.unwrap();
    all.into_iter().filter_map(|(k, v)| Some((k, v.parse().ok()?))).collect()
}

fn total(c: &HashMap<String, i64>) -> i64 {
    c.values().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_replay_within_the_ttl_changes_nothing() {
    let r = server().await;
    let ns = unique("pv");
    let hash = format!("{ns}:counts");
    let mut s = RedisCounterSink::connect(&r.url(), &ns, Duration::from_secs(600)).await.unwrap();
    assert_eq!(s.apply(&views(&hash, 0, 100)).await.unwrap(), Applied { applied: 100, duplicates: 0 });
    let first = counts(&mut s, &hash).await;
    assert_eq!(total(&first), 100);
    assert_eq!(first["page-0"], 20);

    assert_eq!(s.apply(&views(&hash, 0, 100)).await.unwrap(), Applied { applied: 0, duplicates: 100 });
    assert_eq!(counts(&mut s, &hash).await, first);

    // A replay that overlaps: only the new half counts (the dedup key is per event).
    assert_eq!(s.apply(&views(&hash, 50, 100)).await.unwrap(), Applied { applied: 50, duplicates: 50 });
    assert_eq!(total(&counts(&mut s, &hash).await), 150);

    // An id twice in one batch is applied once.
    let twice = [Event::new("dup").incr(&hash, "x", 1), Event::new("dup").incr(&hash, "x", 1)];
    assert_eq!(s.apply(&twice).await.unwrap(), Applied { applied: 1, duplicates: 1 });
    let ttl: i64 = s.connection().pttl(format!("{ns}:dedup:dup")).await.unwrap();
    assert!(ttl > 590_000 && ttl <= 600_000, "dedup key TTL {ttl} ms");

    // Without dedup, the same replay counts twice: the drift the dedup step removes.
    s.apply_without_dedup(&views(&hash, 0, 10)).await.unwrap();
    s.apply_without_dedup(&views(&hash, 0, 10)).await.unwrap();
    assert_eq!(total(&counts(&mut s, &hash).await), 150 + 1 + 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_past_the_ttl_a_replay_counts_again() {
    let r = server().await;
    let ns = unique("pv");
    let hash = format!("{ns}:counts");
    let mut s = RedisCounterSink::connect(&r.url(), &ns, Duration::from_millis(300)).await.unwrap();
    s.apply(&views(&hash, 0, 10)).await.unwrap();
    assert_eq!(s.apply(&views(&hash, 0, 10)).await.unwrap().applied, 0, "within the TTL");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(s.apply(&views(&hash, 0, 10)).await.unwrap().applied, 10, "past the TTL the replay counts");
    assert_eq!(total(&counts(&mut s, &hash).await), 20, "the documented over-count past the window");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_refused_batch_applies_nothing() {
    let r = server().await;
    let ns = unique("pv");
    let hash = format!("{ns}:counts");
    let mut s = RedisCounterSink::connect(&r.url(), &ns, Duration::from_secs(600)).await.unwrap();
    let _: () = s.connection().hset(&hash, "broken", "not a number").await.unwrap();
    let string_key = format!("{ns}:a-string");
    let _: () = s.connection().set(&string_key, "x").await.unwrap();

    // The bad increment comes last: without the checks, the first 10 events would have
    // been applied (and marked) before Redis refused it.
    for bad in [Event::new("bad-1").incr(&hash, "broken", 1), Event::new("bad-2").incr(&string_key, "f", 1)] {
        let mut batch = views(&hash, 0, 10);
        batch.push(bad);
        let err = s.apply(&batch).await.unwrap_err().to_string();
        assert!(err.contains("nothing applied"), "{err}");
        let c = counts(&mut s, &hash).await;
        assert!(c.is_empty(), "increments were applied: {c:?}");
        let first_key = s.dedup_key(&event_id("views", 0, 0));
        let marked: i64 = s.connection().exists(first_key).await.unwrap();
        assert_eq!(marked, 0, "a dedup key was set: the retry would skip the event");
    }
    // Once fixed, the same events apply in full.
    assert_eq!(s.apply(&views(&hash, 0, 10)).await.unwrap().applied, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dedup_keys_and_counts_survive_a_redis_crash() {
    let r = tokio::task::spawn_blocking(|| {
        Redis::start(RedisConfig::default()).unwrap_or_else(|e| panic!("cannot start Redis: {e}"))
    })
    .await
    .unwrap();
    let hash = "pv:counts";
    let mut s = RedisCounterSink::connect(&r.url(), "pv", Duration::from_secs(600)).await.unwrap();
    s.apply(&views(hash, 0, 100)).await.unwrap();
    let r = tokio::task::spawn_blocking(move || {
        let mut r = r;
        r.kill();
        r.restart().expect("restart after the crash");
        r
    })
    .await
    .unwrap();
    // The connection manager reconnects (the first call after the crash may fail).
    let mut replay = s.apply(&views(hash, 0, 100)).await;
    for _ in 0..20 {
        if replay.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        replay = s.apply(&views(hash, 0, 100)).await;
    }
    assert_eq!(replay.expect("Redis back after restart").applied, 0, "dedup keys lost in the crash");
    assert_eq!(total(&counts(&mut s, hash).await), 100);
    tokio::task::spawn_blocking(move || drop(r)).await.unwrap();
}
