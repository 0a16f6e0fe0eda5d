//! How window state lies in its store: the keys and values of every window kind (variants
//! only ever appended), a key's sessions and recent record times, and the partition's clock.
//!
//! A threshold trigger's "has fired" flag lives in the window's own value, so it commits
//! with the output that reported it. Values without a fired window are written as before
//! the flag existed (`Agg`, `Closed`, `Sessions`, `Slides`); only a window that has fired is
//! written with one of the `Fired*` variants.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::state::{StateError, StoreMut};

/// Store keys of every window kind (variants only ever appended: see the `window` module docs).
#[derive(Serialize, Deserialize)]
pub(super) enum Key<K> {
    Meta,
    /// A grid window: start, key.
    Window(i64, K),
    /// Every live session of a key.
    Sessions(K),
    /// A key's recent records for sliding windows.
    Slides(K),
}

/// Store values of every window kind (variants only ever appended).
#[derive(Serialize, Deserialize)]
pub(super) enum Val<A> {
    /// The watermark as written before corrections existed (read, never written).
    Meta { max_time: i64, next_close: i64 },
    /// An open grid window's aggregate.
    Agg(A),
    /// A closed grid window kept for corrections, with its last emitted revision.
    Closed { revision: u32, value: A },
    /// The watermark: largest event time seen, earliest close and earliest expiry due, and
    /// the watermark of the last sweep.
    Clock { max_time: i64, next_close: i64, next_expiry: i64, swept: i64 },
    /// A key's sessions, by start.
    Sessions(Vec<Session<A>>),
    /// A key's recent record times with their windows, by time.
    Slides(Vec<Slide<A>>),
    /// An open grid window whose threshold trigger has fired (`Agg` otherwise).
    FiredAgg(A),
    /// A closed grid window whose threshold trigger has fired (`Closed` otherwise).
    FiredClosed { revision: u32, value: A },
    /// A key's sessions with their fired flags, once one has fired (`Sessions` otherwise).
    FiredSessions(Vec<(Session<A>, bool)>),
    /// A key's record times with their windows' fired flags, once one has fired (`Slides`
    /// otherwise).
    FiredSlides(Vec<(Slide<A>, bool)>),
}

/// A grid window's stored value, whichever variant holds it.
#[derive(Default)]
pub(super) struct Cell<A> {
    pub value: A,
    /// The revision last emitted; `None` while no result of it has been emitted.
    pub emitted: Option<u32>,
    pub fired: bool,
}

impl<A> Cell<A> {
    /// The grid window in `value`, if it holds one.
    pub(super) fn of(value: Val<A>) -> Option<Cell<A>> {
        let (value, emitted, fired) = match value {
            Val::Agg(value) => (value, None, false),
            Val::FiredAgg(value) => (value, None, true),
            Val::Closed { revision, value } => (value, Some(revision), false),
            Val::FiredClosed { revision, value } => (value, Some(revision), true),
            _ => return None,
        };
        Some(Cell { value, emitted, fired })
    }

    pub(super) fn into_val(self) -> Val<A> {
        match (self.emitted, self.fired) {
            (None, false) => Val::Agg(self.value),
            (None, true) => Val::FiredAgg(self.value),
            (Some(revision), false) => Val::Closed { revision, value: self.value },
            (Some(revision), true) => Val::FiredClosed { revision, value: self.value },
        }
    }
}

/// One session of a key: `[start, last]` in event time.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Session<A> {
    pub start: i64,
    pub last: i64,
    pub value: A,
    /// The revision last emitted for (key, start), if any.
    pub revision: Option<u32>,
    /// Whether the session has closed (and its current value been emitted).
    pub closed: bool,
    /// Whether its threshold trigger has fired (stored beside it, in `FiredSessions`).
    #[serde(skip)]
    pub fired: bool,
}

/// The per-partition watermark and the next times a sweep has work.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    pub max_time: i64,
    pub next_close: i64,
    pub next_expiry: i64,
    /// The watermark of the last sweep.
    pub swept: i64,
}

impl Clock {
    pub(super) fn load<K, A>(store: &StoreMut<'_, Key<K>, Val<A>>) -> Result<Clock, StateError>
    where
        K: Serialize + DeserializeOwned,
        A: Serialize + DeserializeOwned,
    {
        Ok(match store.get(&Key::Meta)? {
            Some(Val::Clock { max_time, next_close, next_expiry, swept }) => {
                Clock { max_time, next_close, next_expiry, swept }
            }
            Some(Val::Meta { max_time, next_close }) => {
                Clock { max_time, next_close, next_expiry: i64::MAX, swept: i64::MIN }
            }
            _ => Clock { max_time: i64::MIN, next_close: i64::MAX, next_expiry: i64::MAX, swept: i64::MIN },
        })
    }

    pub(super) fn save<K, A>(&self, store: &mut StoreMut<'_, Key<K>, Val<A>>) -> Result<(), StateError>
    where
        K: Serialize + DeserializeOwned,
        A: Serialize + DeserializeOwned,
    {
        let Clock { max_time, next_close, next_expiry, swept } = *self;
        store.put(&Key::Meta, &Val::Clock { max_time, next_close, next_expiry, swept })
    }
}

/// One record time of a key.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(super) struct Slide<A> {
    /// The record time.
    pub(super) t: i64,
    /// The contributions of the records at `t`, merged.
    pub(super) own: A,
    /// The window `(t - size, t]`.
    pub(super) window: A,
    pub(super) revision: Option<u32>,
    pub(super) closed: bool,
    /// Whether the window's threshold trigger has fired (stored beside it, in `FiredSlides`).
    #[serde(skip)]
    pub(super) fired: bool,
}

/// `list` with each element's flag set from its pair (a `Fired*` list as read).
pub(super) fn unpaired<W>(list: Vec<(W, bool)>, flag: fn(&mut W) -> &mut bool) -> Vec<W> {
    list.into_iter()
        .map(|(mut w, fired)| {
            *flag(&mut w) = fired;
            w
        })
        .collect()
}

/// `list` paired with each element's flag, if any is set (a `Fired*` list to write).
pub(super) fn paired<W>(list: Vec<W>, flag: fn(&mut W) -> &mut bool) -> Result<Vec<(W, bool)>, Vec<W>> {
    let mut list = list;
    if !list.iter_mut().any(|w| *flag(w)) {
        return Err(list);
    }
    Ok(list
        .into_iter()
        .map(|mut w| {
            let fired = *flag(&mut w);
            (w, fired)
        })
        .collect())
}
