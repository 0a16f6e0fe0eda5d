//! Running one copy: a pipeline under a guarantee, or the ceiling; verifying it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};

use kafka_eos::config::Properties;
use kafka_eos::observe::Outcome;
use kafka_eos::record::ORIGIN_HEADER;
use kafka_eos::{Error, Result};
use kafka_eos::{Guarantee, OutputRecord, Pipeline};
use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};

use super::*;

/// Copies `input` into a new topic `output` with `subject` and measures it. Blocking
/// except for the pipeline itself, which runs on `rt`.
pub fn copy(
    rt: &tokio::runtime::Handle,
    input: &Input,
    output: &str,
    subject: Subject,
    opts: &CopyOptions,
) -> Result<CopyResult> {
    input.create_topic(output, 1)?;
    let app_id = unique_name(&format!("bench-{}", subject.name().replace('+', "-")));
    trim_heap();
    let baseline = rss(None);
    let rss_reset = reset_peak_rss(None);
    let progress = Progress::for_input(input, CpuSource::SelfProcess);
    let transactions = match subject {
        Subject::Ceiling => ceiling(input, output, &app_id, &progress, opts.time_limit)?,
        Subject::Pipeline(_) | Subject::Stateful(_) | Subject::Repartition => {
            rt.block_on(pipeline(input, output, &app_id, subject, &progress, opts))?
        }
    };
    let peak = peak_rss(None);
    let verified = match subject {
        _ if !opts.verify || !progress.is_done() => None,
        Subject::Repartition => Some(check_hop(input, &repartition_topic(&app_id), output)?),
        _ => Some(check(input, output, subject)?),
    };
    let restore = match subject {
        Subject::Stateful(g) if progress.is_done() => Some(restore(input, &app_id, g)?),
        _ => None,
    };
    match subject {
        Subject::Stateful(_) => {
            let changelog = kafka_eos::state::changelog_topic(&app_id, BENCH_STORE);
            delete_topics(&input.bootstrap, &input.client_properties, &[changelog]);
        }
        Subject::Repartition => {
            delete_topics(&input.bootstrap, &input.client_properties, &[repartition_topic(&app_id)])
        }
        _ => {}
    }
    let commit_interval_ms = match subject {
        Subject::Ceiling => None,
        _ => Some(opts.tuning.commit_interval.as_millis() as u64),
    };
    Ok(CopyResult {
        peak_rss_above_baseline_bytes: match (peak, baseline) {
            (Some(p), Some(b)) if rss_reset => Some(p.saturating_sub(b)),
            _ => None,
        },
        peak_rss_reset: rss_reset,
        transactions,
        verified,
        restore,
        ..CopyResult::measured(subject.name(), input, commit_interval_ms, &progress, peak)
    })
}

/// Verifies `output` against `input`, with the promise of `subject`.
pub fn check(input: &Input, output: &str, subject: Subject) -> Result<Verified> {
    let mut cfg = VerifyConfig::new(&input.bootstrap, &input.topic, output);
    cfg.client_properties = input.client_properties.clone();
    let r: Report = verify(&cfg)?;
    let ok = match subject {
        Subject::Pipeline(Guarantee::AtLeastOnce) | Subject::Stateful(Guarantee::AtLeastOnce) => r.is_at_least_once(),
        _ => r.is_exactly_once(),
    } && r.input_records == input.records;
    Ok(Verified {
        input_records: r.input_records,
        output_records: r.output_records,
        duplicates: r.duplicates,
        missing: r.missing,
        ok,
    })
}

/// The repartition topic of [`Subject::Repartition`]'s application `app_id`.
fn repartition_topic(app_id: &str) -> String {
    format!("{app_id}-{HOP}-repartition")
}

/// Verifies both stages of [`Subject::Repartition`] (each output's origin is the record
/// one stage before): every input once in the repartition topic, every repartitioned record
/// once in `output`.
fn check_hop(input: &Input, hop: &str, output: &str) -> Result<Verified> {
    let stage = |from: &str, to: &str| {
        let mut cfg = VerifyConfig::new(&input.bootstrap, from, to);
        cfg.client_properties = input.client_properties.clone();
        verify(&cfg)
    };
    let (first, second) = (stage(&input.topic, hop)?, stage(hop, output)?);
    let ok = first.is_exactly_once() && second.is_exactly_once() && first.input_records == input.records;
    Ok(Verified {
        input_records: first.input_records,
        output_records: second.output_records,
        duplicates: first.duplicates + second.duplicates,
        missing: first.missing + second.missing,
        ok,
    })
}

/// Runs a pipeline until `progress` reaches its target (or the time limit), then shuts it
/// down gracefully. Returns the committed transactions.
async fn pipeline(
    input: &Input,
    output: &str,
    app_id: &str,
    subject: Subject,
    progress: &Arc<Progress>,
    opts: &CopyOptions,
) -> Result<u64> {
    let guarantee = match subject {
        Subject::Pipeline(g) | Subject::Stateful(g) => g,
        Subject::Repartition => Guarantee::ExactlyOncePerPartition,
        Subject::Ceiling => return Err(Error::Internal("the ceiling is not a pipeline".into())),
    };
    let counter = progress.clone();
    let extra = opts.hook.clone();
    // Through a repartition topic every record is read twice: progress counts input
    // records, half the records read.
    let reads = if subject == Subject::Repartition { 2 } else { 1 };
    let read = std::sync::atomic::AtomicU64::new(0);
    let mut builder = Pipeline::builder()
        .bootstrap_servers(&input.bootstrap)
        .application_id(app_id)
        .input_topic(&input.topic)
        .guarantee(guarantee)
        .commit_interval(opts.tuning.commit_interval)
        .max_records_per_transaction(opts.tuning.max_records_per_transaction)
        .process_while_collecting(opts.tuning.process_while_collecting)
        .handle_signals(false)
        .on_transaction(move |e| {
            if e.outcome == Outcome::Committed {
                let n = read.fetch_add(e.records as u64, std::sync::atomic::Ordering::Relaxed) + e.records as u64;
                counter.set(n / reads);
            }
            if let Some(h) = &extra {
                h(e);
            }
        });
    let out = builder.output_topic(output);
    // Key and value only, as the Java peers copy (no headers, the producer's timestamp).
    let copy_of = move |r: &kafka_eos::InputRecord| {
        let mut o = OutputRecord::to(&out).partition(r.partition);
        o.key = r.key.clone();
        o.value = r.value.clone();
        o
    };
    builder = match subject {
        Subject::Stateful(_) => {
            let counts = builder.store::<Vec<u8>, u64>(BENCH_STORE);
            builder.processor(move |ctx, r| {
                let key = r.key.clone().unwrap_or_default();
                let mut store = ctx.store(&counts);
                let n = store.get(&key)?.unwrap_or(0);
                store.put(&key, &(n + 1))?;
                ctx.emit(copy_of(r));
                Ok(())
            })
        }
        Subject::Repartition => {
            let hop = builder.repartition(HOP);
            builder.processor(move |ctx, r| {
                if r.topic == hop {
                    ctx.emit(copy_of(r));
                } else {
                    let mut o = OutputRecord::to(&hop);
                    o.key = r.key.clone();
                    o.value = r.value.clone();
                    ctx.emit(o);
                }
                Ok(())
            })
        }
        _ => builder.processor(move |ctx, r| {
            ctx.emit(copy_of(r));
            Ok(())
        }),
    };
    // Long intervals need a transaction timeout above them (validation insists).
    if guarantee.is_transactional() && opts.tuning.commit_interval >= Duration::from_secs(5) {
        builder = builder.transaction_timeout(opts.tuning.commit_interval * 3);
    }
    if let Some(n) = opts.tuning.max_concurrent_transactions {
        builder = builder.max_concurrent_transactions(n);
    }
    if let Some(n) = opts.tuning.workers {
        builder = builder.workers(n);
    }
    if opts.tuning.unguarded_calls {
        builder = builder.unguarded_transactional_calls();
    }
    let pipeline = builder.client_properties(&input.client_properties).build()?;
    let handle = pipeline.shutdown_handle();
    let running = tokio::spawn(pipeline.run());
    let deadline = opts.time_limit.map(|t| Instant::now() + t);
    while !progress.is_done() && !running.is_finished() && deadline.is_none_or(|d| Instant::now() < d) {
        if progress.is_started() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        } else {
            // The window opens when the group has assigned the partitions (the rebalance
            // counter moves as the assignment callback starts).
            if handle.summary().rebalances > 0 {
                progress.start();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    progress.close();
    let threads = process_threads();
    handle.shutdown();
    let summary = running.await.map_err(|e| Error::Internal(format!("pipeline task: {e}")))??;
    eprintln!(
        "  {} transactions committed, {} aborted; {} threads in this process at the window's end",
        summary.transactions_committed,
        summary.transactions_aborted,
        threads.map_or("?".into(), |n| n.to_string())
    );
    Ok(summary.transactions_committed)
}

/// This process's thread count (Linux `/proc`; `None` elsewhere).
fn process_threads() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok())
}

/// The repartition topic's name in [`Subject::Repartition`]'s application.
const HOP: &str = "hop";

/// The store of [`Subject::Stateful`].
const BENCH_STORE: &str = "counts";

/// Rebuilds the stores of every partition of a stateful copy from their changelogs.
fn restore(input: &Input, app_id: &str, guarantee: Guarantee) -> Result<Restore> {
    let mut builder = Pipeline::builder()
        .bootstrap_servers(&input.bootstrap)
        .application_id(app_id)
        .input_topic(&input.topic)
        .guarantee(guarantee);
    let _counts = builder.store::<Vec<u8>, u64>(BENCH_STORE);
    builder = builder.processor(|_, _| Ok(()));
    for (k, v) in input.client_properties.iter() {
        builder = builder.client_property(k, v);
    }
    let pipeline = builder.build()?;
    let started = Instant::now();
    let partitions: Vec<i32> = (0..input.partitions).collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    let records = kafka_eos::state::measure_restore(pipeline.config(), &partitions, deadline)?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(Restore { records, seconds, records_per_second: records as f64 / seconds.max(1e-9) })
}

/// Counts the ceiling's delivery reports.
struct Acks(Arc<Progress>);

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_ok() {
            self.0.add(1);
        }
    }
}

/// The ceiling: consume, produce, nothing else, on this thread.
fn ceiling(
    input: &Input,
    output: &str,
    group: &str,
    progress: &Arc<Progress>,
    time_limit: Option<Duration>,
) -> Result<u64> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &input.bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // The same fetch buffering as the pipeline's consumer, and its short postponement of
        // a partition's next fetch while the prefetch queue is full: at librdkafka's default
        // (1,000 ms) this copy stalled a second at a time and reached 134k records/s where
        // the pipelines it is the ceiling of reached 200k (4 partitions, 300,000 records).
        .set("queued.max.messages.kbytes", "16384")
        .set("fetch.queue.backoff.ms", "10")
        .set("log_level", "3");
    input.client_properties.apply(&mut cc);
    let consumer: BaseConsumer = cc.create().map_err(|e| Error::Config(format!("ceiling consumer: {e}")))?;
    let mut pc = ClientConfig::new();
    // The same batching as the pipeline's producers (linger.ms 5); no idempotence.
    pc.set("bootstrap.servers", &input.bootstrap).set("linger.ms", "5").set("log_level", "3");
    input.client_properties.apply(&mut pc);
    let producer: BaseProducer<Acks> =
        pc.create_with_context(Acks(progress.clone())).map_err(|e| Error::Config(format!("ceiling producer: {e}")))?;
    consumer.subscribe(&[&input.topic]).map_err(|e| Error::Config(format!("ceiling subscribe: {e}")))?;
    let deadline = time_limit.map(|t| Instant::now() + t);
    while !progress.is_done() && deadline.is_none_or(|d| Instant::now() < d) {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                progress.start();
                let origin = format!("{}/{}/{}", m.topic(), m.partition(), m.offset());
                let mut headers = OwnedHeaders::new_with_capacity(1);
                if let Some(hs) = m.headers() {
                    for h in hs.iter().filter(|h| h.key != ORIGIN_HEADER) {
                        headers = headers.insert(Header { key: h.key, value: h.value });
                    }
                }
                headers = headers.insert(Header { key: ORIGIN_HEADER, value: Some(origin.as_bytes()) });
                let mut rec = BaseRecord::<[u8], [u8]>::to(output).partition(m.partition()).headers(headers);
                rec.key = m.key();
                rec.payload = m.payload();
                loop {
                    match producer.send(rec) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                            rec = r;
                            producer.poll(Duration::from_millis(5));
                        }
                        Err((e, _)) => return Err(Error::Config(format!("ceiling produce: {e}"))),
                    }
                }
                producer.poll(Duration::ZERO);
            }
            Some(Err(e)) => tracing::debug!(error = %e, "ceiling consumer error"),
            None => {
                producer.poll(Duration::ZERO);
            }
        }
    }
    while !progress.is_done() && deadline.is_none_or(|d| Instant::now() < d) && producer.in_flight_count() > 0 {
        producer.poll(Duration::from_millis(10));
    }
    progress.close();
    Ok(0)
}

/// Deletes topics (best effort): the benchmark's own, on a cluster someone else runs.
pub fn delete_topics(bootstrap: &str, props: &Properties, topics: &[String]) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    if topics.is_empty() {
        return;
    }
    let cc = kafka_eos_testkit::admin::Client::new(bootstrap).properties(props.clone()).config();
    let Ok(admin) = cc.create::<AdminClient<rdkafka::client::DefaultClientContext>>() else { return };
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    if let Err(e) = futures::executor::block_on(admin.delete_topics(&names, &opts)) {
        tracing::warn!(error = %e, "deleting the benchmark topics failed");
    }
}
