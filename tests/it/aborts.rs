//! Deliberate aborts: every abort the processor causes costs exactly one aborted
//! transaction, never a second, failed one.
//!
//! Regression test for a bug the chaos suite's random-aborts scenario found: the abort
//! purged the outputs still queued in librdkafka. Those had their idempotence sequence
//! numbers already, so the purge left a gap that the *next* transaction's first produce
//! hit (`OUT_OF_ORDER_SEQUENCE_NUMBER`): an extra, Kafka-caused abort after (nearly) every
//! processor failure, and now and then an abort refused with `INVALID_TXN_STATE`, giving
//! the producer up.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::{Guarantee, ProcessorErrorPolicy};

use crate::common::{emit_reversed, spawn, topics, unique};

const PARTITIONS: i32 = 2;
const RECORDS: u64 = 20_000;
/// Records per transaction; the input is all there from the start, so batches are full.
const BATCH: usize = 500;

/// What the transaction hook saw, by outcome.
#[derive(Default)]
struct Outcomes {
    committed: AtomicU64,
    processor_aborts: AtomicU64,
    kafka_aborts: AtomicU64,
    other: AtomicU64,
    kafka_reasons: Mutex<Vec<String>>,
}

impl Outcomes {
    fn record(&self, e: &TransactionEvent) {
        match &e.outcome {
            Outcome::Committed => self.committed.fetch_add(1, Ordering::SeqCst),
            Outcome::Aborted { class: None, .. } => self.processor_aborts.fetch_add(1, Ordering::SeqCst),
            Outcome::Aborted { class: Some(_), reason } => {
                self.kafka_reasons.lock().unwrap().push(reason.clone());
                self.kafka_aborts.fetch_add(1, Ordering::SeqCst)
            }
            _ => {
                self.kafka_reasons.lock().unwrap().push(format!("{:?}", e.outcome));
                self.other.fetch_add(1, Ordering::SeqCst)
            }
        };
    }
}

/// The processor fails the first time it meets each record at offset 700 mod 1000 — about
/// one transaction in three, 200 records into a 500-record batch, when those 200 outputs
/// were enqueued within the last millisecond and are still queued in librdkafka (linger.ms
/// is 5). The number of aborted transactions must equal the number of injected failures,
/// no cycle may fail for a Kafka reason, and the output must be exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_injected_failure_costs_exactly_one_abort() {
    let t = topics("aborts", PARTITIONS, RECORDS, 100).await;
    let app = unique("aborts");
    let failed: Arc<Mutex<HashSet<(i32, i64)>>> = Arc::default();
    let outcomes = Arc::new(Outcomes::default());
    let (out, f, o) = (kafka_eos::Topic::new(&t.output), failed.clone(), outcomes.clone());
    let run = spawn(
        t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .max_records_per_transaction(BATCH)
            .on_processor_error(ProcessorErrorPolicy::retry(1).backoff(Duration::from_millis(1)))
            .on_transaction(move |e| o.record(e))
            .processor(move |ctx, r| {
                if r.offset % 1_000 == 700 && f.lock().unwrap().insert((r.partition, r.offset)) {
                    return Err(format!("deliberate failure at {}", r.origin()).into());
                }
                emit_reversed(ctx, &out, r)
            }),
    );
    t.wait_caught_up(&app, Duration::from_secs(120)).await;
    let summary = run.stop().await;

    let injected = failed.lock().unwrap().len() as u64;
    assert_eq!(injected, RECORDS / 1_000, "every record at offset 700 mod 1000 failed once");
    let kafka_reasons = outcomes.kafka_reasons.lock().unwrap().clone();
    assert_eq!(
        (outcomes.kafka_aborts.load(Ordering::SeqCst), outcomes.other.load(Ordering::SeqCst)),
        (0, 0),
        "no cycle may fail for a Kafka reason after a deliberate abort: {kafka_reasons:?}"
    );
    assert_eq!(outcomes.processor_aborts.load(Ordering::SeqCst), injected);
    assert_eq!(summary.transactions_aborted, injected, "one abort per injected failure: {summary:?}");
    assert_eq!(summary.producers_fenced, 0, "{summary:?}");
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(report.output_records, RECORDS);
    println!(
        "{injected} injected failures, {} aborted and {} committed transactions",
        summary.transactions_aborted, summary.transactions_committed
    );
}
