//! Where window boundaries fall: a fixed step from an offset, or calendar days in a time zone.

use std::time::Duration;

#[cfg(feature = "time-zones")]
use super::WindowError;

/// The grid of boundaries every time-window kind cuts event time on: tumbling windows are
/// one step long, hopping windows start on every step and span several. (Session windows
/// are cut by the data, not by a grid.)
///
/// - [`fixed(size)`](WindowAlign::fixed): boundaries every `size` since the Unix epoch,
///   i.e. UTC-aligned (a day runs from 00:00 UTC). Cheap: one division per record.
/// - [`.offset(d)`](WindowAlign::offset): the same boundaries moved by `d` (days starting
///   at 06:00 UTC: `fixed(1 day).offset(6 h)`). Default: no offset. Taken modulo the step.
/// - [`days_in(tz)`](WindowAlign::days_in) (cargo feature `time-zones`): calendar days in an
///   IANA time zone, so a "business day in Europe/Berlin" runs from local midnight to local
///   midnight and lasts 23 hours on the day clocks go forward and 25 hours on the day they go
///   back. With `.offset(d)` the day starts at local time `d` (06:00 local: `.offset(6 h)`,
///   taken modulo 24 hours); a start that falls in a clock gap moves forward by the gap, a
///   start in a repeated hour takes its first occurrence. Costs a time-zone conversion per
///   record and per window closed (about a microsecond).
///
/// The grid is configuration, not state: changing it for an existing store regroups records
/// from then on while windows already open keep their old starts. Give a store with a new
/// grid a new name.
#[derive(Clone, Debug)]
pub struct WindowAlign {
    step: Step,
    offset_ms: i64,
}

#[derive(Clone, Debug)]
enum Step {
    Fixed(i64),
    #[cfg(feature = "time-zones")]
    Days(jiff::tz::TimeZone),
}

#[cfg(feature = "time-zones")]
const DAY_MS: i64 = 86_400_000;

pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl WindowAlign {
    /// Boundaries every `size` (at least 1 ms) from the Unix epoch.
    pub fn fixed(size: Duration) -> WindowAlign {
        WindowAlign { step: Step::Fixed(millis(size).max(1)), offset_ms: 0 }
    }

    /// Calendar days in the IANA time zone `name` (e.g. `"Europe/Berlin"`), from the
    /// time-zone database compiled into the binary (so every instance, whatever its system
    /// files, cuts days at the same instants; a new database arrives with a new build).
    ///
    /// # Errors
    /// [`WindowError::UnknownTimeZone`] if the database has no zone of that name.
    #[cfg(feature = "time-zones")]
    pub fn days_in(name: &str) -> Result<WindowAlign, WindowError> {
        let tz = jiff::tz::TimeZone::get(name)
            .map_err(|e| WindowError::UnknownTimeZone { name: name.to_string(), detail: e.to_string() })?;
        Ok(WindowAlign { step: Step::Days(tz), offset_ms: 0 })
    }

    /// Moves every boundary by `offset` (modulo the step; for calendar days, modulo 24 hours
    /// of local time).
    pub fn offset(mut self, offset: Duration) -> WindowAlign {
        let period = match &self.step {
            Step::Fixed(size) => *size,
            #[cfg(feature = "time-zones")]
            Step::Days(_) => DAY_MS,
        };
        self.offset_ms = millis(offset).rem_euclid(period);
        self
    }

    /// The window (start inclusive, end exclusive, ms since the epoch) this grid puts event
    /// time `t` in, as one step long (a tumbling window): what a processor needs to schedule
    /// a timer at its window's end, or a batch job to group records as the operator does.
    pub fn window_of(&self, t: i64) -> (i64, i64) {
        let start = self.floor(t);
        (start, self.step(start, 1))
    }

    /// A name for the window starting at `start_ms`, for output keys: the local date
    /// (`2026-03-29`) of a calendar day in a time zone (that of its start, minus the
    /// offset); the start in milliseconds for a fixed grid.
    pub fn label(&self, start_ms: i64) -> String {
        match &self.step {
            Step::Fixed(_) => start_ms.to_string(),
            #[cfg(feature = "time-zones")]
            Step::Days(tz) => days::date_of(tz, self.offset_ms, start_ms).to_string(),
        }
    }

    /// The last boundary at or before `t`.
    pub(super) fn floor(&self, t: i64) -> i64 {
        match &self.step {
            Step::Fixed(size) => {
                t.saturating_sub(self.offset_ms).div_euclid(*size).saturating_mul(*size).saturating_add(self.offset_ms)
            }
            #[cfg(feature = "time-zones")]
            Step::Days(tz) => days::floor(tz, self.offset_ms, t),
        }
    }

    /// The boundary `n` steps after boundary `b` (before it if `n` is negative); saturates
    /// at the ends of time.
    pub(super) fn step(&self, b: i64, n: i64) -> i64 {
        match &self.step {
            Step::Fixed(size) => b.saturating_add(size.saturating_mul(n)),
            #[cfg(feature = "time-zones")]
            Step::Days(tz) => days::step(tz, self.offset_ms, b, n),
        }
    }
}

/// Calendar days: event time is clamped to the years jiff supports (-9999..=9999); windows
/// beyond that saturate.
#[cfg(feature = "time-zones")]
mod days {
    use jiff::civil::{Date, Time};
    use jiff::tz::TimeZone;
    use jiff::{SignedDuration, Span, Timestamp};

    fn clamp(t: i64) -> Timestamp {
        let (lo, hi) = (Timestamp::MIN.as_millisecond(), Timestamp::MAX.as_millisecond());
        Timestamp::from_millisecond(t.clamp(lo, hi)).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// The local date whose day (starting at local time `offset`) contains `t`, roughly.
    pub(super) fn date_of(tz: &TimeZone, offset_ms: i64, t: i64) -> Date {
        let local = tz.to_datetime(clamp(t));
        local.checked_sub(SignedDuration::from_millis(offset_ms)).unwrap_or(local).date()
    }

    /// When the day of local `date` starts (ms), or `None` out of range.
    fn start_of(tz: &TimeZone, offset_ms: i64, date: Date) -> Option<i64> {
        let dt = date.to_datetime(Time::midnight()).checked_add(SignedDuration::from_millis(offset_ms)).ok()?;
        Some(tz.to_timestamp(dt).ok()?.as_millisecond())
    }

    fn add_days(date: Date, n: i64) -> Option<Date> {
        date.checked_add(Span::new().try_days(n).ok()?).ok()
    }

    pub(super) fn floor(tz: &TimeZone, offset_ms: i64, t: i64) -> i64 {
        let date = date_of(tz, offset_ms, t);
        // The local date is exact except around a transition at the day's start: look at
        // its neighbours.
        let start = |n: i64| add_days(date, n).and_then(|d| start_of(tz, offset_ms, d));
        match (start(0), start(1)) {
            (_, Some(next)) if next <= t => next,
            (Some(s), _) if s <= t => s,
            _ => start(-1).unwrap_or(i64::MIN),
        }
    }

    pub(super) fn step(tz: &TimeZone, offset_ms: i64, b: i64, n: i64) -> i64 {
        let date = date_of(tz, offset_ms, b);
        add_days(date, n).and_then(|d| start_of(tz, offset_ms, d)).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;
    const DAY_MS: i64 = 24 * H;

    #[test]
    fn fixed_windows_with_an_offset_start_at_the_offset() {
        let a = WindowAlign::fixed(Duration::from_millis(DAY_MS as u64)).offset(Duration::from_secs(6 * 3600));
        // 1970-01-02 05:00 UTC belongs to the day that started 1970-01-01 06:00 UTC.
        assert_eq!(a.floor(DAY_MS + 5 * H), 6 * H);
        assert_eq!(a.floor(DAY_MS + 6 * H), DAY_MS + 6 * H);
        assert_eq!(a.floor(-1), -DAY_MS + 6 * H, "before the epoch too");
        assert_eq!(a.step(6 * H, 2), 2 * DAY_MS + 6 * H);
        assert_eq!(a.step(6 * H, -1), -DAY_MS + 6 * H);
        // An offset of a step or more is taken modulo the step.
        let b = WindowAlign::fixed(Duration::from_millis(10)).offset(Duration::from_millis(23));
        assert_eq!(b.floor(22), 13);
        assert!(b.floor(i64::MIN) < i64::MIN + 10, "saturates, no overflow");
        assert_eq!(b.step(13, i64::MAX), i64::MAX);
    }

    #[cfg(feature = "time-zones")]
    fn ms(s: &str) -> i64 {
        s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
    }

    #[cfg(feature = "time-zones")]
    #[test]
    fn berlin_days_last_23_and_25_hours_on_the_dst_sundays() {
        let a = WindowAlign::days_in("Europe/Berlin").unwrap();
        // 2024-03-31: clocks go 02:00 -> 03:00 CET -> CEST; the day runs 23:00Z..22:00Z.
        let start = a.floor(ms("2024-03-31T12:00:00Z"));
        assert_eq!(start, ms("2024-03-30T23:00:00Z"));
        assert_eq!(a.step(start, 1) - start, 23 * H);
        assert_eq!(a.step(start, 1), ms("2024-03-31T22:00:00Z"));
        // 2024-10-27: clocks go 03:00 -> 02:00 CEST -> CET; the day lasts 25 hours.
        let start = a.floor(ms("2024-10-27T12:00:00Z"));
        assert_eq!(start, ms("2024-10-26T22:00:00Z"));
        assert_eq!(a.step(start, 1) - start, 25 * H);
        // An ordinary winter day is 24 hours; boundaries are inclusive starts.
        assert_eq!(a.floor(ms("2024-01-15T23:00:00Z")), ms("2024-01-15T23:00:00Z"));
        assert_eq!(a.floor(ms("2024-01-15T22:59:59.999Z")), ms("2024-01-14T23:00:00Z"));
        assert_eq!(a.step(ms("2024-01-15T23:00:00Z"), -7), ms("2024-01-08T23:00:00Z"));
        let (start, end) = a.window_of(ms("2024-03-31T12:00:00Z"));
        assert_eq!((start, end - start), (ms("2024-03-30T23:00:00Z"), 23 * H));
        assert_eq!(a.label(start), "2024-03-31", "named by its local date");
        assert_eq!(a.label(ms("2024-10-26T22:00:00Z")), "2024-10-27");
        let fixed = WindowAlign::fixed(Duration::from_millis(DAY_MS as u64));
        assert_eq!((fixed.window_of(DAY_MS + 5), fixed.label(DAY_MS)), ((DAY_MS, 2 * DAY_MS), DAY_MS.to_string()));
    }

    #[cfg(feature = "time-zones")]
    #[test]
    fn local_offsets_and_starts_in_a_clock_gap() {
        // Business days from 06:00 Berlin time.
        let a = WindowAlign::days_in("Europe/Berlin").unwrap().offset(Duration::from_secs(6 * 3600));
        assert_eq!(a.floor(ms("2024-07-01T03:59:59Z")), ms("2024-06-30T04:00:00Z"));
        assert_eq!(a.floor(ms("2024-07-01T04:00:00Z")), ms("2024-07-01T04:00:00Z"));
        // Days from 02:30 local: on 2024-03-31 02:30 does not exist, the day starts at 03:30
        // CEST (01:30Z); the day that starts then is 23 hours long.
        let g = WindowAlign::days_in("Europe/Berlin").unwrap().offset(Duration::from_secs(9000));
        let before = g.floor(ms("2024-03-31T01:00:00Z"));
        assert_eq!(before, ms("2024-03-30T01:30:00Z"));
        assert_eq!(g.step(before, 1), ms("2024-03-31T01:30:00Z"));
        assert_eq!(g.floor(ms("2024-03-31T01:30:00Z")), ms("2024-03-31T01:30:00Z"));
        assert_eq!(g.step(ms("2024-03-31T01:30:00Z"), 1), ms("2024-04-01T00:30:00Z"));
    }

    #[cfg(feature = "time-zones")]
    #[test]
    fn an_unknown_zone_is_a_typed_error_naming_it() {
        let err = WindowAlign::days_in("Europe/Atlantis").unwrap_err();
        assert!(matches!(&err, WindowError::UnknownTimeZone { name, .. } if name == "Europe/Atlantis"));
        assert!(err.to_string().contains("Europe/Atlantis"), "{err}");
        // Far outside jiff's years: saturates instead of panicking.
        let a = WindowAlign::days_in("UTC").unwrap();
        assert!(a.floor(i64::MAX) > 0 && a.step(a.floor(i64::MIN), -1) == i64::MIN);
    }
}
