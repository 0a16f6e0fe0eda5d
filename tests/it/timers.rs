//! Timers against the real broker: event-time timers close every minute exactly once across
//! restarts, the last minute closes on idle partitions without a heartbeat record, and a
//! wall-clock timer fires in a transaction of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kafka_eos::config::UnknownOutcome;
use kafka_eos::observe::{Outcome, Reconciliation};

use kafka_eos::processor::{Context, ProcessError, Processor};
use kafka_eos::state::Store;
use kafka_eos::timers::{Timer, TimerKind, TimerSpec, Timers};
use kafka_eos::{Guarantee, InputRecord, OutputRecord, Pipeline, PipelineBuilder, Topic};
use kafka_eos_testkit::admin::Client;
use kafka_eos_testkit::read::read_all;
use kafka_eos_testkit::write::Writer;

use crate::common::{bootstrap, spawn, unique};

const MINUTE: i64 = 60_000;

/// Counts records per minute of their timestamp and emits `partition/minute → count` when an
/// event-time timer at the minute's end fires.
#[derive(Clone)]
struct PerMinute {
    timers: Timers,
    counts: Store<i64, u64>,
    out: Topic,
}

impl Processor for PerMinute {
    async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
        let minute = rec.timestamp.ok_or("a record without timestamp")? / MINUTE;
        let mut counts = ctx.store(&self.counts);
        let n = counts.get(&minute)?.unwrap_or(0) + 1;
        counts.put(&minute, &n)?;
        self.timers.at_event_time(ctx, (minute + 1) * MINUTE, minute as u64)?;
        Ok(())
    }

    async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        assert_eq!(timer.kind, TimerKind::EventTime);
        let minute = timer.tag as i64;
        let mut counts = ctx.store(&self.counts);
        let n = counts.get(&minute)?.unwrap_or(0);
        counts.delete(&minute)?;
        let key = format!("{}/{minute}", ctx.partition());
        ctx.emit(OutputRecord::to(&self.out).key(key).value(n.to_string()));
        Ok(())
    }
}

struct Setup {
    bootstrap: String,
    input: String,
    output: String,
    app: String,
}

impl Setup {
    async fn new(name: &str, partitions: i32) -> Setup {
        let s = Setup {
            bootstrap: bootstrap(),
            input: unique(&format!("{name}-in")),
            output: unique(&format!("{name}-out")),
            app: unique(name),
        };
        let (b, i, o) = (s.bootstrap.clone(), s.input.clone(), s.output.clone());
        tokio::task::spawn_blocking(move || {
            kafka_eos_testkit::admin::create_topic(&b, &i, partitions, 1)?;
            kafka_eos_testkit::admin::create_topic(&b, &o, partitions, 1)
        })
        .await
        .unwrap()
        .expect("topics");
        s
    }

    fn pipeline(&self, guarantee: Guarantee, idle: Option<Duration>) -> PipelineBuilder {
        let mut b = Pipeline::builder()
            .bootstrap_servers(&self.bootstrap)
            .application_id(&self.app)
            .input_topic(&self.input)
            .guarantee(guarantee)
            .commit_interval(Duration::from_millis(100))
            .handle_signals(false);
        let timers = match idle {
            Some(idle) => Timers::with(&mut b, TimerSpec::new("minute-timers").idle_advance(idle)),
            None => Timers::new(&mut b, "minute-timers"),
        };
        let counts = b.store("minute-counts");
        let out = b.output_topic(&self.output);
        b.processor_impl(PerMinute { timers, counts, out })
    }

    /// `(partition, timestamp)` records, each partition's in order.
    async fn produce(&self, records: Vec<(i32, i64)>) {
        let (b, topic) = (self.bootstrap.clone(), self.input.clone());
        tokio::task::spawn_blocking(move || {
            let w = Writer::new(&Client::new(&b))?;
            for (p, ts) in records {
                w.send(&OutputRecord::to(topic.as_str()).partition(p).timestamp(ts).value(ts.to_string()))?;
            }
            w.flush_all_delivered(Duration::from_secs(30))
        })
        .await
        .unwrap()
        .expect("produce");
    }

    /// Every committed output, `key → values` in the order written.
    async fn outputs(&self) -> BTreeMap<String, Vec<String>> {
        let (b, topic) = (self.bootstrap.clone(), self.output.clone());
        let records = tokio::task::spawn_blocking(move || read_all(&Client::new(&b), &topic, Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("read outputs");
        let text = |b: &Option<Vec<u8>>| String::from_utf8_lossy(b.as_deref().unwrap_or_default()).into_owned();
        let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in records {
            by_key.entry(text(&r.key)).or_default().push(text(&r.value));
        }
        by_key
    }

    async fn wait_for_outputs(&self, keys: usize, timeout: Duration) -> BTreeMap<String, Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let out = self.outputs().await;
            if out.len() >= keys || Instant::now() > deadline {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Ten minutes of records (one a second) per partition, two hours old, read by a pipeline
/// stopped and restarted mid-way (the minute counts and the pending timers are restored
/// from their changelogs). Each minute is emitted exactly once with its 60 records — the
/// last one too, although no record after it ever comes: its partition's stream time moves
/// on with the wall clock once it is idle for 2 s. Both exactly-once modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_time_timers_close_every_minute_once_across_restarts_and_idle_partitions_close_the_last() {
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let s = Setup::new("timers-minutes", 2).await;
        let now = now_ms();
        let base = (now - 2 * 3_600_000) / MINUTE * MINUTE;
        let records = |from: i64, to: i64| -> Vec<(i32, i64)> {
            (from..to).flat_map(|i| [(0, base + i * 1_000), (1, base + i * 1_000)]).collect()
        };
        let idle = Some(Duration::from_secs(2));
        let first = spawn(s.pipeline(guarantee, idle));
        s.produce(records(0, 290)).await;
        first.wait_records_in(400, Duration::from_secs(60)).await;
        let before = first.stop().await;
        let second = spawn(s.pipeline(guarantee, idle));
        s.produce(records(290, 600)).await;
        let out = s.wait_for_outputs(20, Duration::from_secs(90)).await;
        // Long enough for a second firing of any timer to show.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = second.stop().await;
        let out_again = s.outputs().await;
        assert_eq!(out, out_again, "{}: outputs after the last close", guarantee.as_str());
        let expected: BTreeMap<String, Vec<String>> = (0..2)
            .flat_map(|p| (0..10).map(move |m| (format!("{p}/{}", base / MINUTE + m), vec!["60".to_string()])))
            .collect();
        assert_eq!(out, expected, "{}: {before:?} {after:?}", guarantee.as_str());
        assert!(after.restored_records > 0, "the restart restored the counts and timers: {after:?}");
    }
}

/// Without idle advance, the last minute waits for a record past it: the stream time does
/// not move on an idle partition (determinism by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_idle_advance_the_last_minute_waits_for_a_later_record() {
    let s = Setup::new("timers-noidle", 1).await;
    let base = (now_ms() - 3_600_000) / MINUTE * MINUTE;
    let run = spawn(s.pipeline(Guarantee::ExactlyOncePerPartition, None));
    s.produce((0..120).map(|i| (0, base + i * 1_000)).collect()).await;
    s.wait_for_outputs(1, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let out = s.outputs().await;
    assert_eq!(out.len(), 1, "only the first minute closed: {out:?}");
    s.produce(vec![(0, base + 2 * MINUTE)]).await;
    let out = s.wait_for_outputs(2, Duration::from_secs(60)).await;
    run.stop().await;
    assert_eq!(out.get(&format!("0/{}", base / MINUTE + 1)), Some(&vec!["60".to_string()]), "{out:?}");
}

/// Schedules a wall-clock timer a second after each record; the timer emits
/// `WallClock/<tag> → how late it fired (ms)`.
#[derive(Clone)]
struct Alarm {
    timers: Timers,
    out: Topic,
}

impl Processor for Alarm {
    async fn process(&mut self, ctx: &mut Context<'_>, _: &InputRecord) -> Result<(), ProcessError> {
        self.timers.at_wall_clock(ctx, SystemTime::now() + Duration::from_secs(1), 7)?;
        Ok(())
    }
    async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        let late_ms = now_ms() - timer.at_ms;
        ctx.emit(OutputRecord::to(&self.out).key(format!("{:?}/{}", timer.kind, timer.tag)).value(late_ms.to_string()));
        Ok(())
    }
}

fn alarm_pipeline(s: &Setup, guarantee: Guarantee) -> PipelineBuilder {
    let mut b = Pipeline::builder()
        .bootstrap_servers(&s.bootstrap)
        .application_id(&s.app)
        .input_topic(&s.input)
        .guarantee(guarantee)
        .handle_signals(false);
    let timers = Timers::new(&mut b, "alarms");
    let out = b.output_topic(&s.output);
    b.processor_impl(Alarm { timers, out })
}

/// A wall-clock timer scheduled by a record fires about a second later, in a transaction of
/// its own (no record after it), exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_timer_fires_without_a_record_in_a_transaction_of_its_own() {
    let s = Setup::new("timers-wall", 1).await;
    let run = spawn(alarm_pipeline(&s, Guarantee::ExactlyOncePerPartition));
    s.produce(vec![(0, now_ms())]).await;
    let out = s.wait_for_outputs(1, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let summary = run.stop().await;
    let fired = out.get("WallClock/7").cloned().unwrap_or_default();
    assert_eq!(fired.len(), 1, "{out:?}");
    let late_ms: i64 = fired[0].parse().expect("a number");
    assert!((0..10_000).contains(&late_ms), "fired {late_ms} ms after its time");
    assert_eq!(summary.records_in, 1);
    assert!(summary.transactions_committed >= 2, "the record's and the timer's: {summary:?}");
}

/// A transaction of timers alone whose commit never reached the coordinator, while the task
/// is told only that its outcome is unknown: the reconcile must find it aborted (its offsets
/// carry its mark like any other transaction's) and fire the timer again. Taking it as
/// committed would delete the timer with its output lost. Both exactly-once modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_only_transaction_with_an_unknown_outcome_is_reconciled_from_its_offsets() {
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let mode = guarantee.as_str();
        let s = Setup::new("timers-unknown", 1).await;
        let found: Arc<Mutex<Vec<Outcome>>> = Arc::default();
        let hook = found.clone();
        // Commit 1 is the record's batch, commit 2 the timer's transaction.
        let pipeline = alarm_pipeline(&s, guarantee)
            .inject_unknown_outcome(2, UnknownOutcome::TimedOutBeforeCommit)
            .on_transaction(move |e| {
                if !matches!(e.outcome, Outcome::Committed) {
                    hook.lock().unwrap().push(e.outcome.clone());
                }
            });
        let run = spawn(pipeline);
        s.produce(vec![(0, now_ms())]).await;
        let out = s.wait_for_outputs(1, Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let summary = run.stop().await;
        let out_again = s.outputs().await;
        assert_eq!(out, out_again, "{mode}: outputs after the timer fired");
        let fired = out.get("WallClock/7").cloned().unwrap_or_default();
        let found = found.lock().unwrap().clone();
        assert_eq!(fired.len(), 1, "{mode}: the timer's output, exactly once: {out:?}; {found:?}; {summary:?}");
        assert!(
            matches!(found.as_slice(), [Outcome::Reconciled { found: Reconciliation::Aborted, .. }]),
            "{mode}: one reconcile, finding the transaction aborted: {found:?}"
        );
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

/// A partition with no record yet (an empty input partition) still has state, and its
/// stream time moves with the wall clock once it is idle: the timer store saves it. That
/// change commits in the transactions of the worker's other partitions (per consumer), so
/// the transaction must also commit an offset for the empty partition; else its state is
/// committed while the group has no offset for it, and every restart then stops with
/// `StateWithoutOffsets`. Both exactly-once modes: restarted, the pipeline runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_partitions_idle_stream_time_commits_with_an_offset_for_it() {
    for guarantee in [Guarantee::ExactlyOncePerConsumer, Guarantee::ExactlyOncePerPartition] {
        let mode = guarantee.as_str();
        let s = Setup::new("timers-empty", 2).await;
        let base = (now_ms() - 3_600_000) / MINUTE * MINUTE;
        let idle = Some(Duration::from_millis(1_500));
        // One worker per consumer: both partitions in one task, as a worker owns several.
        let first = spawn(s.pipeline(guarantee, idle).workers(1));
        // Partition 0 only, for longer than the idle timeout: partition 1 stays empty and its
        // stream time moves on in partition 0's transactions. Stopped before partition 0 is
        // idle itself, so that no transaction of timers alone (which commits where every
        // partition stands) runs.
        for round in 0..12 {
            s.produce((0..10).map(|i| (0, base + (round * 10 + i) * 1_000)).collect()).await;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        first.wait_records_in(120, Duration::from_secs(60)).await;
        first.stop().await;
        let second = spawn(s.pipeline(guarantee, idle).workers(1));
        s.produce(vec![(0, base + 121_000)]).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while second.handle.summary().records_in < 1 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        second.handle.shutdown();
        let summary = second.finish().await.unwrap_or_else(|e| panic!("{mode}: the restart failed: {e}"));
        assert_eq!(summary.records_in, 1, "{mode}: {summary:?}");
    }
}
