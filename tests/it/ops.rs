//! Operations endpoints during a real run: `/metrics` agrees with the run's own summary,
//! `/health` reports the assignment; a slow batch is logged with its timeline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use kafka_eos::Guarantee;

use crate::common::{spawn, topics, unique, warnings};

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the ops server");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// Sums the samples of `metric` whose labels contain `pipeline="<app>"`.
fn sum(scrape: &str, metric: &str, app: &str) -> f64 {
    let label = format!("pipeline=\"{app}\"");
    scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_agree_with_the_run() {
    const RECORDS: u64 = 20_000;
    let t = topics("ops", 4, RECORDS, 100).await;
    let app = unique("ops");
    let run = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).ops_address("127.0.0.1:0".parse().unwrap()));
    t.wait_caught_up(&app, Duration::from_secs(60)).await;
    let addr = run.handle.ops_address().expect("the ops server is bound");
    let summary = run.handle.summary();

    let (status, scrape) = tokio::task::spawn_blocking(move || get(addr, "/metrics")).await.unwrap();
    assert_eq!(status, 200, "{scrape}");
    assert_eq!(sum(&scrape, "kafka_eos_records_in_total", &app), RECORDS as f64, "{scrape}");
    assert_eq!(sum(&scrape, "kafka_eos_records_out_total", &app), summary.records_out as f64);
    assert_eq!(sum(&scrape, "kafka_eos_commit_total", &app), summary.transactions_committed as f64);
    assert_eq!(sum(&scrape, "kafka_eos_rebalances_total", &app), summary.rebalances as f64);
    for name in
        ["kafka_eos_commit_latency_seconds", "kafka_eos_transaction_latency_seconds", "kafka_eos_txn_time_ns_total"]
    {
        assert!(scrape.contains(name), "{name} missing from the scrape");
    }

    let (status, body) = tokio::task::spawn_blocking(move || get(addr, "/health")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).expect("health is JSON");
    assert_eq!(health["healthy"], true);
    let parts = health["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 4, "{body}");
    assert!(parts.iter().all(|p| p["uncommitted_records"] == 0 && p["last_commit_age_ms"].is_u64()), "{body}");

    let final_summary = run.stop().await;
    assert_eq!(final_summary.records_in, RECORDS);
}

/// A batch whose end takes longer than `slow_commit_warning` is logged at `warn` with its
/// timeline; one that ends within it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_slower_than_slow_commit_warning_is_logged_with_its_timeline() {
    let t = topics("slow-commit", 2, 2_000, 100).await;
    let (slow, quiet) = (unique("slow-commit"), unique("quiet-commit"));
    for (app, threshold) in [(&slow, Duration::ZERO), (&quiet, Duration::from_secs(600))] {
        let run = spawn(t.pipeline(app, Guarantee::ExactlyOncePerPartition).slow_commit_warning(threshold));
        t.wait_caught_up(app, Duration::from_secs(120)).await;
        assert_eq!(run.stop().await.records_in, 2_000);
    }
    let logged = warnings(&format!("pipeline={slow} "));
    assert!(!logged.is_empty(), "no slow-batch warning for {slow}");
    for line in &logged {
        assert!(line.starts_with("a batch took longer than slow_commit_warning"), "{line}");
        for field in ["records=", "collect_ms=", "await_acks_ms=", "send_offsets_ms=", "commit_transaction_ms="] {
            assert!(line.contains(field), "{field} missing: {line}");
        }
    }
    assert!(logged.iter().any(|l| l.contains("outcome=committed")), "{logged:#?}");
    assert_eq!(warnings(&format!("pipeline={quiet} ")), Vec::<String>::new());
}
