//! Financial close: payment events → daily revenue per merchant, exactly once, reconciled.
//!
//! Delivery semantics: **exactly-once** with state. Each payment's effect on its
//! merchant-day total is committed in the same Kafka transaction as the consumer offset and
//! the state change (the changelog record), so a crash or a rebalance can neither count a
//! payment twice nor lose one. Days are **business days in Europe/Berlin** (the 23-hour
//! 2026-03-29 is in the generated period). Duplicated `event_id`s in the *input* (an upstream
//! retry) are dropped by a dedup operator; a payment for a day already closed **corrects**
//! it (the day is emitted again, revision + 1) within a 3-day retention, and goes to a
//! late-payments topic past it. Each revision is emitted once, keyed by `merchant/date`, so
//! a downstream upsert (or a compacted topic) holds the latest figure.
//!
//! The pipeline itself is in `pipeline.rs`, beside this file: dedup → merchant fee (a join
//! with the merchant table, a compacted topic) → Berlin-day tumbling window with
//! corrections → output (the chaos suite runs the same file, through
//! `kafka_eos_cli::workloads::financial_close`, which also holds the input generator and the
//! batch reconciliation used here). This example starts a broker (unless `KAFKA_BOOTSTRAP`
//! is set), writes the merchant table and 50,000 payments (+5 % duplicates, ~1 % two days
//! late, ~0.2 % six days late) to 4 partitions, runs the pipeline until it has consumed
//! everything and its timers have closed the last day (no end-of-period heartbeat is
//! written: the idle partitions close it), then recomputes every merchant-day in batch from
//! the raw payments and the merchant table and compares the latest revision's totals and
//! fees to the cent. Its last line is
//! `reconciled: <n> merchant-days (<c> corrected), 0 mismatches` (exit code 1 on any mismatch).
//!
//! With `--postgres`, a second, stateless pipeline reads the same payments and posts a
//! **ledger to PostgreSQL** (a local server the test kit starts; Debian's `postgresql`
//! package): one row per payment, upserted by `event_id` (so an upstream redelivery
//! overwrites its own row), with the input offsets in the same database transaction
//! (`kafka_eos_postgres`, an exactly-once sink: no Kafka transaction needed). The ledger is
//! then reconciled with SQL against the batch recomputation:
//! `ledger (postgres): <n> payments, <cents> cents, matches the batch recomputation`.
//!
//! While it runs, each merchant's **running revenue** (a store of the pipeline) is served on
//! the ops server, `GET /state/running-revenue/<merchant>`; once the pipeline has caught up,
//! every merchant's is asked over HTTP and checked against the batch recomputation:
//! `served: running revenue of <n> merchants over HTTP, matches the batch recomputation`.
//!
//! Run: `cargo run --release --example financial_close [payments] [--postgres]`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kafka_eos::query::Partitioner;
use kafka_eos::{Guarantee, Pipeline};
use kafka_eos_cli::workloads::financial_close::{self, Generate, Topics};
use kafka_eos_testkit::admin;
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use kafka_eos_testkit::verify::VerifyConfig;

const PARTITIONS: i32 = 4;
/// Merchants in the generated payments (ids 0..).
const MERCHANTS: u32 = 200;

#[tokio::main]
async fn main() -> ExitCode {
    kafka_eos::ops::init_tracing(std::env::var_os("KAFKA_EOS_JSON_LOGS").is_some());
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("financial_close failed: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let with_postgres = args.iter().any(|a| a == "--postgres");
    let payments: u64 = args.iter().find(|a| !a.starts_with("--")).map(|n| n.parse()).transpose()?.unwrap_or(50_000);
    let cluster = tokio::task::spawn_blocking(|| Cluster::from_env_or_start(ClusterConfig::default())).await??;
    let bootstrap = cluster.bootstrap_servers();
    let suffix = std::process::id().to_string();
    let topics = Topics::with_suffix(&suffix);
    let app = format!("financial-close-{suffix}");

    let (b, t) = (bootstrap.clone(), topics.clone());
    let generated = tokio::task::spawn_blocking(move || {
        let admin = admin::Client::new(&b);
        t.create(&admin, PARTITIONS, 1, &[])?;
        let g = Generate { payments, merchants: MERCHANTS, ..Generate::default() };
        financial_close::write_merchants(&admin, &t.merchants, PARTITIONS, &g)?;
        // No end-of-period heartbeats: the last day closes by its timer once the partitions
        // are idle (pipeline.rs).
        financial_close::generate(&admin, &t.payments, PARTITIONS, &g, 0..payments, false)
    })
    .await??;
    println!(
        "produced {} payments ({} redelivered copies, {} records) to {}",
        payments, generated.duplicates, generated.records, topics.payments
    );

    let (builder, running) = financial_close::pipeline_with_running_revenue(Pipeline::builder(), &topics);
    let mut builder = builder
        .bootstrap_servers(&bootstrap)
        .application_id(&app)
        .guarantee(Guarantee::ExactlyOncePerPartition)
        .commit_interval(Duration::from_millis(100))
        .ops_address("127.0.0.1:0".parse()?)
        // The generator writes merchant m to partition m % n, not by the key's hash.
        .input_partitioner(Partitioner::custom(|key, n| {
            let id = std::str::from_utf8(key).ok().and_then(|k| k.parse::<i64>().ok());
            id.map_or(0, |m| (m % i64::from(n)) as i32)
        }));
    builder.serve_store(&running);
    let pipeline = builder.build()?;
    let handle = pipeline.shutdown_handle();
    let served = served::ask_when_caught_up(handle, &bootstrap, &app, &topics.payments, MERCHANTS);
    let started = Instant::now();
    let main = async {
        let t = vec![topics.payments.clone()];
        // Caught up, the last days are still open: they close by timer IDLE_CLOSE later.
        let quiet = financial_close::IDLE_CLOSE + Duration::from_secs(3);
        let s = admin::run_until_settled(pipeline, &bootstrap, &app, &t, Duration::from_secs(300), quiet).await?;
        Ok::<_, Box<dyn std::error::Error>>((s, started.elapsed()))
    };
    let ledger = async {
        match with_postgres {
            true => Some(ledger::start(&bootstrap, &topics.payments, &format!("{app}-ledger")).await).transpose(),
            false => Ok(None),
        }
    };
    // They run side by side; any one's error ends the example at once.
    let ((s, elapsed), ledger, served) = tokio::try_join!(main, ledger, served)?;
    println!(
        "processed {} records in {:.2} s (with the wait for the last day's close): {} duplicates dropped, \
         {} late payments routed, {} daily totals emitted, {} changelog records in {} transactions",
        s.records_in,
        elapsed.as_secs_f64(),
        s.duplicates_dropped,
        s.late_records,
        s.records_out - s.late_records,
        s.changelog_records,
        s.transactions_committed
    );

    let mut cfg = VerifyConfig::new(&bootstrap, &topics.payments, &topics.revenue);
    cfg.timeout = Duration::from_secs(120);
    let t = topics.clone();
    let rec = tokio::task::spawn_blocking(move || financial_close::reconcile(&cfg, &t)).await??;
    drop(cluster);
    println!(
        "batch recomputation: {} distinct payments ({} cents, {} cents of fees at the merchant table's rates), {} \
         redelivered copies, {} late payments",
        rec.payments, rec.total_cents, rec.fee_cents, rec.input_duplicates, rec.late_payments
    );
    println!("{rec}");
    let mut exact = rec.is_exact() & served::matches(&served, &rec);
    if let Some(ledger) = ledger {
        exact &= ledger.reconcile(&rec).await?;
    }
    Ok(exact)
}

/// The running revenue served over HTTP, asked once the pipeline has caught up.
mod served {
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use kafka_eos::ShutdownHandle;
    use kafka_eos_cli::workloads::financial_close::{Reconciliation, RUNNING_STORE};
    use kafka_eos_testkit::admin;

    /// Waits until the group has read every payment, then asks the ops server for each of
    /// merchants `0..merchants`' running revenue (`None`: not served, `404`).
    pub async fn ask_when_caught_up(
        handle: ShutdownHandle,
        bootstrap: &str,
        group: &str,
        payments: &str,
        merchants: u32,
    ) -> Result<BTreeMap<u32, Option<i64>>, Box<dyn std::error::Error>> {
        let (b, g, t) = (bootstrap.to_string(), group.to_string(), vec![payments.to_string()]);
        loop {
            let (b, g, t) = (b.clone(), g.clone(), t.clone());
            let lag = tokio::task::spawn_blocking(move || admin::group_lag(&b, &g, &t)).await?;
            if matches!(lag, Ok(0)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // A commit's state is written locally right after its offsets: leave it that instant.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let address = handle.ops_address().ok_or("the ops server is not bound")?.to_string();
        let asked = tokio::task::spawn_blocking(move || -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
            let mut out = BTreeMap::new();
            for m in 0..merchants {
                let (status, body) = get(&address, &format!("/state/{RUNNING_STORE}/{m}"))?;
                let value = match status {
                    200 => Some(body.trim().parse::<i64>()?),
                    404 => None,
                    other => return Err(format!("merchant {m}: HTTP {other}: {body}").into()),
                };
                out.insert(m, value);
            }
            Ok(out)
        })
        .await?;
        asked.map_err(|e| e as Box<dyn std::error::Error>)
    }

    /// Prints and returns whether every served figure equals the batch recomputation's.
    pub fn matches(served: &BTreeMap<u32, Option<i64>>, rec: &Reconciliation) -> bool {
        let wrong: Vec<String> = served
            .iter()
            .filter(|(m, got)| got.unwrap_or(0) != rec.merchant_cents.get(m).copied().unwrap_or(0))
            .map(|(m, got)| format!("merchant {m}: served {got:?}, batch {:?}", rec.merchant_cents.get(m)))
            .collect();
        match wrong.first() {
            None => println!(
                "served: running revenue of {} merchants over HTTP, matches the batch recomputation",
                served.len()
            ),
            Some(first) => println!("served: {} of {} merchants DO NOT match, e.g. {first}", wrong.len(), served.len()),
        }
        wrong.is_empty()
    }

    /// An HTTP/1.1 GET: (status, body).
    fn get(address: &str, path: &str) -> Result<(u16, String), Box<dyn std::error::Error + Send + Sync>> {
        let mut s = TcpStream::connect(address)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")?;
        let mut response = String::new();
        s.read_to_string(&mut response)?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response.as_str(), ""));
        let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        Ok((status, body.to_string()))
    }
}

/// The ledger in PostgreSQL: a stateless pipeline with an exactly-once sink.
pub(crate) mod ledger {
    use std::time::Duration;

    use kafka_eos::codec::{Codec, Json};
    use kafka_eos::processor::ProcessError;
    use kafka_eos::{Guarantee, Pipeline, PipelineBuilder};
    use kafka_eos_cli::workloads::financial_close::{business_days, Event, Reconciliation};
    use kafka_eos_postgres::{row, PostgresSink, TableSpec};
    use kafka_eos_testkit::admin;
    use kafka_eos_testkit::postgres::{Postgres, PostgresConfig};

    const TABLE: &str = "CREATE TABLE ledger (
        event_id bigint PRIMARY KEY,
        merchant integer NOT NULL,
        day      text    NOT NULL,
        cents    bigint  NOT NULL)";

    /// The ledger pipeline: one row per payment, upserted by `event_id`, into the `ledger`
    /// table of the database `conn` names, with its business day (the local date in
    /// Europe/Berlin, as the close has it); ticks make no row.
    pub fn pipeline(mut builder: PipelineBuilder, payments: &str, conn: String) -> PipelineBuilder {
        let days = business_days();
        let rows = builder.sink(move || {
            let conn = conn.clone();
            // The sink's offsets are kept under the pipeline's name: one row per partition.
            async move {
                PostgresSink::connect(&conn, "financial-close-ledger", &TableSpec::new("ledger", &["event_id"])).await
            }
        });
        builder
            .input_topic(payments)
            // The database holds the offsets: no Kafka transaction is needed for exactly-once.
            .guarantee(Guarantee::AtLeastOnce)
            .processor(move |ctx, r| {
                if let Event::Payment(p) = Codec::<Event>::decode(&Json, r.value.as_deref().unwrap_or_default())? {
                    let day = days.label(days.window_of(p.time_ms).0);
                    ctx.sink(&rows, row![p.event_id as i64, p.merchant as i32, day, p.amount_cents]);
                }
                Ok::<_, ProcessError>(())
            })
    }

    pub struct Ledger {
        pg: Postgres,
        summary: kafka_eos::Summary,
    }

    /// Starts PostgreSQL and runs the ledger pipeline over `payments` until it caught up.
    pub async fn start(bootstrap: &str, payments: &str, app: &str) -> Result<Ledger, Box<dyn std::error::Error>> {
        let pg = tokio::task::spawn_blocking(|| Postgres::start(PostgresConfig::default())).await??;
        pg.psql("postgres", TABLE)?;
        let conn = pg.connection_string("postgres");
        let pipeline =
            pipeline(Pipeline::builder(), payments, conn).bootstrap_servers(bootstrap).application_id(app).build()?;
        let t = vec![payments.to_string()];
        let summary = admin::run_until_caught_up(pipeline, bootstrap, app, &t, Duration::from_secs(300)).await?;
        Ok(Ledger { pg, summary })
    }

    impl Ledger {
        /// Reconciles the ledger with SQL against the batch recomputation.
        pub async fn reconcile(self, rec: &Reconciliation) -> Result<bool, Box<dyn std::error::Error>> {
            let totals = self.pg.psql("postgres", "SELECT count(*) || ' ' || coalesce(sum(cents), 0) FROM ledger")?;
            let days = self.pg.psql(
                "postgres",
                "SELECT count(*) FROM (SELECT merchant, day, sum(cents) FROM ledger GROUP BY merchant, day) d",
            )?;
            // Grouped by business day (the Berlin date each row carries), the ledger must
            // have the batch's merchant-days.
            let want = format!("{} {} {}", rec.payments, rec.total_cents, rec.merchant_days);
            let got = format!("{} {}", totals.trim(), days.trim());
            let exact = got == want;
            println!(
                "ledger (postgres): {} records in; payments, cents and merchant-days (by Berlin day, in SQL) {got} \
                 {} the batch recomputation ({want})",
                self.summary.records_in,
                if exact { "match" } else { "DO NOT match" }
            );
            Ok(exact)
        }
    }
}

/// The pipeline without a broker (`cargo test --example financial_close`): milliseconds, no
/// Java.
#[cfg(test)]
mod tests {
    use kafka_eos::codec::Json;
    use kafka_eos_cli::workloads::financial_close::{
        payment_records, tick_records, DailyRevenue, Event, Merchant, Payment, DEDUP_STORE,
    };
    use kafka_eos_testkit::driver::{check_replay_safe, TestDriver, TestInput};

    use super::*;

    const DAY_MS: i64 = 86_400_000;
    const H: i64 = 3_600_000;
    /// 2026-03-29T00:00:00Z. In Europe/Berlin that day runs from 03-28T23:00Z to
    /// 03-29T22:00Z: 23 hours (clocks go forward at 01:00Z).
    const MAR_29: i64 = 1_774_742_400_000;

    fn topics() -> Topics {
        Topics::with_suffix("test")
    }

    fn paid(event_id: u64, merchant: u32, cents: i64, time_ms: i64) -> TestInput {
        let p = Payment { event_id, merchant, amount_cents: cents, time_ms };
        TestInput::new().key(merchant.to_string()).encode_value(&Json, &Event::Payment(p)).unwrap()
    }

    fn payment(event_id: u64, merchant: u32, cents: i64, day: i64) -> TestInput {
        paid(event_id, merchant, cents, day * DAY_MS + 1_000)
    }

    /// The pipeline in a test driver, merchant 7 in its table at `fee_bps`.
    fn driver_with_merchant_7(t: &Topics, fee_bps: u32) -> TestDriver {
        let mut driver = TestDriver::new(financial_close::pipeline(Pipeline::builder(), t)).unwrap();
        let row = TestInput::new().key("7").encode_value(&Json, &Merchant { fee_bps }).unwrap();
        driver.pipe_table(&t.merchants, row).unwrap();
        driver
    }

    #[test]
    fn berlin_business_days_close_once_and_late_payments_correct_them() {
        let t = topics();
        let mut driver = driver_with_merchant_7(&t, 250);
        driver.pipe(paid(1, 7, 500, MAR_29 + 21 * H + H / 2)).unwrap(); // 23:30 CEST
        driver.pipe(paid(1, 7, 500, MAR_29 + 21 * H + H / 2)).unwrap(); // redelivered: dropped
        driver.pipe(paid(2, 7, 250, MAR_29 - H / 2)).unwrap(); // 00:30 CET: the same business day
                                                               // 00:30 CEST on the 30th (still the 29th in UTC); the watermark lags an hour.
        driver.pipe(paid(3, 7, 100, MAR_29 + 22 * H + H / 2)).unwrap();
        assert!(driver.output(&t.revenue).is_empty(), "the 29th is still open");
        driver.pipe(paid(4, 7, 100, MAR_29 + 23 * H + H / 2)).unwrap(); // the watermark passes 22:00Z
        driver.pipe(paid(5, 7, 40, MAR_29 + 12 * H)).unwrap(); // late, within the retention: a correction
        let week_later = Event::Tick { time_ms: MAR_29 + 7 * DAY_MS };
        driver.pipe(TestInput::new().key("tick").encode_value(&Json, &week_later).unwrap()).unwrap();
        driver.pipe(paid(6, 7, 999, MAR_29 + 12 * H)).unwrap(); // past the retention: late topic
        let days = driver.values::<DailyRevenue>(&t.revenue, &Json).unwrap();
        let got: Vec<_> = days.iter().map(|d| (d.day.as_str(), d.revision, d.cents, d.fee_cents, d.payments)).collect();
        assert_eq!(
            got,
            [
                ("2026-03-29", 0, 750, 12 + 6, 2),
                ("2026-03-29", 1, 790, 12 + 6 + 1, 3),
                ("2026-03-30", 0, 200, 2 + 2, 2)
            ],
            "Berlin days, 2.5 % fees rounded down per payment, the correction as revision 1"
        );
        assert_eq!(driver.output(&t.revenue)[1].key.as_deref(), Some(&b"7/2026-03-29"[..]), "same key: an upsert");
        assert_eq!(driver.output(&t.late).len(), 1);
        let s = driver.stats();
        assert_eq!((s.duplicates_dropped, s.late_records, s.window_corrections), (1, 1, 1));
        assert!(driver.store_handle::<u64, ()>(DEDUP_STORE).is_some());
    }

    /// The chaos suite found it (2026-12-01): a broker outage left partitions without a
    /// payment for longer than the idle timeout in the middle of the period; the idle
    /// advance moved their stream time to the wall clock (months past the payments'
    /// event time), and the days opened after that never got a closing timer, so the last
    /// one was never emitted. Every day must close, and each day's latest revision must
    /// hold all of its payments.
    #[test]
    fn an_idle_advance_in_the_middle_of_the_period_leaves_no_day_open() {
        let t = topics();
        let mut driver = driver_with_merchant_7(&t, 100);
        // The wall clock runs eight months after the payments' event time (a replay).
        driver.set_time(MAR_29 + 240 * DAY_MS);
        driver.pipe(paid(1, 7, 1_000, MAR_29 + 10 * H)).unwrap();
        driver.advance_wall_clock(financial_close::IDLE_CLOSE + Duration::from_secs(1)).unwrap(); // the outage
        driver.pipe(paid(2, 7, 2_000, MAR_29 + 11 * H)).unwrap(); // same day, after its close
        driver.pipe(paid(3, 7, 4_000, MAR_29 + DAY_MS + 10 * H)).unwrap(); // the next days
        driver.pipe(paid(4, 7, 8_000, MAR_29 + DAY_MS + 11 * H)).unwrap();
        driver.pipe(paid(5, 7, 16_000, MAR_29 + 2 * DAY_MS + 10 * H)).unwrap(); // the last day
        driver.advance_wall_clock(financial_close::IDLE_CLOSE + Duration::from_secs(1)).unwrap(); // the end
        let days = driver.values::<DailyRevenue>(&t.revenue, &Json).unwrap();
        let mut latest = std::collections::BTreeMap::new();
        for d in &days {
            latest.insert(d.day.clone(), (d.revision, d.cents));
        }
        let got: Vec<_> = latest.iter().map(|(day, (_, cents))| (day.as_str(), *cents)).collect();
        assert_eq!(
            got,
            [("2026-03-29", 3_000), ("2026-03-30", 12_000), ("2026-03-31", 16_000)],
            "every day emitted, with all its payments (revisions: {days:?})"
        );
        assert!(driver.output(&t.late).is_empty(), "nothing was late by the days' own close");
    }

    #[test]
    fn the_ledger_gets_one_row_per_payment_and_none_per_tick() {
        let builder = ledger::pipeline(Pipeline::builder(), "payments", "host=unused".into());
        let mut driver = TestDriver::new(builder).unwrap();
        driver.pipe(paid(1, 7, 500, MAR_29 + 22 * H + H / 2)).unwrap(); // 00:30 CEST on the 30th
        driver.pipe(payment(2, 9, 250, 20_001)).unwrap();
        driver.pipe(TestInput::new().key("tick").encode_value(&Json, &Event::Tick { time_ms: 0 }).unwrap()).unwrap();
        let rows = driver.sink_rows::<kafka_eos_postgres::Row>();
        let got: Vec<_> = rows.iter().map(|r| (r.offset, format!("{:?}", r.row))).collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].0, got[1].0), (0, 1), "each row carries its input record's offset");
        assert!(got[0].1.contains("500") && got[0].1.contains("\"2026-03-30\""), "the Berlin date: {got:?}");
    }

    #[test]
    fn the_processor_is_replay_safe() {
        let g = financial_close::Generate { payments: 300, merchants: 12, days: 3, ..Default::default() };
        let mut records: Vec<_> = (0..g.payments).flat_map(|i| payment_records(&g, i, 4)).collect();
        records.extend(tick_records(&g, 4));
        let inputs: Vec<_> =
            records.into_iter().map(|(p, k, v)| TestInput::new().partition(p.unwrap_or(0)).key(k).value(v)).collect();
        let t = topics();
        let report = check_replay_safe(|| financial_close::pipeline(Pipeline::builder(), &t), &inputs, 4).unwrap();
        assert!(report.outputs > 30, "{report:?}");
    }
}
