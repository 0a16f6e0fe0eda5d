//! What each window kind (and the stream–stream join) costs per record in the processing half of a pipeline, without
//! Kafka: the records go through the test driver (the runtime's own processing, state
//! overlays, changelog records and commits, with topics kept in memory), so the figures are
//! CPU per record on top of a keyed running aggregate — not end-to-end throughput, which
//! `batch_throughput` measures with a broker.
//!
//! ```sh
//! cargo bench --bench windows            # 200,000 records, 1,000 keys, median of 3
//! cargo bench --bench windows -- --quick # 20,000 records, one run
//! ```
//!
//! Input: one record every 5 ms of event time over 4 partitions, each 50th record 0 to
//! 30 s late. Every subject emits its results (closed windows, corrections, late records).
//! One row adds a table lookup per record to the baseline (a stream–table join).

use std::time::{Duration, Instant};

use kafka_eos::codec::Json;
use kafka_eos::operators::{
    Aggregate, HoppingWindows, SessionWindows, SlidingWindows, StreamJoin, TumblingWindows, WindowAlign, WindowUpdate,
};
use kafka_eos::processor::{Context, ProcessError, Processor};
use kafka_eos::timers::{Timer, Timers};
use kafka_eos::{InputRecord, OutputRecord, Pipeline, PipelineBuilder, Topic};
use kafka_eos_testkit::driver::{TestDriver, TestInput};

const KEYS: u64 = 1_000;
const MINUTE: Duration = Duration::from_secs(60);

fn emit(ctx: &mut Context<'_>, out: &Topic, u: WindowUpdate<u64, u64>) {
    if let Some(late) = u.late {
        ctx.emit(late);
    }
    for w in u.closed {
        ctx.emit(OutputRecord::to(out).key(format!("{}/{}", w.key, w.start_ms)).value(w.value.to_string()));
    }
}

/// A pipeline folding each record's key with `$body` (`w`: the operator `$op` builds on
/// builder `b`), emitting what it returns.
macro_rules! subject {
    (|$b:ident| $op:expr, |$w:ident, $ctx:ident, $rec:ident, $key:ident, $t:ident| $body:expr) => {
        Box::new(move || {
            let mut $b = Pipeline::builder().input_topic("in");
            let $w = $op;
            let out = $b.output_topic("out");
            $b.processor(move |$ctx, $rec| {
                let $key: u64 = String::from_utf8_lossy($rec.key.as_deref().unwrap_or_default()).parse()?;
                let $t = $rec.timestamp.unwrap_or(0);
                let update: Option<WindowUpdate<u64, u64>> = $body;
                if let Some(u) = update {
                    emit($ctx, &out, u);
                }
                Ok(())
            })
        })
    };
    (|$b:ident| $op:expr) => {
        subject!(|$b| $op, |w, ctx, rec, key, t| Some(w.add(ctx, rec, &key, t, |n| *n += 1)?))
    };
}

type Subject = (&'static str, Box<dyn Fn() -> PipelineBuilder>);
/// Makes a subject's driver, ready for the input.
type MakeDriver = Box<dyn Fn() -> TestDriver>;

/// Tumbling 1 min windows closed by an event-time timer per window end (what a pipeline
/// does to close windows on idle partitions): the timers' cost on top of "tumbling 1 min".
#[derive(Clone)]
struct TimerClosed {
    w: TumblingWindows<u64, u64>,
    timers: Timers,
    out: Topic,
}

impl Processor for TimerClosed {
    async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
        let key: u64 = String::from_utf8_lossy(rec.key.as_deref().unwrap_or_default()).parse()?;
        let t = rec.timestamp.unwrap_or(0);
        let end = (t.div_euclid(60_000) + 1) * 60_000;
        self.timers.at_event_time(ctx, end, 0)?;
        let u = self.w.add(ctx, rec, &key, t, |n| *n += 1)?;
        emit(ctx, &self.out, u);
        Ok(())
    }

    async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        let closed = self.w.advance(ctx, timer.at_ms)?;
        emit(ctx, &self.out, WindowUpdate { closed, ..WindowUpdate::default() });
        Ok(())
    }
}

fn timer_closed() -> PipelineBuilder {
    let mut b = Pipeline::builder().input_topic("in");
    let w = TumblingWindows::<u64, u64>::new(&mut b, "w", MINUTE, "late");
    let timers = Timers::new(&mut b, "timers");
    let out = b.output_topic("out");
    b.processor_impl(TimerClosed { w, timers, out })
}

/// A 10 s stream–stream join on the same input: even offsets are the left side, odd ones
/// the right (a key then has about 2 records of the other side within the window); every
/// pair and late record is emitted.
fn joined() -> PipelineBuilder {
    let mut b = Pipeline::builder().input_topic("in");
    let join = StreamJoin::<u64, i64, i64>::new(&mut b, "j", Duration::from_secs(10)).expect("window");
    let (out, late) = (b.output_topic("out"), b.output_topic("late"));
    b.processor(move |ctx, rec| {
        let key: u64 = String::from_utf8_lossy(rec.key.as_deref().unwrap_or_default()).parse()?;
        let t = rec.timestamp.unwrap_or(0);
        let u = match rec.offset % 2 {
            0 => join.left(ctx, &key, t, rec.offset)?,
            _ => join.right(ctx, &key, t, rec.offset)?,
        };
        if let Some(copy) = u.late_record(rec, &late) {
            ctx.emit(copy);
        }
        for p in u.joined {
            ctx.emit(OutputRecord::to(&out).key(format!("{}/{}/{}", p.key, p.left, p.right)).value("v"));
        }
        Ok(())
    })
}

fn subjects() -> Vec<Subject> {
    let s = Duration::from_secs;
    fn merge(a: &mut u64, b: u64) {
        *a += b
    }
    vec![
        (
            "aggregate (baseline)",
            subject!(|b| Aggregate::<u64, u64>::new(&mut b, "agg"), |w, ctx, rec, key, t| {
                let _ = (rec, t, w.update(ctx, &key, |n| *n += 1)?);
                None
            }),
        ),
        ("tumbling 1 min", subject!(|b| TumblingWindows::<u64, u64>::new(&mut b, "w", MINUTE, "late"))),
        ("tumbling 1 min, closed by timers", Box::new(timer_closed)),
        (
            "tumbling 1 min, retention 1 min",
            subject!(|b| TumblingWindows::<u64, u64>::new(&mut b, "w", MINUTE, "late").retention(MINUTE)),
        ),
        (
            "tumbling Europe/Berlin days",
            subject!(|b| {
                let days = WindowAlign::days_in("Europe/Berlin").expect("a known zone");
                TumblingWindows::<u64, u64>::aligned(&mut b, "w", days, "late")
            }),
        ),
        (
            "hopping 1 min / 10 s",
            subject!(|b| HoppingWindows::<u64, u64>::new(&mut b, "w", MINUTE, s(10), "late").expect("shape")),
        ),
        (
            "sliding 10 s",
            subject!(|b| SlidingWindows::<u64, u64>::new(&mut b, "w", s(10), "late", merge).expect("shape")),
        ),
        (
            "session gap 10 s",
            subject!(|b| SessionWindows::<u64, u64>::new(&mut b, "w", s(10), "late", merge).expect("shape")),
        ),
        ("stream join 10 s", Box::new(joined)),
    ]
}

/// A merchant-style table row, JSON on the table topic.
#[derive(serde::Serialize, serde::Deserialize)]
struct Rate {
    bps: u64,
}

/// The baseline aggregate, with each record first looking its key up in a table of
/// [`KEYS`] rows (a stream–table join, [`kafka_eos::table`]); the rows are piped first.
fn table_joined() -> TestDriver {
    let mut b = Pipeline::builder().input_topic("in");
    let agg = Aggregate::<u64, u64>::new(&mut b, "agg");
    let rates = b.table::<Rate, _>("rates", Json);
    let b = b.processor(move |ctx, rec| {
        let key_bytes = rec.key.as_deref().unwrap_or_default();
        let bps = ctx.table(&rates).get(key_bytes)?.map_or(0, |r| r.bps);
        let key: u64 = String::from_utf8_lossy(key_bytes).parse()?;
        agg.update(ctx, &key, |n| *n += bps)?;
        Ok(())
    });
    let mut driver = TestDriver::new(b).expect("valid pipeline").batch_size(Some(500));
    for key in 0..KEYS {
        let row = TestInput::new().partition((key % 4) as i32).key(key.to_string());
        driver.pipe_table("rates", row.encode_value(&Json, &Rate { bps: key % 300 }).expect("json")).expect("row");
    }
    driver
}

fn inputs(n: u64) -> Vec<TestInput> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|i| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let late = if i % 50 == 0 { (seed % 30_000) as i64 } else { 0 };
            let key = seed % KEYS;
            TestInput::new()
                .partition((key % 4) as i32)
                .key(key.to_string())
                .timestamp(1_700_000_000_000 + i as i64 * 5 - late)
                .value("v")
        })
        .collect()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, runs) = if quick { (20_000, 1) } else { (200_000, 3) };
    let records = inputs(n);
    println!("{n} records, {KEYS} keys, 4 partitions, batches of 500; median of {runs}");
    println!("{:<34} {:>12} {:>10} {:>12} {:>10}", "subject", "ns/record", "vs base", "changelog/rec", "outputs");
    let mut base = None;
    let mut subjects: Vec<(&str, MakeDriver)> = subjects()
        .into_iter()
        .map(|(name, make)| {
            let driver: MakeDriver =
                Box::new(move || TestDriver::new(make()).expect("valid pipeline").batch_size(Some(500)));
            (name, driver)
        })
        .collect();
    subjects.insert(1, ("aggregate + table lookup", Box::new(table_joined)));
    for (name, make) in subjects {
        let mut times = Vec::new();
        let mut stats = None;
        for _ in 0..runs {
            let mut driver = make();
            let start = Instant::now();
            driver.pipe_all(records.iter().cloned()).expect("processed");
            driver.commit().expect("committed");
            times.push(start.elapsed().as_nanos() as f64 / n as f64);
            stats = Some(driver.stats());
        }
        times.sort_by(f64::total_cmp);
        let ns = times[times.len() / 2];
        let base_ns = *base.get_or_insert(ns);
        let s = stats.expect("one run");
        println!(
            "{name:<34} {ns:>12.0} {:>9.2}x {:>12.2} {:>10}",
            ns / base_ns,
            s.changelog_records as f64 / n as f64,
            s.records_out
        );
    }
}
