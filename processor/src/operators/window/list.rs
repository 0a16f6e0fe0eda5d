//! What session and sliding windows share: a key's windows kept as one list in one store
//! entry (their windows are cut by the data, so a record must see its key's neighbours).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Clock, ClosedWindow, Key, Policy, Val, Window, WindowUpdate};
use crate::record::InputRecord;
use crate::state::{StateError, StoreMut};
use crate::Context;

/// Combines two aggregates (sessions: the earlier absorbs the later).
pub(super) type Merge<A> = Arc<dyn Fn(&mut A, A) + Send + Sync>;

type Parts<K, A> = (Policy<K, A>, i64, Merge<A>);

/// The parts of a list kind's constructor: its policy, its parameter (refused if zero,
/// `what` naming it) and its merge function; `role` names the kind in the topology
/// description.
pub(super) fn parts<K, A>(
    builder: &mut crate::PipelineBuilder,
    store: String,
    (late_topic, role): (&str, &'static str),
    (p, what): (std::time::Duration, &str),
    merge: impl Fn(&mut A, A) + Send + Sync + 'static,
) -> Result<Parts<K, A>, super::WindowError>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + 'static,
{
    match super::align::millis(p) {
        0 => Err(super::WindowError::Shape(format!("{what} must be at least 1 ms"))),
        p => {
            // Windows cut by the data close at any time, each key at its own: sweeping the
            // store for every close would cost a scan per record.
            let policy = Policy { sweep_every_ms: p / 4, ..Policy::new(builder, store, late_topic, role) };
            Ok((policy, p, Arc::new(merge)))
        }
    }
}

/// A window in a key's list; `p` is the operator's parameter (a session's gap, a sliding
/// window's size).
pub(super) trait Listed<A> {
    /// When it closes: the watermark at which no on-time record can change it any more.
    fn close(&self, p: i64) -> i64;
    /// When the entry may go, before the retention is added (its close, or later if other
    /// windows still need it).
    fn done(&self, p: i64) -> i64;
    /// (start, end) of its result.
    fn span(&self, p: i64) -> (i64, i64);
    /// Its aggregate, its last emitted revision, whether its current value has been
    /// emitted, and whether its threshold trigger has fired.
    fn state(&mut self) -> (&mut A, &mut Option<u32>, &mut bool, &mut bool);
    /// The store key of `key`'s list.
    fn entry<K>(key: K) -> Key<K>;
    /// The list in a store value of this kind.
    fn list(value: Val<A>) -> Option<Vec<Self>>
    where
        Self: Sized;
    /// The store value of a list.
    fn value_of(list: Vec<Self>) -> Val<A>
    where
        Self: Sized;
}

/// A record's visit to its key's list: unless `late_from + retention` has passed the
/// watermark (then the record is returned as late), `change` gets the list, the watermark,
/// the update to fill and the clock to schedule in; the list is written back and the
/// corrections counted. The caller then advances the watermark.
#[allow(clippy::too_many_arguments)]
pub(super) fn visit<K, A, W: Listed<A>>(
    policy: &Policy<K, A>,
    ctx: &mut Context<'_>,
    record: &InputRecord,
    key: &K,
    late_from: i64,
    change: impl FnOnce(&mut Vec<W>, i64, &mut WindowUpdate<K, A>, &mut Clock),
) -> Result<WindowUpdate<K, A>, StateError>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + 'static,
{
    let mut update = WindowUpdate::default();
    let mut store = ctx.store(&policy.store);
    let mut clock = Clock::load(&store)?;
    let watermark = policy.watermark(&clock);
    if policy.expired(late_from, watermark) {
        update.late = Some(policy.late(ctx, record, watermark));
        return Ok(update);
    }
    let k = W::entry(key.clone());
    let mut list = store.get(&k)?.and_then(W::list).unwrap_or_default();
    change(&mut list, watermark, &mut update, &mut clock);
    store.put(&k, &W::value_of(list))?;
    clock.save(&mut store)?;
    policy.corrected(ctx, update.closed.len() + update.retracted.len());
    Ok(update)
}

/// Moves the watermark, sweeping every key's list of kind `W` (see [`sweep`]).
pub(super) fn advance<K, A, W: Listed<A>>(
    policy: &Policy<K, A>,
    ctx: &mut Context<'_>,
    event_time_ms: i64,
    p: i64,
) -> Result<Vec<ClosedWindow<K, A>>, StateError>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Default + Clone + 'static,
{
    policy.advance(ctx, event_time_ms, |store, k, v, watermark, clock, closed| match W::list(v) {
        Some(list) => sweep(policy, store, k, list, p, watermark, clock, closed),
        None => Ok(()),
    })
}

/// Marks `w` closed and returns its result under the next revision; `take` moves the value
/// out (the entry is about to be deleted).
pub(super) fn emit<K: Clone, A: Default + Clone>(
    key: &K,
    w: &mut impl Listed<A>,
    p: i64,
    take: bool,
) -> ClosedWindow<K, A> {
    let (start_ms, end_ms) = w.span(p);
    let (value, revision, closed, _) = w.state();
    let value = if take { std::mem::take(value) } else { value.clone() };
    let next = revision.map_or(0, |r| r.saturating_add(1));
    (*revision, *closed) = (Some(next), true);
    ClosedWindow { key: key.clone(), start_ms, end_ms, value, revision: next }
}

/// Reports `w`, just updated, to the trigger; `closed`: the update is a correction.
pub(super) fn report<K, A>(
    policy: &Policy<K, A>,
    update: &mut WindowUpdate<K, A>,
    key: &K,
    w: &mut impl Listed<A>,
    p: i64,
    closed: bool,
) where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Clone + 'static,
{
    let (start_ms, end_ms) = w.span(p);
    let (value, _, _, fired) = w.state();
    policy.report(update, key, Window { start_ms, end_ms }, value, fired, closed);
}

/// Notes in `clock` when `w` (closed or not) next needs a sweep.
pub(super) fn schedule<K, A>(policy: &Policy<K, A>, clock: &mut Clock, w: &mut impl Listed<A>, p: i64) {
    if *w.state().2 {
        clock.next_expiry = clock.next_expiry.min(w.done(p).saturating_add(policy.retention_ms));
    } else {
        clock.next_close = clock.next_close.min(w.close(p));
    }
}

/// The sweep of one key's list: emits the windows the watermark closed, drops those past
/// their retention, and writes the list back (or deletes it, empty).
#[allow(clippy::too_many_arguments)]
fn sweep<K, A, W: Listed<A>>(
    policy: &Policy<K, A>,
    store: &mut StoreMut<'_, Key<K>, Val<A>>,
    key: Key<K>,
    mut list: Vec<W>,
    p: i64,
    watermark: i64,
    clock: &mut Clock,
    closed: &mut Vec<ClosedWindow<K, A>>,
) -> Result<(), StateError>
where
    K: Serialize + DeserializeOwned + Clone + 'static,
    A: Serialize + DeserializeOwned + Default + Clone + 'static,
{
    let (Key::Sessions(k) | Key::Slides(k)) = &key else { return Ok(()) };
    let mut changed = false;
    list.retain_mut(|w| {
        let gone = policy.expired(w.done(p), watermark);
        if !*w.state().2 && w.close(p) <= watermark {
            closed.push(emit(k, w, p, gone));
            changed = true;
        }
        if !gone {
            schedule(policy, clock, w, p);
        }
        changed |= gone;
        !gone
    });
    match (list.is_empty(), changed) {
        (true, _) => store.delete(&key),
        (false, true) => store.put(&key, &W::value_of(list)),
        (false, false) => Ok(()),
    }
}
