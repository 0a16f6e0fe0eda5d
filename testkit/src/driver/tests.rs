//! The driver's own tests: the simulated semantics, and the replay-safety check catching the
//! two classic mistakes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_eos::codec::Json;
use kafka_eos::operators::{HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows, WindowUpdate};
use kafka_eos::processor::{Context, HookContext, ProcessError, Processor};
use kafka_eos::{Error, InputRecord, OutputRecord, Pipeline, PipelineBuilder, ProcessorErrorPolicy, Topic};

use super::*;

/// Counts per key in a store and emits the new count: replay-safe.
fn counting(builder: PipelineBuilder) -> (PipelineBuilder, Store<String, u64>) {
    let mut b = builder.input_topic("in");
    let counts = b.store::<String, u64>("counts");
    let out = b.output_topic("out");
    let handle = counts.clone();
    let b = b.processor(move |ctx, rec| {
        let key = rec.key_as::<String>(&kafka_eos::codec::Raw).unwrap_or_default();
        if rec.value.as_deref() == Some(b"fail") {
            return Err("bad record".into());
        }
        let n = ctx.store(&counts).get(&key)?.unwrap_or(0) + 1;
        ctx.store(&counts).put(&key, &n)?;
        ctx.emit(OutputRecord::to(&out).key(key).value(n.to_string()));
        Ok(())
    });
    (b, handle)
}

fn input(p: i32, key: &str, value: &str) -> TestInput {
    TestInput::new().partition(p).key(key).value(value)
}

fn values(d: &TestDriver, topic: &str) -> Vec<String> {
    d.output(topic).iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into()).collect()
}

/// The test of `docs/testing.md`: a stateful, windowed processor, under 30 lines.
#[test]
fn a_windowed_count_closes_its_windows_and_routes_late_records() -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = Pipeline::builder().input_topic("clicks");
    let windows = TumblingWindows::<String, u64>::new(&mut builder, "per-minute", Duration::from_secs(60), "late");
    let out = builder.output_topic("clicks-per-minute");
    let builder = builder.processor(move |ctx, rec| {
        let page: String = rec.value_as(&Json)?;
        let update = windows.add(ctx, rec, &page, rec.timestamp.unwrap_or(0), |n| *n += 1)?;
        if let Some(late) = update.late {
            ctx.emit(late);
        }
        for w in update.closed {
            ctx.emit(OutputRecord::to(&out).key(w.key).value(format!("{}@{}", w.value, w.start_ms)));
        }
        Ok(())
    });
    let mut driver = TestDriver::new(builder)?;
    for (t, page) in [(0, "/a"), (10_000, "/a"), (30_000, "/b"), (61_000, "/a"), (5_000, "/b")] {
        driver.set_time(t);
        driver.pipe(TestInput::new().encode_value(&Json, &page.to_string())?)?;
    }
    let closed: Vec<_> = driver.output("clicks-per-minute").iter().map(|r| (r.key_str(), r.value.clone())).collect();
    assert_eq!(closed, [(Some("/a".into()), Some(b"2@0".to_vec())), (Some("/b".into()), Some(b"1@0".to_vec()))]);
    assert_eq!(driver.values::<String>("late", &Json)?, ["/b"], "the minute [0, 60 s) had closed");
    assert_eq!(driver.stats().late_records, 1);
    Ok(())
}

#[test]
fn a_processor_error_aborts_the_batch_then_retries_then_dead_letters() {
    let (b, counts) = counting(Pipeline::builder());
    let b = b.on_processor_error(ProcessorErrorPolicy::retry(2).then_dead_letter("dlq"));
    let mut d = TestDriver::new(b).unwrap().batch_size(None);
    d.pipe_all([input(0, "k", "1"), input(0, "k", "fail"), input(0, "k", "2")]).unwrap();
    assert!(d.output("out").is_empty(), "nothing is visible before the commit");
    d.commit().unwrap();
    // Three failed attempts (1 + 2 retries) aborted everything; the fourth routed the bad
    // record and committed the others once.
    assert_eq!(values(&d, "out"), ["1", "2"]);
    assert_eq!(d.store(&counts, 0).get(&"k".to_string()).unwrap(), Some(2));
    let dead = d.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].header(kafka_eos::record::DEAD_LETTER_ERROR_HEADER), Some(&b"bad record"[..]));
    assert_eq!(dead[0].header(kafka_eos::record::DEAD_LETTER_ATTEMPTS_HEADER), Some(&b"3"[..]));
    let s = d.stats();
    assert_eq!((s.transactions_aborted, s.transactions_committed, s.dead_lettered), (3, 1, 1));
}

#[test]
fn a_stop_policy_returns_the_error_and_commits_nothing_of_the_batch() {
    let (b, counts) = counting(Pipeline::builder());
    let mut d = TestDriver::new(b.on_processor_error(ProcessorErrorPolicy::retry(1))).unwrap();
    d.pipe(input(0, "k", "1")).unwrap();
    let err = d.pipe(input(0, "k", "fail")).unwrap_err();
    assert!(matches!(&err, Error::Processor { attempts: 2, origin, .. } if origin == "in/0/1"), "{err:?}");
    assert_eq!(values(&d, "out"), ["1"]);
    assert_eq!(d.store(&counts, 0).get(&"k".to_string()).unwrap(), Some(1));
}

#[derive(Clone)]
struct Tracked {
    inits: Arc<AtomicUsize>,
    closes: Arc<AtomicUsize>,
    counts: Store<String, u64>,
    out: Topic,
}

impl Processor for Tracked {
    async fn init(&mut self, _: &HookContext<'_>) -> Result<(), ProcessError> {
        self.inits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
        tokio::time::sleep(Duration::from_millis(1)).await; // a pending future, driven on the driver's runtime
        let n = ctx.store(&self.counts).get(&"all".into())?.unwrap_or(0) + 1;
        ctx.store(&self.counts).put(&"all".into(), &n)?;
        ctx.forward(rec, &self.out);
        Ok(())
    }
    fn close(&mut self, _: &HookContext<'_>) {
        self.closes.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_crash_loses_instances_and_memory_and_restores_the_committed_state() {
    let mut b = Pipeline::builder().input_topic("in");
    let counts = b.store::<String, u64>("counts");
    let p = Tracked {
        inits: Default::default(),
        closes: Default::default(),
        counts: counts.clone(),
        out: b.output_topic("out"),
    };
    let (inits, closes) = (p.inits.clone(), p.closes.clone());
    let mut d = TestDriver::new(b.processor_impl(p)).unwrap().batch_size(Some(2));
    d.pipe_all((0..5).map(|i| input(i % 2, "k", "v"))).unwrap(); // 4 committed, 1 pending
    assert_eq!(d.output("out").len(), 4);
    d.crash_and_restore().unwrap();
    assert_eq!(closes.load(Ordering::SeqCst), 0, "a crash runs no close hook");
    assert_eq!(d.store(&counts, 0).get(&"all".into()).unwrap(), Some(2), "restored from the changelog");
    assert!(d.stats().restored_records >= 2);
    d.commit().unwrap(); // the pending record, processed by a fresh instance
    assert_eq!(inits.load(Ordering::SeqCst), 3, "partitions 0 and 1, then 0 again after the crash");
    assert_eq!(d.store(&counts, 0).get(&"all".into()).unwrap(), Some(3));
    assert_eq!(d.output("out").len(), 5);
    drop(d);
    assert_eq!(closes.load(Ordering::SeqCst), 1, "dropping the driver stops the pipeline");
}

fn inputs() -> Vec<TestInput> {
    (0..120).map(|i| input(i % 3, &format!("k{}", i % 7), "v")).collect()
}

#[test]
fn the_replay_check_passes_a_processor_that_keeps_its_state_in_stores() {
    let report = check_replay_safe(|| counting(Pipeline::builder()).0, &inputs(), 42).expect("replay-safe");
    assert!(report.aborts > 10 && report.crashes > 3, "{report:?}");
    assert_eq!(report.outputs, 120);
}

#[test]
fn the_replay_check_catches_a_counter_kept_outside_the_stores() {
    let pipeline = || {
        let mut b = Pipeline::builder().input_topic("in");
        let out = b.output_topic("out");
        let mut seen = 0u64; // per instance, never rolled back
        b.processor(move |ctx, _rec| {
            seen += 1;
            ctx.emit(OutputRecord::to(&out).value(seen.to_string()));
            Ok(())
        })
    };
    let violation =
        check_replay_safe(pipeline, &inputs(), 42).expect_err("a counter in the closure is not replay-safe");
    assert!(violation.difference.contains("topic \"out\""), "{violation}");
    assert!(violation.to_string().contains("not replay-safe"), "{violation}");
}

#[test]
fn the_replay_check_catches_a_processor_that_reads_the_wall_clock() {
    let pipeline = || {
        let mut b = Pipeline::builder().input_topic("in");
        let out = b.output_topic("out");
        b.processor(move |ctx, rec| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
            ctx.emit(OutputRecord::copy_of(rec, &out).value(now.to_string()));
            Ok(())
        })
    };
    let violation = check_replay_safe(pipeline, &inputs(), 42).expect_err("the wall clock is not replay-safe");
    assert!(violation.difference.contains("differs"), "{violation}");
}

#[test]
fn the_replay_check_catches_state_written_outside_the_stores_even_without_outputs() {
    let pipeline = || {
        let mut b = Pipeline::builder().input_topic("in");
        let last = b.store::<(), u64>("last");
        let mut seen = 0u64;
        b.processor(move |ctx, _rec| {
            seen += 1;
            ctx.store(&last).put(&(), &seen)?; // a store fed from a field
            Ok(())
        })
    };
    let violation = check_replay_safe(pipeline, &inputs(), 9).expect_err("state fed from a field");
    assert!(violation.difference.contains("final state of store \"last\""), "{violation}");
}

/// Hopping, session and sliding windows with corrections: emits every result keyed by
/// kind/key/start with value revision:count, and a tombstone for each retracted session.
fn windowed(builder: PipelineBuilder) -> PipelineBuilder {
    let mut b = builder.input_topic("in");
    let (s, m) = (Duration::from_secs, Duration::from_millis);
    let hop = HoppingWindows::<String, u64>::new(&mut b, "hop", s(10), s(5), "late").unwrap().retention(s(8));
    let sessions = SessionWindows::<String, u64>::new(&mut b, "sessions", m(1_500), "late", |a, b| *a += b)
        .unwrap()
        .retention(s(8));
    let sliding =
        SlidingWindows::<String, u64>::new(&mut b, "sliding", s(4), "late", |a, b| *a += b).unwrap().retention(s(8));
    let out = b.output_topic("out");
    b.processor(move |ctx, rec| {
        let key = rec.key_as::<String>(&kafka_eos::codec::Raw)?;
        let t = rec.timestamp.unwrap_or(0);
        let h = hop.add(ctx, rec, &key, t, |n| *n += 1)?;
        let s = sessions.add(ctx, rec, &key, t, |n| *n += 1)?;
        let l = sliding.add(ctx, rec, &key, t, |n| *n += 1)?;
        for (kind, update) in [("h", h), ("s", s), ("l", l)] {
            let WindowUpdate { late, closed, retracted, .. } = update;
            if let Some(late) = late {
                ctx.emit(late);
            }
            for w in closed {
                let k = format!("{kind}/{}/{}", w.key, w.start_ms);
                ctx.emit(OutputRecord::to(&out).key(k).value(format!("{}:{}", w.revision, w.value)));
            }
            for r in retracted {
                ctx.emit(OutputRecord::to(&out).key(format!("{kind}/{}/{}", r.key, r.start_ms)));
            }
        }
        Ok(())
    })
}

/// Every 5th record is 2 to 18 s late: some correct closed windows, some bridge sessions,
/// some are past the 8 s retention.
fn windowed_inputs() -> Vec<TestInput> {
    (0..240i64)
        .map(|i| {
            let late = if i % 5 == 4 { 2_000 + (i * 733) % 16_000 } else { 0 };
            TestInput::new().partition((i % 2) as i32).key(format!("k{}", i % 3)).timestamp(i * 700 - late).value("v")
        })
        .collect()
}

#[test]
fn hopping_session_and_sliding_windows_with_corrections_are_replay_safe() {
    let report = check_replay_safe(|| windowed(Pipeline::builder()), &windowed_inputs(), 11).expect("replay-safe");
    assert!(report.aborts > 5 && report.crashes > 1, "{report:?}");
    let mut d = TestDriver::new(windowed(Pipeline::builder())).unwrap();
    d.pipe_all(windowed_inputs()).unwrap();
    d.commit().unwrap();
    let out = d.output("out");
    let corrections = out.iter().filter(|r| r.value.as_deref().is_some_and(|v| !v.starts_with(b"0:"))).count();
    let tombstones = out.iter().filter(|r| r.value.is_none()).count();
    let stats = d.stats();
    assert!(corrections > 0 && tombstones > 0 && stats.late_records > 0, "{corrections} {tombstones} {stats:?}");
    let sliding_corrected = out.iter().filter(|r| {
        r.key_str().is_some_and(|k| k.starts_with("l/")) && r.value.as_deref().is_some_and(|v| !v.starts_with(b"0:"))
    });
    assert!(sliding_corrected.count() > 0, "late records correct sliding windows too");
    assert!(stats.window_corrections >= tombstones as u64, "{stats:?}");
    assert_eq!(stats.late_records as usize, d.output("late").len());
}

/// Counts per minute of the record timestamps; emits `minute=count` when the event-time
/// timer at the minute's end fires, and `wall@<at>` for a wall-clock timer.
#[derive(Clone)]
struct PerMinute {
    timers: kafka_eos::timers::Timers,
    counts: Store<i64, u64>,
    out: Topic,
}

impl Processor for PerMinute {
    async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
        let minute = rec.timestamp.unwrap_or(0) / 60_000;
        let n = ctx.store(&self.counts).get(&minute)?.unwrap_or(0) + 1;
        ctx.store(&self.counts).put(&minute, &n)?;
        self.timers.at_event_time(ctx, (minute + 1) * 60_000, minute as u64)?;
        if rec.value.as_deref() == Some(b"alarm") {
            let at = UNIX_EPOCH + Duration::from_millis(rec.timestamp.unwrap_or(0) as u64 + 30_000);
            self.timers.at_wall_clock(ctx, at, 0)?;
        }
        Ok(())
    }

    async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &kafka_eos::timers::Timer) -> Result<(), ProcessError> {
        let value = match timer.kind {
            kafka_eos::timers::TimerKind::WallClock => format!("wall@{}", timer.at_ms),
            kafka_eos::timers::TimerKind::EventTime => {
                let minute = timer.tag as i64;
                let n = ctx.store(&self.counts).get(&minute)?.unwrap_or(0);
                ctx.store(&self.counts).delete(&minute)?;
                format!("{minute}={n}")
            }
        };
        ctx.emit(OutputRecord::to(&self.out).value(value));
        Ok(())
    }
}

fn per_minute(idle: Option<Duration>) -> PipelineBuilder {
    let mut b = Pipeline::builder().input_topic("in");
    let spec = kafka_eos::timers::TimerSpec::new("timers");
    let spec = match idle {
        Some(t) => spec.idle_advance(t),
        None => spec,
    };
    let timers = kafka_eos::timers::Timers::with(&mut b, spec);
    let counts = b.store("counts");
    let out = b.output_topic("out");
    b.processor_impl(PerMinute { timers, counts, out })
}

/// Event-time timers fire after the record that passes them, in its transaction (the
/// output's input is that record); the last minute waits for the idle advance, which
/// `advance_wall_clock` runs in a transaction of its own; a wall-clock timer fires once the
/// clock reaches it.
#[test]
fn timers_fire_after_the_record_that_passes_them_and_on_the_advancing_wall_clock() -> Result<(), Error> {
    let mut d = TestDriver::new(per_minute(Some(Duration::from_secs(10))))?;
    for t in [0, 20_000, 59_999, 60_000, 61_000] {
        d.pipe(TestInput::new().timestamp(t).value(if t == 61_000 { "alarm" } else { "x" }))?;
    }
    assert_eq!(values(&d, "out"), ["0=3"]);
    assert_eq!(d.output("out")[0].input, (0, 3), "fired after the record at 60 s");
    d.set_time(61_000);
    d.advance_wall_clock(Duration::from_secs(5))?;
    assert_eq!(values(&d, "out"), ["0=3"], "not idle for 10 s yet, the alarm not due");
    d.advance_wall_clock(Duration::from_secs(25))?;
    assert_eq!(values(&d, "out"), ["0=3", "wall@91000"]);
    // Idle since 61 s: at 130 s the stream time is 120 s, past the second minute's end.
    d.advance_wall_clock(Duration::from_secs(39))?;
    assert_eq!(values(&d, "out"), ["0=3", "wall@91000", "1=2"]);
    assert_eq!(d.output("out")[2].input, (-1, -1), "no record: a transaction of its own");
    d.advance_wall_clock(Duration::from_secs(600))?;
    assert_eq!(d.output("out").len(), 3, "each timer fires once");
    Ok(())
}

/// Without idle advance, an idle partition's event-time timers wait for a record.
#[test]
fn without_idle_advance_the_wall_clock_fires_no_event_time_timer() -> Result<(), Error> {
    let mut d = TestDriver::new(per_minute(None))?;
    d.pipe(TestInput::new().timestamp(1_000).value("x"))?;
    d.advance_wall_clock(Duration::from_secs(3_600))?;
    assert!(values(&d, "out").is_empty());
    d.pipe(TestInput::new().timestamp(60_000).value("x"))?;
    assert_eq!(values(&d, "out"), ["0=1"]);
    Ok(())
}

/// Timers survive crashes and aborts: the replay-safety check finds each minute emitted
/// once, as in a run without faults.
#[test]
fn timers_are_replay_safe() {
    let inputs: Vec<TestInput> =
        (0..300).map(|i| TestInput::new().partition((i % 2) as i32).timestamp(i * 1_000).value("x")).collect();
    let report = check_replay_safe(|| per_minute(None), &inputs, 11).expect("replay-safe");
    assert!(report.aborts > 0 && report.crashes > 0, "{report:?}");
    assert_eq!(report.outputs, 8, "minutes 0..=3 of both partitions closed (the fifth waits)");
}

/// Payments (keyed by merchant) joined with a merchant table: value = payment id, output =
/// `id -> country` or `none`.
fn enriching(builder: PipelineBuilder) -> PipelineBuilder {
    let mut b = builder.input_topic("payments");
    let merchants = b.table::<String, _>("merchants", Json);
    let out = b.output_topic("enriched");
    b.processor(move |ctx, rec| {
        let country = ctx.table(&merchants).get(rec.key.as_deref().unwrap_or_default())?.cloned();
        ctx.emit(
            OutputRecord::to(&out).key(rec.value.clone().unwrap_or_default()).value(country.unwrap_or("none".into())),
        );
        Ok(())
    })
}

#[test]
fn a_table_join_sees_rows_written_before_the_batch_and_survives_a_crash() -> Result<(), Box<dyn std::error::Error>> {
    let mut d = TestDriver::new(enriching(Pipeline::builder()))?;
    let row = |p: i32, m: &str, c: &str| TestInput::new().partition(p).key(m).encode_value(&Json, &c.to_string());
    d.pipe_table("merchants", row(0, "m1", "DE")?)?;
    d.pipe_table("merchants", row(1, "m2", "FR")?)?;
    d.pipe(input(0, "m1", "p1"))?;
    d.pipe(input(0, "m2", "p2"))?; // m2's row is in partition 1: not this partition's table
    d.pipe_table("merchants", row(0, "m1", "AT")?)?;
    d.pipe(input(0, "m1", "p3"))?;
    d.pipe_table("merchants", TestInput::new().partition(0).key("m1"))?; // deleted
    d.pipe(input(0, "m1", "p4"))?;
    d.pipe_table("merchants", row(0, "m1", "IT")?)?;
    d.crash_and_restore()?;
    d.pipe(input(0, "m1", "p5"))?;
    d.pipe(input(1, "m2", "p6"))?;
    assert_eq!(values(&d, "enriched"), ["DE", "none", "AT", "none", "IT", "FR"]);
    let err = d.pipe_table("payments", row(0, "m1", "DE")?).unwrap_err().to_string();
    assert!(err.contains("not a table"), "{err}");
    let report =
        check_replay_safe(|| enriching(Pipeline::builder()), &[input(0, "m1", "p1"), input(0, "m1", "p2")], 7)?;
    assert!(report.runs > 0);
    Ok(())
}

/// Payments keyed by card, value `<id>:<merchant>`, joined with a global merchant table:
/// output `id -> country` or `none`.
fn enriching_globally(builder: PipelineBuilder) -> PipelineBuilder {
    let mut b = builder.input_topic("payments");
    let merchants = b.global_table::<String, _>("merchants", Json);
    let out = b.output_topic("enriched");
    b.processor(move |ctx, rec| {
        let value = String::from_utf8_lossy(rec.value.as_deref().unwrap_or_default()).into_owned();
        let (id, merchant) = value.split_once(':').unwrap_or((&value, ""));
        let country = ctx.table(&merchants).get(merchant)?.cloned();
        ctx.emit(OutputRecord::to(&out).key(id).value(country.unwrap_or("none".into())));
        Ok(())
    })
}

#[test]
fn a_global_table_is_seen_whole_from_every_partition() -> Result<(), Box<dyn std::error::Error>> {
    let mut d = TestDriver::new(enriching_globally(Pipeline::builder()))?;
    let row = |p: i32, m: &str, c: &str| TestInput::new().partition(p).key(m).encode_value(&Json, &c.to_string());
    d.pipe_table("merchants", row(2, "m1", "DE")?)?;
    d.pipe_table("merchants", row(0, "m2", "FR")?)?;
    d.pipe(input(0, "card1", "p1:m1"))?; // m1's row is in table partition 2
    d.pipe(input(1, "card2", "p2:m2"))?;
    d.pipe_table("merchants", TestInput::new().partition(2).key("m1"))?; // deleted
    d.pipe(input(1, "card3", "p3:m1"))?;
    d.crash_and_restore()?;
    d.pipe(input(0, "card4", "p4:m2"))?;
    assert_eq!(values(&d, "enriched"), ["DE", "FR", "none", "FR"]);
    Ok(())
}

/// Orders (`o:<id>`) and shipments (`s:<id>`) on one topic, keyed by order id, with the
/// event time as the record timestamp; output `order/shipment` per pair within 10 s.
fn shipping(builder: PipelineBuilder) -> PipelineBuilder {
    use kafka_eos::operators::StreamJoin;
    let mut b = builder.input_topic("events");
    let join = StreamJoin::<String, String, String>::new(&mut b, "order-shipments", Duration::from_secs(10)).unwrap();
    let (out, late) = (b.output_topic("shipped"), b.output_topic("late"));
    b.processor(move |ctx, rec| {
        let key = rec.key_as::<String>(&kafka_eos::codec::Raw)?;
        let value = rec.value_as::<String>(&kafka_eos::codec::Raw)?;
        let t = rec.timestamp.unwrap_or(0);
        let update = match value.split_once(':') {
            Some(("o", id)) => join.left(ctx, &key, t, id.to_string())?,
            Some(("s", id)) => join.right(ctx, &key, t, id.to_string())?,
            _ => return Err(format!("not an order or a shipment: {value:?}").into()),
        };
        if let Some(copy) = update.late_record(rec, &late) {
            ctx.emit(copy);
        }
        for pair in update.joined {
            ctx.emit(OutputRecord::to(&out).key(format!("{}/{}", pair.left, pair.right)).value(pair.key));
        }
        Ok(())
    })
}

#[test]
fn a_stream_join_pairs_within_the_window_across_a_crash_and_is_replay_safe() -> Result<(), Box<dyn std::error::Error>> {
    let event = |order: &str, value: &str, t: i64| TestInput::new().key(order).value(value).timestamp(t);
    let mut d = TestDriver::new(shipping(Pipeline::builder()))?;
    d.pipe(event("A", "s:1", 1_000))?; // a shipment before its order
    d.pipe(event("A", "o:A", 5_000))?; // pairs with s:1 (4 s apart)
    d.crash_and_restore()?; // the buffers come back from the changelog
    d.pipe(event("A", "s:2", 14_000))?; // 9 s after the order: pairs
    d.pipe(event("A", "s:3", 16_000))?; // 11 s after: does not
    d.pipe(event("B", "o:B", 40_000))?;
    d.pipe(event("A", "s:4", 5_000))?; // 35 s behind stream time 40 s: late
    let mut keys: Vec<String> = d
        .output("shipped")
        .iter()
        .map(|r| String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into())
        .collect();
    keys.sort();
    assert_eq!(keys, ["A/1", "A/2"]);
    assert_eq!(d.output("late").len(), 1);
    assert_eq!(d.stats().late_records, 1);
    let inputs: Vec<TestInput> = (0..60)
        .map(|i| event(&format!("k{}", i % 3), if i % 2 == 0 { "o:x" } else { "s:y" }, 1_000 * (i as i64 % 20)))
        .collect();
    let report = check_replay_safe(|| shipping(Pipeline::builder()), &inputs, 11)?;
    assert!(report.outputs > 20, "{report:?}");
    Ok(())
}
