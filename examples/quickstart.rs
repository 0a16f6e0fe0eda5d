//! Quickstart: an exactly-once pipeline on a real local Kafka broker, verified.
//!
//! Delivery semantics: **exactly-once** (the default guarantee). Every order produces one
//! invoice, committed in the same Kafka transaction as the order's consumer offset, so a
//! crash or rebalance can neither lose an invoice nor write one twice — for readers with
//! `isolation.level=read_committed`.
//!
//! Pitfall: a reader with the Java default `read_uncommitted` also sees aborted attempts.
//!
//! Run: `cargo run --release -p kafka-eos-examples --example quickstart` (starts a broker
//! unless `KAFKA_BOOTSTRAP` is set; the first run fetches Kafka's jars with Maven).
//! `RUST_LOG=kafka_eos=debug` shows every transaction; `KAFKA_EOS_JSON_LOGS=1` prints them as
//! JSON. While it runs, Prometheus metrics and health are served on `KAFKA_EOS_OPS_ADDR`
//! (default: a free port on 127.0.0.1): the example prints its own scrape of the key metrics
//! before stopping.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kafka_eos::codec::Json;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder};
use kafka_eos_testkit::admin;
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use kafka_eos_testkit::verify::{verify, VerifyConfig};
use serde::{Deserialize, Serialize};

const ORDERS: u64 = 100_000;
const PARTITIONS: i32 = 4;

#[derive(Serialize, Deserialize)]
pub(crate) struct Order {
    id: u64,
    pub(crate) customer: String,
    cents: i64,
    country: String,
}

#[derive(Serialize, Deserialize)]
struct Invoice {
    order_id: u64,
    customer: String,
    net_cents: i64,
    vat_cents: i64,
    gross_cents: i64,
}

/// VAT in basis points per country.
fn vat_bp(country: &str) -> i64 {
    match country {
        "DE" => 1900,
        "FR" => 2000,
        "NL" => 2100,
        _ => 0,
    }
}

/// The pipeline: order -> invoice, one per order. `builder` brings the connection and the
/// delivery settings; the unit test below and `tests/it/equivalence.rs` run this same
/// definition with the test driver and on a real broker.
pub fn pipeline(builder: PipelineBuilder, orders: &str, invoices: &str) -> PipelineBuilder {
    let mut builder = builder.input_topic(orders);
    let out = builder.output_topic(invoices); // declared once: no topic String per record
    builder.processor(move |ctx, rec| {
        let order: Order = rec.value_as(&Json)?;
        let vat = order.cents * vat_bp(&order.country) / 10_000;
        let invoice = Invoice {
            order_id: order.id,
            customer: order.customer.clone(),
            net_cents: order.cents,
            vat_cents: vat,
            gross_cents: order.cents + vat,
        };
        ctx.emit(OutputRecord::to(&out).key(&order.customer).encode_value(&Json, &invoice)?);
        Ok(())
    })
}

/// Order `id` of the sample data, keyed by customer.
pub(crate) fn order(id: u64) -> Order {
    let countries = ["DE", "FR", "NL", "US"];
    Order {
        id,
        customer: format!("customer-{}", id % 997),
        cents: 100 + (id as i64 * 37) % 50_000,
        country: countries[id as usize % 4].into(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    kafka_eos::ops::init_tracing(std::env::var_os("KAFKA_EOS_JSON_LOGS").is_some());
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("quickstart failed: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    // 1. A real broker: ours (1 node, stopped when this process exits) or KAFKA_BOOTSTRAP.
    let cluster = tokio::task::spawn_blocking(|| Cluster::from_env_or_start(ClusterConfig::default())).await??;
    let bootstrap = cluster.bootstrap_servers();
    let suffix = std::process::id();
    let (orders, invoices) = (format!("orders-{suffix}"), format!("invoices-{suffix}"));

    // 2. Topics and 100,000 sample orders.
    let (b, o, i) = (bootstrap.clone(), orders.clone(), invoices.clone());
    tokio::task::spawn_blocking(move || {
        admin::create_topic(&b, &o, PARTITIONS, 1)?;
        admin::create_topic(&b, &i, PARTITIONS, 1)?;
        admin::produce(
            &b,
            &o,
            (0..ORDERS).map(|id| {
                let order = order(id);
                (None, order.customer.clone().into_bytes(), serde_json::to_vec(&order).expect("json"))
            }),
        )
    })
    .await??;
    println!("produced {ORDERS} orders to {orders} ({PARTITIONS} partitions) on {bootstrap}");

    // 3. The pipeline: order -> invoice, exactly once.
    let builder = Pipeline::builder()
        .bootstrap_servers(&bootstrap)
        .application_id(format!("quickstart-{suffix}"))
        .guarantee(Guarantee::ExactlyOncePerPartition)
        .commit_interval(Duration::from_millis(100))
        .handle_signals(true) // Ctrl-C stops it gracefully
        .ops_address(std::env::var("KAFKA_EOS_OPS_ADDR").unwrap_or_else(|_| "127.0.0.1:0".into()).parse()?);
    let pipeline = pipeline(builder, &orders, &invoices).build()?;
    let handle = pipeline.shutdown_handle();
    let started = Instant::now();
    let running = tokio::spawn(pipeline.run());

    // 4. Wait until the group has committed every order, then stop gracefully.
    let (b, g, t) = (bootstrap.clone(), format!("quickstart-{suffix}"), vec![orders.clone()]);
    tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &g, &t, Duration::from_secs(300))).await??;
    let elapsed = started.elapsed();
    if let Some(addr) = handle.ops_address() {
        let scrape = tokio::task::spawn_blocking(move || scrape(addr)).await??;
        println!("metrics from http://{addr}/metrics (health: http://{addr}/health):");
        for line in scrape.lines().filter(|l| {
            l.starts_with("kafka_eos_commit_total")
                || l.starts_with("kafka_eos_records_in_total")
                || (l.starts_with("kafka_eos_commit_latency_seconds{") && l.contains("quantile=\"0.99\""))
        }) {
            println!("  {line}");
        }
    }
    handle.shutdown();
    let summary = running.await??;
    println!(
        "processed {} orders into {} invoices in {:.2} s ({:.0} records/s), {} transactions committed, {} aborted",
        summary.records_in,
        summary.records_out,
        elapsed.as_secs_f64(),
        summary.records_in as f64 / elapsed.as_secs_f64(),
        summary.transactions_committed,
        summary.transactions_aborted
    );

    // 5. Prove it: every order has exactly one committed invoice.
    let cfg = VerifyConfig::new(&bootstrap, &orders, &invoices);
    let report = tokio::task::spawn_blocking(move || verify(&cfg)).await??;
    drop(cluster);
    println!("{report}");
    Ok(report.is_exactly_once() && report.input_records == ORDERS)
}

/// One plain HTTP GET of `/metrics`.
fn scrape(addr: std::net::SocketAddr) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    Ok(response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default())
}

/// The pipeline without a broker (`cargo test -p kafka-eos-examples --example quickstart`): milliseconds, no Java.
#[cfg(test)]
mod tests {
    use kafka_eos_testkit::driver::{check_replay_safe, TestDriver, TestInput};

    use super::*;

    fn input(id: u64) -> TestInput {
        let o = order(id);
        TestInput::new().partition((id % 4) as i32).key(o.customer.clone()).encode_value(&Json, &o).expect("json")
    }

    #[test]
    fn every_order_gets_one_invoice_with_its_country_vat() {
        let mut driver = TestDriver::new(pipeline(Pipeline::builder(), "orders", "invoices")).unwrap();
        driver.pipe_all((0..8).map(input)).unwrap();
        let invoices = driver.values::<Invoice>("invoices", &Json).unwrap();
        assert_eq!(invoices.len(), 8);
        let de = &invoices[0]; // order 0: DE, 100 cents
        assert_eq!((de.order_id, de.net_cents, de.vat_cents, de.gross_cents), (0, 100, 19, 119));
        let us = &invoices[3]; // order 3: US, no VAT
        assert_eq!((us.vat_cents, us.gross_cents), (0, us.net_cents));
        assert_eq!(driver.output("invoices")[1].key_str().as_deref(), Some("customer-1"));
    }

    #[test]
    fn the_processor_is_replay_safe() {
        let inputs: Vec<_> = (0..100).map(input).collect();
        check_replay_safe(|| pipeline(Pipeline::builder(), "orders", "invoices"), &inputs, 1).unwrap();
    }
}
