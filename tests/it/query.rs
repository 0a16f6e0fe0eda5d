//! Queryable state against a real broker: two instances of one pipeline, each with its ops
//! server on an ephemeral port, and `GET /state/<store>/<key>` asked of one of them for the
//! keys of both. The input is written by a librdkafka producer with
//! `partitioner=murmur2_random`, so the test also holds the pipeline's murmur2 to it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kafka_eos::query::Partitioner;
use kafka_eos::{Pipeline, PipelineBuilder};
use kafka_eos_testkit::admin;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use crate::common::{bootstrap, caught_up, spawn, unique, Running};

const PARTITIONS: i32 = 4;
const MERCHANTS: u32 = 40;

/// Payments keyed by merchant (value: cents, in decimal) into the store `revenue`: the
/// merchant's running total, served over HTTP.
fn instance(bootstrap: &str, app: &str, input: &str) -> PipelineBuilder {
    let mut builder = Pipeline::builder()
        .bootstrap_servers(bootstrap)
        .application_id(app)
        .input_topic(input)
        .handle_signals(false)
        .startup_timeout(Duration::from_secs(20))
        .ops_address("127.0.0.1:0".parse().unwrap())
        .advertise_ops_address();
    let revenue = builder.store::<String, i64>("revenue");
    builder.serve_store(&revenue);
    builder.processor(move |ctx, rec| {
        let merchant = String::from_utf8(rec.key.clone().unwrap_or_default())?;
        let cents: i64 = std::str::from_utf8(rec.value.as_deref().unwrap_or_default())?.parse()?;
        let mut store = ctx.store(&revenue);
        let total = store.get(&merchant)?.unwrap_or(0) + cents;
        store.put(&merchant, &total)?;
        Ok(())
    })
}

/// An HTTP/1.1 GET of `path` at `address`: (status, `Location` header, body).
fn get(address: &str, path: &str) -> (u16, Option<String>, String) {
    let mut s = TcpStream::connect(address).expect("connect to the ops server");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response.as_str(), ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let location = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("location").then(|| value.trim().to_string())
    });
    (status, location, body.to_string())
}

/// `GET /state/revenue/<merchant>` at `address`, following a redirect to the owner:
/// (status, body, whether it was redirected).
fn ask(address: &str, merchant: &str) -> (u16, String, bool) {
    let (status, location, body) = get(address, &format!("/state/revenue/{merchant}"));
    if status != 307 {
        return (status, body, false);
    }
    let location = location.expect("a redirect names the owner");
    let rest = location.strip_prefix("http://").expect("an http URL");
    let (owner, path) = rest.split_at(rest.find('/').expect("a path"));
    assert_ne!(owner, address, "an instance never redirects to itself");
    let (status, _, body) = get(owner, path);
    (status, body, true)
}

/// Writes `payments` (merchant, cents) keyed by merchant, partitioned by librdkafka's
/// murmur2 (what the Java client's default partitioner does).
async fn pay(bootstrap: &str, topic: &str, payments: Vec<(String, i64)>) {
    let (b, t) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &b)
            .set("enable.idempotence", "true")
            .set("partitioner", "murmur2_random")
            .create()
            .expect("producer");
        for (merchant, cents) in &payments {
            let value = cents.to_string();
            let record = BaseRecord::to(&t).key(merchant.as_str()).payload(value.as_str());
            p.send(record).map_err(|(e, _)| e).expect("send");
        }
        p.flush(Duration::from_secs(30)).expect("flush");
    })
    .await
    .unwrap();
}

/// The partitions each instance holds, once every partition is held and both hold some.
async fn settled(a: &Running, b: &Running, timeout: Duration) -> (BTreeSet<i32>, BTreeSet<i32>) {
    let deadline = Instant::now() + timeout;
    loop {
        let held = |r: &Running| r.handle.health().partitions.iter().map(|p| p.partition).collect::<BTreeSet<i32>>();
        let (pa, pb) = (held(a), held(b));
        if !pa.is_empty() && !pb.is_empty() && pa.is_disjoint(&pb) && pa.len() + pb.len() == PARTITIONS as usize {
            return (pa, pb);
        }
        assert!(Instant::now() < deadline, "the group did not settle within {timeout:?}: {pa:?} and {pb:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_answers_for_the_keys_of_both_with_their_owners_committed_values() {
    let bootstrap = bootstrap();
    let input = unique("query-in");
    let app = unique("query");
    let (b, i) = (bootstrap.clone(), input.clone());
    tokio::task::spawn_blocking(move || admin::create_topic(&b, &i, PARTITIONS, 1)).await.unwrap().expect("topic");

    let merchants: Vec<String> = (0..MERCHANTS).map(|m| format!("m{m}")).collect();
    let java = Partitioner::murmur2();
    let covered: BTreeSet<i32> = merchants.iter().map(|m| java.partition(m.as_bytes(), PARTITIONS)).collect();
    assert_eq!(covered.len(), PARTITIONS as usize, "the merchants fall in every partition");

    let first = spawn(instance(&bootstrap, &app, &input));
    let second = spawn(instance(&bootstrap, &app, &input));
    let (held_first, held_second) = settled(&first, &second, Duration::from_secs(60)).await;
    println!("first holds {held_first:?}, second {held_second:?}");

    let payments: Vec<(String, i64)> =
        (0..2_000u32).map(|i| (merchants[(i % MERCHANTS) as usize].clone(), i64::from(i) + 1)).collect();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for (merchant, cents) in &payments {
        *expected.entry(merchant.clone()).or_default() += cents;
    }
    pay(&bootstrap, &input, payments).await;
    caught_up(&bootstrap, &app, &input).await;

    // Every merchant through the first instance only: its own keys from its store, the
    // second's by the redirect. The stores are merged just after the offsets commit, and
    // the adverts are read shortly after each assignment: asked again until they agree.
    let address = first.handle.ops_address().expect("the ops server is bound").to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (local, redirected) = loop {
        let (addr, want) = (address.clone(), expected.clone());
        let answers = tokio::task::spawn_blocking(move || {
            want.iter().map(|(m, cents)| (m.clone(), *cents, ask(&addr, m))).collect::<Vec<_>>()
        })
        .await
        .unwrap();
        let wrong: Vec<_> = answers
            .iter()
            .filter(|(_, cents, (status, body, _))| *status != 200 || body.trim().parse::<i64>().ok() != Some(*cents))
            .take(5)
            .collect();
        if wrong.is_empty() {
            let redirected = answers.iter().filter(|(_, _, (_, _, redirected))| *redirected).count();
            break (answers.len() - redirected, redirected);
        }
        assert!(Instant::now() < deadline, "wrong answers (merchant, committed total, answer): {wrong:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("{local} merchants answered by the first instance, {redirected} by the second after a redirect");
    assert!(local > 0 && redirected > 0, "keys of both instances were asked: {local} local, {redirected} redirected");

    // A merchant without a committed payment: its owner says so.
    let addr = address.clone();
    let (status, body, _) = tokio::task::spawn_blocking(move || ask(&addr, "nobody")).await.unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("absent"), "{body}");
    // A store that is not served.
    let addr = address.clone();
    let (status, _, body) = tokio::task::spawn_blocking(move || get(&addr, "/state/nothing/m1")).await.unwrap();
    assert_eq!(status, 404, "{body}");

    first.stop().await;
    second.stop().await;
}
