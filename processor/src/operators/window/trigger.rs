//! When a window reports before its close: never (the default), on every update, or once
//! when a predicate on its aggregate first holds.

use std::fmt;
use std::sync::Arc;

/// When a window reports its aggregate besides its result at close (which every trigger
/// keeps, with the corrections after it): set with `.trigger(..)` on any window kind, read
/// in [`WindowUpdate::triggered`](super::WindowUpdate::triggered).
///
/// - [`at_close`](Self::at_close) (the default): never; results come at close only.
/// - [`every_update`](Self::every_update): every window a record updates, with its new
///   aggregate — open windows, and closed ones within their retention (corrections).
/// - [`threshold`](Self::threshold): a window is reported once, by the first update after
///   which `predicate(&aggregate)` holds, whether the window is open or (a correction)
///   closed. Whether it has fired is part of the window's stored state, so it commits with
///   the output that reported it: a replay after an abort, or a restore after a crash,
///   neither reports it twice nor loses it.
///
/// Which windows a record updates, in which order, is in the
/// [order of updates](crate::operators#order-of-updates).
pub struct Trigger<A>(Fire<A>);

enum Fire<A> {
    AtClose,
    EveryUpdate,
    Threshold(Arc<dyn Fn(&A) -> bool + Send + Sync>),
}

impl<A> Trigger<A> {
    /// Results at close only (and corrections after it): `triggered` stays empty.
    pub fn at_close() -> Self {
        Trigger(Fire::AtClose)
    }

    /// Every window a record updates, open or closed (a closed one also comes in `closed`
    /// as a correction).
    pub fn every_update() -> Self {
        Trigger(Fire::EveryUpdate)
    }

    /// Once per window: at the first update after which `predicate(&aggregate)` holds (an
    /// alert at the 6th payment: `Trigger::threshold(|n: &u64| *n >= 6)`). Later updates do
    /// not report the window again, even if the predicate stops and starts holding; a
    /// session merged from several keeps the flag if any of them had fired.
    pub fn threshold(predicate: impl Fn(&A) -> bool + Send + Sync + 'static) -> Self {
        Trigger(Fire::Threshold(Arc::new(predicate)))
    }

    /// Whether a window just updated to `value` is reported; `fired` is its stored flag,
    /// set when a threshold fires.
    pub(super) fn fires(&self, value: &A, fired: &mut bool) -> bool {
        match &self.0 {
            Fire::AtClose => false,
            Fire::EveryUpdate => true,
            Fire::Threshold(predicate) => {
                let fire = !*fired && predicate(value);
                *fired |= fire;
                fire
            }
        }
    }
}

impl<A> Default for Trigger<A> {
    fn default() -> Self {
        Trigger::at_close()
    }
}

impl<A> Clone for Trigger<A> {
    fn clone(&self) -> Self {
        Trigger(match &self.0 {
            Fire::AtClose => Fire::AtClose,
            Fire::EveryUpdate => Fire::EveryUpdate,
            Fire::Threshold(p) => Fire::Threshold(Arc::clone(p)),
        })
    }
}

impl<A> fmt::Debug for Trigger<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Fire::AtClose => "Trigger::at_close()",
            Fire::EveryUpdate => "Trigger::every_update()",
            Fire::Threshold(_) => "Trigger::threshold(..)",
        })
    }
}
