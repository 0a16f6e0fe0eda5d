//! What a window operator hands back: the windows its trigger reported, the results a
//! record closed or corrected, the sessions it retracted, the late record itself, and the
//! configurations it refuses.

use crate::record::OutputRecord;

/// The header a late record carries on the late-records topic: the partition's watermark
/// (milliseconds) when it arrived. For a [`StreamJoin`](crate::operators::StreamJoin): its stream time
/// − window − grace, the oldest event time that was still on time.
pub const LATE_HEADER: &str = "kafka-eos.late-watermark";

/// A window's result: emitted once when the window closes (revision 0), then again for
/// every correction (revision 1, 2, ...). Downstream, key it by (key, start): the latest
/// revision is the window's total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedWindow<K, A> {
    /// The key.
    pub key: K,
    /// Window start, inclusive (ms since the epoch). For a session: its first record's time.
    pub start_ms: i64,
    /// Window end, exclusive. For a session: its last record's time + 1.
    pub end_ms: i64,
    /// The aggregate.
    pub value: A,
    /// 0 for the result emitted at close; each correction of the same (key, start) adds 1.
    pub revision: u32,
}

/// The window a record is folded into, as its results report it (what
/// [`add_with_window`](super::HoppingWindows::add_with_window) tells the fold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// Start, inclusive (ms since the epoch). For a session: its first record's time.
    pub start_ms: i64,
    /// End, exclusive. For a session: its last record's time + 1.
    pub end_ms: i64,
}

/// A window its [`Trigger`](super::Trigger) reported: its aggregate right after the record's
/// fold. Downstream, key it by (key, start) like a [`ClosedWindow`]; the latest one is the
/// window's current value until its result at close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggeredWindow<K, A> {
    /// The key.
    pub key: K,
    /// Window start, inclusive (ms since the epoch). For a session: its first record's time.
    pub start_ms: i64,
    /// Window end, exclusive. For a session: its last record's time + 1.
    pub end_ms: i64,
    /// The aggregate, this record included.
    pub value: A,
    /// Whether the window had closed: this update is a correction, which
    /// [`WindowUpdate::closed`] also holds (with its revision).
    pub closed: bool,
}

/// A session result emitted earlier that no longer exists: a late record merged its session
/// into an earlier one (whose start the merged session keeps). Downstream, delete the
/// (key, start) row (a tombstone on a compacted topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetractedWindow<K> {
    /// The key.
    pub key: K,
    /// The retracted session's start.
    pub start_ms: i64,
}

/// What one record did to the windows.
#[derive(Debug)]
pub struct WindowUpdate<K, A> {
    /// The windows this record updated that the operator's [`Trigger`](super::Trigger)
    /// reports, in the order the record was folded into them (see the
    /// [order of updates](crate::operators#order-of-updates)). Always empty under the
    /// default trigger, [`Trigger::at_close`](super::Trigger::at_close).
    pub triggered: Vec<TriggeredWindow<K, A>>,
    /// The record itself, bound for the late-records topic, if one of its windows was past
    /// its retention (see each kind for which windows still got it).
    pub late: Option<OutputRecord>,
    /// Results to emit: windows this late record corrected (revision ≥ 1, or 0 if the window
    /// had never been emitted for this key), in the order it was folded into them; then the
    /// windows this record's watermark advance closed (revision 0), by end, then start.
    pub closed: Vec<ClosedWindow<K, A>>,
    /// Session results to delete downstream (session windows only).
    pub retracted: Vec<RetractedWindow<K>>,
}

impl<K, A> Default for WindowUpdate<K, A> {
    fn default() -> Self {
        WindowUpdate { triggered: Vec::new(), late: None, closed: Vec::new(), retracted: Vec::new() }
    }
}

/// A window configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// [`WindowAlign::days_in`](super::WindowAlign::days_in) with a name the compiled-in time-zone database lacks.
    #[error("unknown time zone {name:?} ({detail}): use an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    UnknownTimeZone {
        /// The name given.
        name: String,
        /// The time-zone library's message.
        detail: String,
    },
    /// Window sizes that do not fit together (a hopping size that is not a whole number of
    /// advances, a zero gap).
    #[error("invalid windows: {0}")]
    Shape(String),
}
