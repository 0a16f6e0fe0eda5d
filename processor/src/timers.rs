//! Timers (punctuation): a processor's callbacks at an event time or a wall-clock time, per
//! input partition, exactly once.
//!
//! # Why
//! An operator that only acts when a record arrives cannot close the last window of a day
//! that receives no more records, nor emit on a schedule. A timer calls
//! [`Processor::on_timer`](crate::processor::Processor::on_timer) with a [`Context`] like a record's:
//! its outputs and state changes join a transaction and commit exactly once.
//!
//! # How
//! Declare the timers once on the builder, schedule them from `process` (or from `on_timer`)
//! with the record's context, and handle them in `on_timer`:
//!
//! ```no_run
//! use std::time::Duration;
//! use kafka_eos::processor::{Context, ProcessError, Processor};
//! use kafka_eos::timers::{Timer, TimerSpec, Timers};
//! use kafka_eos::{InputRecord, OutputRecord, Pipeline, Topic};
//!
//! #[derive(Clone)]
//! struct Daily { timers: Timers, out: Topic }
//!
//! impl Processor for Daily {
//!     async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
//!         let day_end = (rec.timestamp.unwrap_or(0) / 86_400_000 + 1) * 86_400_000;
//!         self.timers.at_event_time(ctx, day_end, 0)?; // scheduling twice keeps one timer
//!         Ok(())
//!     }
//!     async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
//!         ctx.emit(OutputRecord::to(&self.out).value(format!("day ending {} closed", timer.at_ms)));
//!         Ok(())
//!     }
//! }
//!
//! let mut builder = Pipeline::builder().bootstrap_servers("127.0.0.1:9092").application_id("daily").input_topic("payments");
//! let timers = Timers::with(&mut builder, TimerSpec::new("day-timers").idle_advance(Duration::from_secs(60)));
//! let out = builder.output_topic("days");
//! let pipeline = builder.processor_impl(Daily { timers, out }).build();
//! ```
//!
//! # The two clocks
//! - **Event time.** Each partition has a *stream time*: the largest record timestamp it has
//!   seen (Kafka's timestamp: set it to the event's time when producing), or later if the
//!   processor says so ([`Timers::advance_stream_time`]). When the event time is in the
//!   payload and the timestamps are produce times, [`StreamTime::Advanced`] leaves the
//!   stream time to the processor alone. An event-time timer fires, right after the record that moved the stream
//!   time to or past it, in that record's transaction. Deterministic: a replay or a restore
//!   fires the same timers after the same records.
//! - **Wall clock.** A wall-clock timer fires at the first transaction that starts at or
//!   after its time: with the next batch, or — when the partition receives nothing — in a
//!   transaction of its own, which the task starts when the timer is due (a transaction
//!   with no input records and no offsets). It follows the machine's clock, so a replay may
//!   fire it where the first attempt did not; only the committed attempt counts.
//!
//! # Idle partitions
//! A partition that receives nothing keeps its stream time, so its event-time timers wait.
//! [`TimerSpec::idle_advance`] (off by default, for determinism) moves the stream time of a
//! partition that has received no record for the idle timeout to *wall clock − timeout*:
//! it assumes a record older than that will not come. The last day of a close then ends
//! about one timeout after midnight, without heartbeat records. A record that does come
//! later is late, and the operators' lateness rules apply to it.
//!
//! The wall clock, not the records, then sets the stream time: for a replay or a backfill
//! (event times months behind the clock) a gap of one timeout in the middle of the input —
//! a broker outage will do — moves the stream time past every window still to come. Schedule
//! a window's closing timer whenever a record opens the window, *whatever the stream time*:
//! a timer already due fires right after that record and closes it (later records of it
//! are then corrections or late). A processor that skips the timer because "the stream time
//! is past it already" leaves those windows open for good.
//!
//! # Exactly once
//! Timers and the stream time live in a store of their own (with its changelog): scheduling
//! one, and its firing (it is deleted as it fires), commit with the transaction that did it.
//! A timer scheduled in an aborted attempt never existed; one fired in an aborted attempt
//! fires again in the replay. A timer is identified by (clock, time, tag): scheduling the
//! same one again is a no-op.
//!
//! # What it costs
//! One store read per record (the stream time and the next due times), a scan of the
//! partition's timers only when one is due, and, while timers wait on idle partitions, a
//! transaction per due time. Partitions of a pipeline with timers have their state restored
//! as soon as they are assigned (not at their first record), so that their timers can fire.
//!
//! # Limits
//! At most one `Timers` per pipeline. Sink rows ([`crate::sink`]) cannot be written from a
//! timer that fires without a record (a wall-clock or idle timer): such a callback fails.
//! A callback that fails is retried with its transaction (the processor error policy's
//! backoff) until the task timeout, then the pipeline stops; an event-time timer's failure
//! counts as a failure of the record it fired after (its policy applies).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

mod declare;

use crate::processor::Context;
use crate::state::{PartitionState, StateError, Store, StoreMut};

/// The clock a timer follows (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TimerKind {
    /// The partition's stream time.
    EventTime,
    /// The machine's clock.
    WallClock,
}

/// A timer, as [`Processor::on_timer`](crate::processor::Processor::on_timer) receives it when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    /// Milliseconds since the epoch, on its clock.
    pub at_ms: i64,
    /// Its clock.
    pub kind: TimerKind,
    /// What the processor scheduled it for (a window, a key's hash, a job number).
    pub tag: u64,
}

/// Store keys (variants only ever appended: the changelog outlives versions).
#[derive(Serialize, Deserialize)]
pub(crate) enum Key {
    Meta,
    Timer { kind: TimerKind, at_ms: i64, tag: u64 },
}

/// Store values.
#[derive(Serialize, Deserialize)]
pub(crate) enum Val {
    Meta { stream_time: i64, next_event: i64, next_wall: i64 },
    Pending,
}

/// The partition's stream time and the earliest time of each clock's pending timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta {
    stream_time: i64,
    next_event: i64,
    next_wall: i64,
}

impl Meta {
    const EMPTY: Meta = Meta { stream_time: i64::MIN, next_event: i64::MAX, next_wall: i64::MAX };

    fn load(store: &StoreMut<'_, Key, Val>) -> Result<Meta, StateError> {
        Ok(match store.get(&Key::Meta)? {
            Some(Val::Meta { stream_time, next_event, next_wall }) => Meta { stream_time, next_event, next_wall },
            _ => Meta::EMPTY,
        })
    }

    fn save(self, store: &mut StoreMut<'_, Key, Val>) -> Result<(), StateError> {
        let Meta { stream_time, next_event, next_wall } = self;
        store.put(&Key::Meta, &Val::Meta { stream_time, next_event, next_wall })
    }

    fn due(&self, now_ms: i64) -> bool {
        self.next_event <= self.stream_time || self.next_wall <= now_ms
    }
}

/// What moves a partition's stream time (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamTime {
    /// The largest record timestamp seen (Kafka's timestamp), and
    /// [`Timers::advance_stream_time`]. The default.
    #[default]
    RecordTimestamps,
    /// Only [`Timers::advance_stream_time`]: for event times carried in the payload, when the
    /// records' timestamps are their produce time.
    Advanced,
}

/// How a pipeline's [`Timers`] behave; [`Timers::with`] declares them.
#[derive(Debug, Clone)]
pub struct TimerSpec {
    name: String,
    idle: Option<Duration>,
    stream_time: StreamTime,
}

impl TimerSpec {
    /// Timers kept in the store `name` (its changelog topic is named after it), with the
    /// stream time following record timestamps and no idle advance.
    pub fn new(name: impl Into<String>) -> TimerSpec {
        TimerSpec { name: name.into(), idle: None, stream_time: StreamTime::default() }
    }

    /// A partition that has received no record for `timeout` has its stream time moved on
    /// with the wall clock, to *now − timeout* (see the [module docs](self)). Default: off —
    /// event-time results then depend only on the records. A short timeout closes idle
    /// windows sooner and turns more slightly delayed records into late ones; a long one
    /// keeps results waiting.
    pub fn idle_advance(mut self, timeout: Duration) -> TimerSpec {
        self.idle = Some(timeout);
        self
    }

    /// What moves the stream time. Default: [`StreamTime::RecordTimestamps`].
    pub fn stream_time(mut self, source: StreamTime) -> TimerSpec {
        self.stream_time = source;
        self
    }
}

/// A pipeline's timers: a handle to schedule them, declared once on the builder. Cheap to
/// clone (a store handle).
#[derive(Clone, Debug)]
pub struct Timers {
    store: Store<Key, Val>,
    idle: Option<Duration>,
    stream_time: StreamTime,
}

impl Timers {
    /// Whether record timestamps move the stream time.
    pub(crate) fn follows_records(&self) -> bool {
        self.stream_time == StreamTime::RecordTimestamps
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        self.store.name()
    }

    /// Calls `on_timer` once the partition's stream time reaches `at_ms` (right away, after
    /// the current record, if it already has).
    pub fn at_event_time(&self, ctx: &mut Context<'_>, at_ms: i64, tag: u64) -> Result<(), StateError> {
        self.schedule(ctx, Timer { at_ms, kind: TimerKind::EventTime, tag })
    }

    /// Calls `on_timer` at the first transaction that starts at or after `at` on this
    /// machine's clock (a transaction of its own if no record comes).
    pub fn at_wall_clock(&self, ctx: &mut Context<'_>, at: SystemTime, tag: u64) -> Result<(), StateError> {
        self.schedule(ctx, Timer { at_ms: epoch_ms(at), kind: TimerKind::WallClock, tag })
    }

    /// Schedules `timer`; a no-op if it is pending already.
    pub fn schedule(&self, ctx: &mut Context<'_>, timer: Timer) -> Result<(), StateError> {
        let mut store = ctx.store(&self.store);
        let mut meta = Meta::load(&store)?;
        store.put(&key(&timer), &Val::Pending)?;
        match timer.kind {
            TimerKind::EventTime => meta.next_event = meta.next_event.min(timer.at_ms),
            TimerKind::WallClock => meta.next_wall = meta.next_wall.min(timer.at_ms),
        }
        meta.save(&mut store)
    }

    /// Cancels `timer`; whether it was pending.
    pub fn cancel(&self, ctx: &mut Context<'_>, timer: Timer) -> Result<bool, StateError> {
        let mut store = ctx.store(&self.store);
        let pending = store.get(&key(&timer))?.is_some();
        if pending {
            // The meta's next due time may now be early: the next scan corrects it.
            store.delete(&key(&timer))?;
        }
        Ok(pending)
    }

    /// The partition's stream time (the largest record timestamp seen, or what
    /// [`advance_stream_time`](Self::advance_stream_time) set); `None` before any.
    pub fn stream_time(&self, ctx: &mut Context<'_>) -> Result<Option<i64>, StateError> {
        let meta = Meta::load(&ctx.store(&self.store))?;
        Ok((meta.stream_time != i64::MIN).then_some(meta.stream_time))
    }

    /// Moves the partition's stream time to at least `event_time_ms` — for pipelines whose
    /// event time is in the payload, not the record's timestamp. The timers it makes due
    /// fire after the current record.
    pub fn advance_stream_time(&self, ctx: &mut Context<'_>, event_time_ms: i64) -> Result<(), StateError> {
        let mut store = ctx.store(&self.store);
        let mut meta = Meta::load(&store)?;
        if event_time_ms > meta.stream_time {
            meta.stream_time = event_time_ms;
            meta.save(&mut store)?;
        }
        Ok(())
    }

    /// Moves `state`'s stream time to at least `stream` (if any) and takes the timers due
    /// by it and by the wall clock `now_ms`, in order of time: each is deleted (in the open
    /// transaction) as it is taken. Empty, at the cost of one store read, when none is due.
    pub(crate) fn take_due(
        &self,
        state: &mut PartitionState,
        stream: Option<i64>,
        now_ms: i64,
    ) -> Result<Vec<Timer>, StateError> {
        let mut store = state.store_mut(&self.store);
        let mut meta = Meta::load(&store)?;
        let moved = stream.is_some_and(|t| t > meta.stream_time);
        if moved {
            meta.stream_time = stream.unwrap_or(meta.stream_time);
        }
        if !meta.due(now_ms) {
            if moved {
                meta.save(&mut store)?;
            }
            return Ok(Vec::new());
        }
        let (mut due, mut next_event, mut next_wall) = (Vec::new(), i64::MAX, i64::MAX);
        for (k, _) in store.entries()? {
            let Key::Timer { kind, at_ms, tag } = k else { continue };
            let timer = Timer { at_ms, kind, tag };
            match kind {
                TimerKind::EventTime if at_ms <= meta.stream_time => due.push(timer),
                TimerKind::WallClock if at_ms <= now_ms => due.push(timer),
                TimerKind::EventTime => next_event = next_event.min(at_ms),
                TimerKind::WallClock => next_wall = next_wall.min(at_ms),
            }
        }
        for timer in &due {
            store.delete(&key(timer))?;
        }
        (meta.next_event, meta.next_wall) = (next_event, next_wall);
        meta.save(&mut store)?;
        due.sort();
        Ok(due)
    }

    /// When `state` may next have a timer due without a record: its next wall-clock timer,
    /// or — with idle advance — when its next event-time timer comes due on the advancing
    /// stream time, at the earliest one idle timeout after `last_record`. `None` if never.
    pub(crate) fn next_wake(&self, state: &PartitionState, last_record: SystemTime) -> Option<SystemTime> {
        let meta = match state.store_ref(&self.store).get(&Key::Meta) {
            Ok(Some(Val::Meta { stream_time, next_event, next_wall })) => Meta { stream_time, next_event, next_wall },
            _ => return None,
        };
        let wall = (meta.next_wall != i64::MAX).then(|| from_epoch_ms(meta.next_wall));
        let idle = self.idle.filter(|_| meta.next_event != i64::MAX).map(|idle| {
            let due_on_stream = from_epoch_ms(meta.next_event) + idle;
            due_on_stream.max(last_record + idle)
        });
        [wall, idle].into_iter().flatten().min()
    }

    /// The stream time an idle partition moves to at `now`, if it has been idle (no
    /// record since `last_record`) for the idle timeout.
    pub(crate) fn idle_stream_time(&self, now: SystemTime, last_record: SystemTime) -> Option<i64> {
        let idle = self.idle?;
        (now.duration_since(last_record).unwrap_or_default() >= idle).then(|| epoch_ms(now) - millis(idle))
    }
}

fn key(t: &Timer) -> Key {
    Key::Timer { kind: t.kind, at_ms: t.at_ms, tag: t.tag }
}

pub(crate) fn epoch_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => millis(d),
        Err(e) => -millis(e.duration()),
    }
}

fn from_epoch_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(idle: Option<Duration>) -> (Timers, PartitionState) {
        let mut b = crate::Pipeline::builder();
        let spec = TimerSpec::new("timers");
        let timers = Timers::with(&mut b, if let Some(idle) = idle { spec.idle_advance(idle) } else { spec });
        (timers, crate::state::tests::state_of(&b, 0))
    }

    fn schedule(t: &Timers, st: &mut PartitionState, timer: Timer) {
        let mut out = Vec::new();
        let mut ctx = crate::processor::driver::tests::context(st, &mut out);
        t.schedule(&mut ctx, timer).unwrap();
    }

    const fn ev(at_ms: i64, tag: u64) -> Timer {
        Timer { at_ms, kind: TimerKind::EventTime, tag }
    }

    #[test]
    fn event_timers_fire_in_order_once_the_stream_time_reaches_them_and_only_once() {
        let (t, mut st) = setup(None);
        for timer in [ev(300, 1), ev(100, 2), ev(200, 3), ev(100, 2)] {
            schedule(&t, &mut st, timer);
        }
        assert_eq!(t.take_due(&mut st, Some(99), 0).unwrap(), vec![]);
        assert_eq!(t.take_due(&mut st, Some(200), 0).unwrap(), vec![ev(100, 2), ev(200, 3)]);
        // The stream time never goes back: an older record makes nothing due again.
        assert_eq!(t.take_due(&mut st, Some(50), 0).unwrap(), vec![]);
        assert_eq!(t.take_due(&mut st, Some(1_000), 0).unwrap(), vec![ev(300, 1)]);
        assert_eq!(t.take_due(&mut st, Some(2_000), 0).unwrap(), vec![]);
    }

    #[test]
    fn timers_taken_in_an_aborted_attempt_fire_again_and_committed_ones_do_not() {
        let (t, mut st) = setup(None);
        schedule(&t, &mut st, ev(100, 1));
        let _ = st.commit(&Default::default());
        assert_eq!(t.take_due(&mut st, Some(100), 0).unwrap(), vec![ev(100, 1)]);
        st.abort();
        assert_eq!(t.take_due(&mut st, Some(100), 0).unwrap(), vec![ev(100, 1)], "the replay fires it again");
        let _ = st.commit(&Default::default());
        assert_eq!(t.take_due(&mut st, Some(500), 0).unwrap(), vec![]);
    }

    #[test]
    fn wall_clock_timers_fire_by_the_clock_and_wake_the_task_at_their_time() {
        let (t, mut st) = setup(None);
        let wall = Timer { at_ms: 5_000, kind: TimerKind::WallClock, tag: 9 };
        schedule(&t, &mut st, wall);
        let _ = st.commit(&Default::default());
        assert_eq!(t.next_wake(&st, UNIX_EPOCH), Some(from_epoch_ms(5_000)));
        assert_eq!(t.take_due(&mut st, None, 4_999).unwrap(), vec![]);
        assert_eq!(t.take_due(&mut st, None, 5_000).unwrap(), vec![wall]);
        let _ = st.commit(&Default::default());
        assert_eq!(t.next_wake(&st, UNIX_EPOCH), None);
    }

    #[test]
    fn an_idle_partition_wakes_when_its_next_event_timer_comes_due_on_the_advancing_stream_time() {
        let idle = Duration::from_secs(60);
        let (t, mut st) = setup(Some(idle));
        schedule(&t, &mut st, ev(1_000_000, 1));
        let _ = st.commit(&Default::default());
        let last = from_epoch_ms(10_000);
        // Due when now − 60 s reaches the timer's time.
        assert_eq!(t.next_wake(&st, last), Some(from_epoch_ms(1_060_000)));
        assert_eq!(t.idle_stream_time(from_epoch_ms(69_999), last), None, "not idle for the timeout yet");
        let advanced = t.idle_stream_time(from_epoch_ms(1_060_000), last);
        assert_eq!(advanced, Some(1_000_000));
        assert_eq!(t.take_due(&mut st, advanced, 1_060_000).unwrap(), vec![ev(1_000_000, 1)]);
    }
}
