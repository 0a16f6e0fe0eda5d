//! A task retrying a failing batch is interrupted by a revocation and by a shutdown: it
//! drops the batch within the shutdown timeout instead of replaying it until the task
//! timeout (10 minutes here), and nothing is lost or duplicated.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_eos::observe::{Interruption, Outcome};
use kafka_eos::{Guarantee, ProcessorErrorPolicy};

use crate::common::{emit_reversed, spawn, topics, unique, Running, Topics};

const RECORDS: u64 = 4_000;
const TASK_TIMEOUT: Duration = Duration::from_secs(600);

/// An instance whose processor fails, forever, on offset 700 of partition 0 (the policy
/// replays it forever); it counts the failures and the dropped batches' interruptions.
struct Failing {
    run: Running,
    failures: Arc<AtomicU64>,
    dropped: Arc<Mutex<Vec<Interruption>>>,
}

impl Failing {
    async fn start(t: &Topics, app: &str, shutdown_timeout: Duration) -> Failing {
        let failures = Arc::new(AtomicU64::new(0));
        let dropped: Arc<Mutex<Vec<Interruption>>> = Arc::default();
        let (out, f, d) = (kafka_eos::Topic::new(&t.output), failures.clone(), dropped.clone());
        let run = spawn(
            t.pipeline(app, Guarantee::ExactlyOncePerPartition)
                .task_timeout(TASK_TIMEOUT)
                .shutdown_timeout(shutdown_timeout)
                .max_records_per_transaction(500)
                .on_processor_error(ProcessorErrorPolicy::retry(u32::MAX).backoff(Duration::from_millis(100)))
                .on_transaction(move |e| {
                    if let Outcome::Dropped { because, .. } = e.outcome {
                        d.lock().unwrap().push(because);
                    }
                })
                .processor(move |ctx, r| {
                    if r.partition == 0 && r.offset == 700 {
                        f.fetch_add(1, Ordering::SeqCst);
                        return Err("always fails".into());
                    }
                    emit_reversed(ctx, &out, r)
                }),
        );
        let failing = Failing { run, failures, dropped };
        let deadline = Instant::now() + Duration::from_secs(60);
        while failing.failures.load(Ordering::SeqCst) < 3 {
            assert!(Instant::now() < deadline, "the instance never reached the failing record");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        failing
    }

    fn dropped(&self) -> Vec<Interruption> {
        self.dropped.lock().unwrap().clone()
    }

    /// Stops it; asserts that `run` returned within `bound` and that the processor is not
    /// called afterwards (no task left replaying in the background).
    async fn stop_within(self, bound: Duration) -> (kafka_eos::Summary, Duration, Vec<Interruption>) {
        let asked = Instant::now();
        let summary = self.run.stop().await;
        let took = asked.elapsed();
        let after = self.failures.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(self.failures.load(Ordering::SeqCst), after, "the processor was still called after run returned");
        assert!(took < bound, "stopping took {took:?}");
        let dropped = self.dropped.lock().unwrap().clone();
        (summary, took, dropped)
    }
}

/// Instance A fails forever on a batch of partition 0; instance B joins. The eager
/// rebalance revokes A's partitions and waits for A's revocation callback, which waits for
/// A's failing task: that task must let go of its batch within the shutdown timeout (3 s),
/// not replay it until the task timeout — which held the whole group's rebalance up until
/// `max.poll.interval.ms` (5 minutes) expelled A. So B must be assigned within 60 s. Then A
/// stops (whether or not it got partition 0 back), B takes everything over, and every
/// record is committed exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_lets_go_on_revocation_long_before_the_task_timeout() {
    let t = topics("interrupt-revoke", 2, RECORDS, 100).await;
    let app = unique("interrupt-revoke");
    let a = Failing::start(&t, &app, Duration::from_secs(3)).await;

    let joined = Instant::now();
    let b = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition));
    while b.handle.summary().rebalances == 0 {
        let waited = joined.elapsed();
        assert!(
            waited < Duration::from_secs(60),
            "B not assigned after {waited:?}: A's failing task held the rebalance"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rebalance = joined.elapsed();
    assert!(a.dropped().contains(&Interruption::Revoked), "{:?}", a.dropped());
    let (sa, stopped, dropped) = a.stop_within(Duration::from_secs(20)).await;
    finish_exactly_once(&t, &app, b, sa).await;
    println!("B assigned {rebalance:?} after joining; A stopped in {stopped:?}; A dropped batches: {dropped:?}");
}

/// A graceful shutdown while a batch keeps failing: the task drops the batch by the
/// shutdown deadline and exits — before, the consumer thread abandoned it at the deadline
/// and `run` returned, but the task went on replaying the batch, calling the processor,
/// until the task timeout. A restart commits every record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_lets_go_on_shutdown() {
    let t = topics("interrupt-stop", 2, RECORDS, 100).await;
    let app = unique("interrupt-stop");
    let a = Failing::start(&t, &app, Duration::from_secs(5)).await;
    let (first, stopped, dropped) = a.stop_within(Duration::from_secs(20)).await;
    assert_eq!(dropped, vec![Interruption::ShuttingDown]);
    finish_exactly_once(&t, &app, spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition)), first).await;
    println!("shutdown with a failing batch returned in {stopped:?}");
}

/// Lets `good` (a pipeline with a processor that never fails) catch up and stop; asserts
/// that it and the stopped failing instance (`failing`) committed every record once, and
/// that the output is exactly once.
async fn finish_exactly_once(t: &Topics, app: &str, good: Running, failing: kafka_eos::Summary) {
    t.wait_caught_up(app, Duration::from_secs(90)).await;
    let good = good.stop().await;
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
    assert_eq!(report.output_records, RECORDS);
    assert_eq!(failing.records_in + good.records_in, RECORDS, "{failing:?} {good:?}");
}
