//! Triggers on every window kind: every update, threshold (first record, never, then the
//! close, corrections), the order of a record's updates, session merges, the stored flag.

use std::time::Duration;

use super::tests::{rec, results, run};
use super::*;
use crate::{Context, PipelineBuilder};

type Update = WindowUpdate<String, u64>;

/// (key, start, end, value, closed) of each triggered window.
fn fired(u: &Update) -> Vec<(&str, i64, i64, u64, bool)> {
    u.triggered.iter().map(|w| (w.key.as_str(), w.start_ms, w.end_ms, w.value, w.closed)).collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at_least(n: u64) -> Trigger<u64> {
    Trigger::threshold(move |count: &u64| *count >= n)
}

fn tumbling(b: &mut PipelineBuilder, trigger: Trigger<u64>) -> TumblingWindows<String, u64> {
    TumblingWindows::new(b, "w", ms(10), "late").retention(ms(20)).trigger(trigger)
}

fn hopping(b: &mut PipelineBuilder, trigger: Trigger<u64>) -> HoppingWindows<String, u64> {
    HoppingWindows::new(b, "w", ms(10), ms(5), "late").unwrap().retention(ms(20)).trigger(trigger)
}

fn sessions(b: &mut PipelineBuilder, trigger: Trigger<u64>) -> SessionWindows<String, u64> {
    SessionWindows::new(b, "w", ms(10), "late", |a, b| *a += b).unwrap().retention(ms(100)).trigger(trigger)
}

fn sliding(b: &mut PipelineBuilder, trigger: Trigger<u64>) -> SlidingWindows<String, u64> {
    SlidingWindows::new(b, "w", ms(10), "late", |a, b| *a += b).unwrap().retention(ms(20)).trigger(trigger)
}

/// The stored value of `key` in a window store.
fn stored(ctx: &mut Context<'_>, store: &crate::state::Store<Key<String>, Val<u64>>, key: Key<String>) -> Val<u64> {
    ctx.store(store).get(&key).unwrap().expect("stored")
}

#[test]
fn tumbling_every_update_reports_each_fold_and_corrections_too() {
    let mut b = crate::Pipeline::builder();
    let w = tumbling(&mut b, Trigger::every_update());
    run(&b, |mut ctx| {
        let add = |ctx: &mut Context<'_>, k: &str, t: i64| w.add(ctx, &rec(t), &k.to_string(), t, |n| *n += 1).unwrap();
        assert_eq!(fired(&add(&mut ctx, "a", 1)), [("a", 0, 10, 1, false)]);
        assert_eq!(fired(&add(&mut ctx, "a", 3)), [("a", 0, 10, 2, false)]);
        assert_eq!(fired(&add(&mut ctx, "b", 4)), [("b", 0, 10, 1, false)]);
        // The update comes from the fold, the closes from the advance after it.
        let u = add(&mut ctx, "a", 12);
        assert_eq!(fired(&u), [("a", 10, 20, 1, false)]);
        assert_eq!(results(&u.closed), [("a", 0, 2, 0), ("b", 0, 1, 0)]);
        // A correction is an update too: in both lists.
        let u = add(&mut ctx, "a", 5);
        assert_eq!(fired(&u), [("a", 0, 10, 3, true)]);
        assert_eq!(results(&u.closed), [("a", 0, 3, 1)]);
        assert!(w.advance(&mut ctx, 30).unwrap().len() == 1, "advance closes, never triggers");
    });
}

#[test]
fn tumbling_at_close_is_the_default_and_triggers_nothing() {
    let mut b = crate::Pipeline::builder();
    let w = TumblingWindows::<String, u64>::new(&mut b, "w", ms(10), "late").retention(ms(20));
    run(&b, |mut ctx| {
        for t in [1, 2, 12, 5] {
            assert!(w.add(&mut ctx, &rec(t), &"a".to_string(), t, |n| *n += 1).unwrap().triggered.is_empty());
        }
    });
}

#[test]
fn tumbling_threshold_fires_once_at_the_first_update_it_holds() {
    let mut b = crate::Pipeline::builder();
    let w = tumbling(&mut b, at_least(2));
    run(&b, |mut ctx| {
        let add = |ctx: &mut Context<'_>, k: &str, t: i64| w.add(ctx, &rec(t), &k.to_string(), t, |n| *n += 1).unwrap();
        assert!(fired(&add(&mut ctx, "a", 1)).is_empty());
        assert_eq!(fired(&add(&mut ctx, "a", 2)), [("a", 0, 10, 2, false)]);
        assert!(matches!(stored(&mut ctx, &w.policy.store, Key::Window(0, "a".into())), Val::FiredAgg(2)));
        assert!(fired(&add(&mut ctx, "a", 3)).is_empty(), "once per window");
        assert!(fired(&add(&mut ctx, "b", 4)).is_empty());
        // The close reports the result as without a trigger, and keeps the flag.
        let u = add(&mut ctx, "c", 10);
        assert!(fired(&u).is_empty());
        assert_eq!(results(&u.closed), [("a", 0, 3, 0), ("b", 0, 1, 0)]);
        let a = stored(&mut ctx, &w.policy.store, Key::Window(0, "a".into()));
        assert!(matches!(a, Val::FiredClosed { revision: 0, value: 3 }));
        let b0 = stored(&mut ctx, &w.policy.store, Key::Window(0, "b".into()));
        assert!(matches!(b0, Val::Closed { revision: 0, value: 1 }), "not fired: stored as before triggers");
        // Corrections: a has fired, so only its correction; b's first holds in a correction.
        let u = add(&mut ctx, "a", 5);
        assert!(fired(&u).is_empty());
        assert_eq!(results(&u.closed), [("a", 0, 4, 1)]);
        let u = add(&mut ctx, "b", 6);
        assert_eq!(fired(&u), [("b", 0, 10, 2, true)]);
        assert_eq!(results(&u.closed), [("b", 0, 2, 1)]);
        assert!(fired(&add(&mut ctx, "b", 7)).is_empty());
    });
}

#[test]
fn tumbling_threshold_true_on_the_first_record_or_never() {
    let mut b = crate::Pipeline::builder();
    let first = tumbling(&mut b, at_least(1));
    let never = TumblingWindows::<String, u64>::new(&mut b, "never", ms(10), "late").trigger(at_least(100));
    run(&b, |mut ctx| {
        let k = "a".to_string();
        assert_eq!(fired(&first.add(&mut ctx, &rec(1), &k, 1, |n| *n += 1).unwrap()), [("a", 0, 10, 1, false)]);
        assert!(fired(&first.add(&mut ctx, &rec(2), &k, 2, |n| *n += 1).unwrap()).is_empty());
        let mut closed = Vec::new();
        for t in [1, 2, 3, 11] {
            let u = never.add(&mut ctx, &rec(t), &k, t, |n| *n += 1).unwrap();
            assert!(u.triggered.is_empty());
            closed.extend(u.closed);
        }
        assert_eq!(results(&closed), [("a", 0, 3, 0)], "the result at close as ever");
    });
}

#[test]
fn hopping_updates_come_by_window_start_and_each_window_fires_once() {
    let mut b = crate::Pipeline::builder();
    let every = hopping(&mut b, Trigger::every_update());
    let w = HoppingWindows::<String, u64>::new(&mut b, "t", ms(10), ms(5), "late").unwrap().trigger(at_least(2));
    run(&b, |mut ctx| {
        let k = "a".to_string();
        // The fold is told each window, earliest start first; the updates come in that order.
        let mut seen = Vec::new();
        let u = every
            .add_with_window(&mut ctx, &rec(7), &k, 7, |w, n| {
                seen.push((w.start_ms, w.end_ms));
                *n += 1
            })
            .unwrap();
        assert_eq!(seen, [(0, 10), (5, 15)]);
        assert_eq!(fired(&u), [("a", 0, 10, 1, false), ("a", 5, 15, 1, false)]);
        let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &k, t, |n| *n += 1).unwrap();
        assert!(fired(&add(&mut ctx, 3)).is_empty()); // [-5,5): 1, [0,10): 1
        assert_eq!(fired(&add(&mut ctx, 4)), [("a", -5, 5, 2, false), ("a", 0, 10, 2, false)]);
        // 7: [0,10) has fired; [5,15) holds 1. 8: [5,15) reaches 2.
        let u = add(&mut ctx, 7);
        assert!(fired(&u).is_empty());
        assert_eq!(results(&u.closed), [("a", -5, 2, 0)], "the watermark 7 closes [-5,5) after the folds");
        assert_eq!(fired(&add(&mut ctx, 8)), [("a", 5, 15, 2, false)]);
    });
}

#[test]
fn session_updates_report_the_merged_session_and_a_merge_never_fires_twice() {
    let mut b = crate::Pipeline::builder();
    let every = sessions(&mut b, Trigger::every_update());
    run(&b, |mut ctx| {
        let k = "a".to_string();
        let mut add = |t: i64| {
            let mut told = None;
            let u = every.add_with_window(&mut ctx, &rec(t), &k, t, |w, n| {
                told = Some((w.start_ms, w.end_ms));
                *n += 1
            });
            (told, u.unwrap())
        };
        assert_eq!(fired(&add(0).1), [("a", 0, 1, 1, false)]);
        let (told, u) = add(15); // a new session; watermark 15 closes [0,0]
        assert_eq!((told, fired(&u)), (Some((15, 16)), vec![("a", 15, 16, 1, false)]));
        // 8 bridges [0,0] (closed) and [15,15]: the fold is told the merged session, which
        // is reported once, open again (it closes at 25).
        let (told, u) = add(8);
        assert_eq!((told, fired(&u)), (Some((0, 16)), vec![("a", 0, 16, 3, false)]));
    });

    let mut b = crate::Pipeline::builder();
    let w = sessions(&mut b, at_least(2));
    run(&b, |mut ctx| {
        let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"a".to_string(), t, |n| *n += 1).unwrap();
        assert!(fired(&add(&mut ctx, 0)).is_empty());
        assert_eq!(fired(&add(&mut ctx, 1)), [("a", 0, 2, 2, false)]);
        assert_eq!(results(&add(&mut ctx, 20).closed), [("a", 0, 2, 0)]); // [20,20]: 1
                                                                          // 10 bridges [0,1] (fired) and [20,20]: the merged session has fired already.
        let u = add(&mut ctx, 10);
        assert!(fired(&u).is_empty());
        assert!(u.closed.is_empty() && u.retracted.is_empty(), "reopened (closes at 30); 20 was never emitted");
        assert!(fired(&add(&mut ctx, 21)).is_empty());
        let closed = w.advance(&mut ctx, 40).unwrap();
        assert_eq!(results(&closed), [("a", 0, 5, 1)]);
    });

    let mut b = crate::Pipeline::builder();
    let w = sessions(&mut b, at_least(3));
    run(&b, |mut ctx| {
        let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"a".to_string(), t, |n| *n += 1).unwrap();
        add(&mut ctx, 0);
        add(&mut ctx, 18); // watermark 18 closes [0,0]
        assert_eq!(results(&add(&mut ctx, 40).closed), [("a", 18, 1, 0)]);
        // Neither part has fired: the merged session fires, as a correction (closed at 28),
        // under the start it keeps; the later start is retracted.
        let u = add(&mut ctx, 9);
        assert_eq!(fired(&u), [("a", 0, 19, 3, true)]);
        assert_eq!(results(&u.closed), [("a", 0, 3, 1)]);
        assert_eq!(u.retracted.iter().map(|r| r.start_ms).collect::<Vec<_>>(), [18]);
        // Extended backwards: a new start, the flag kept.
        let u = add(&mut ctx, -5);
        assert!(fired(&u).is_empty());
        assert_eq!(results(&u.closed), [("a", -5, 4, 0)]);
    });
}

#[test]
fn session_threshold_true_on_the_first_record_or_never() {
    let mut b = crate::Pipeline::builder();
    let first =
        SessionWindows::<String, u64>::new(&mut b, "w", ms(10), "late", |a, b| *a += b).unwrap().trigger(at_least(1));
    let never =
        SessionWindows::<String, u64>::new(&mut b, "n", ms(10), "late", |a, b| *a += b).unwrap().trigger(at_least(100));
    run(&b, |mut ctx| {
        let k = "a".to_string();
        for (t, want) in [(0, vec![("a", 0, 1, 1, false)]), (5, vec![]), (30, vec![("a", 30, 31, 1, false)])] {
            assert_eq!(fired(&first.add(&mut ctx, &rec(t), &k, t, |n| *n += 1).unwrap()), want);
        }
        let mut closed = Vec::new();
        for t in [0, 5, 30] {
            let u = never.add(&mut ctx, &rec(t), &k, t, |n| *n += 1).unwrap();
            assert!(u.triggered.is_empty());
            closed.extend(u.closed);
        }
        assert_eq!(results(&closed), [("a", 0, 2, 0)]);
    });
}

#[test]
fn sliding_updates_come_by_window_end_and_a_late_record_fires_its_new_window() {
    let mut b = crate::Pipeline::builder();
    let every = sliding(&mut b, Trigger::every_update());
    run(&b, |mut ctx| {
        let add = |ctx: &mut Context<'_>, t: i64| every.add(ctx, &rec(t), &"k".to_string(), t, |n| *n += 1).unwrap();
        assert_eq!(fired(&add(&mut ctx, 0)), [("k", -9, 1, 1, false)]);
        assert_eq!(fired(&add(&mut ctx, 5)), [("k", -4, 6, 2, false)]);
        // 3 is late (watermark 5): its own window (-7,3] is new and closed, then (-5,5].
        let u = add(&mut ctx, 3);
        assert_eq!(fired(&u), [("k", -6, 4, 2, true), ("k", -4, 6, 3, false)]);
        assert_eq!(results(&u.closed), [("k", -6, 2, 0)]);
    });
}

#[test]
fn sliding_threshold_fires_once_per_window_including_a_late_records_own() {
    let mut b = crate::Pipeline::builder();
    let w = sliding(&mut b, at_least(2));
    run(&b, |mut ctx| {
        let add = |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"k".to_string(), t, |n| *n += 1).unwrap();
        assert!(fired(&add(&mut ctx, 0)).is_empty());
        assert_eq!(fired(&add(&mut ctx, 5)), [("k", -4, 6, 2, false)]);
        assert!(fired(&add(&mut ctx, 20)).is_empty(), "(10,20] holds one record");
        assert_eq!(fired(&add(&mut ctx, 21)), [("k", 12, 22, 2, false)]);
        // Late 4 (watermark 21): its new window (-6,4] holds 0 and 4 and fires, closed; the
        // window ending at 5 has fired already and is only corrected.
        let u = add(&mut ctx, 4);
        assert_eq!(fired(&u), [("k", -5, 5, 2, true)]);
        assert_eq!(results(&u.closed), [("k", -5, 2, 0), ("k", -4, 3, 1)]);
        let closed = w.advance(&mut ctx, 60).unwrap();
        assert_eq!(results(&closed), [("k", 11, 1, 0), ("k", 12, 2, 0)], "results at close as ever");
    });
}

#[test]
fn stored_flags_round_trip_and_values_without_them_are_unchanged() {
    use crate::state::format::encode_value;
    // A fired flag is only written where one has fired: values are as before otherwise.
    let plain = Session { start: 0, last: 1, value: 2u64, revision: None, closed: false, fired: false };
    let fired_one = Session { fired: true, ..plain.clone() };
    let value = <Session<u64> as list::Listed<u64>>::value_of(vec![plain.clone()]);
    let before = Val::Sessions(vec![plain.clone()]);
    assert_eq!(encode_value(1, &value).unwrap(), encode_value(1, &before).unwrap());
    let value = <Session<u64> as list::Listed<u64>>::value_of(vec![plain, fired_one]);
    let back = <Session<u64> as list::Listed<u64>>::list(value).unwrap();
    assert_eq!(back.iter().map(|s| s.fired).collect::<Vec<_>>(), [false, true]);
}

type Adder<'w> = Box<dyn Fn(&mut Context<'_>, i64) -> Update + 'w>;

/// An `add` of one record of key "a" at time `t`, counting.
macro_rules! adder {
    ($w:expr) => {{
        let w = $w;
        Box::new(move |ctx: &mut Context<'_>, t: i64| w.add(ctx, &rec(t), &"a".to_string(), t, |n| *n += 1).unwrap())
            as Adder<'static>
    }};
}

/// Each kind under `trigger`, with store names suffixed by `tag`.
fn every_kind(
    b: &mut PipelineBuilder,
    tag: &str,
    trigger: impl Fn() -> Trigger<u64>,
) -> Vec<(&'static str, Adder<'static>)> {
    let merge = |a: &mut u64, b: u64| *a += b;
    let r = ms(20);
    vec![
        (
            "tumbling",
            adder!(TumblingWindows::new(b, format!("t{tag}"), ms(10), "late").retention(r).trigger(trigger())),
        ),
        (
            "hopping",
            adder!(HoppingWindows::new(b, format!("h{tag}"), ms(10), ms(5), "late")
                .unwrap()
                .retention(r)
                .trigger(trigger())),
        ),
        (
            "session",
            adder!(SessionWindows::new(b, format!("s{tag}"), ms(5), "late", merge)
                .unwrap()
                .retention(r)
                .trigger(trigger())),
        ),
        (
            "sliding",
            adder!(SlidingWindows::new(b, format!("l{tag}"), ms(10), "late", merge)
                .unwrap()
                .retention(r)
                .trigger(trigger())),
        ),
    ]
}

#[test]
fn on_every_kind_at_close_reports_nothing_and_a_threshold_fires_from_the_first_record_or_never() {
    let mut b = crate::Pipeline::builder();
    let default = every_kind(&mut b, "-default", Trigger::default);
    let first = every_kind(&mut b, "-first", || at_least(1));
    let never = every_kind(&mut b, "-never", || at_least(100));
    run(&b, |mut ctx| {
        for ((kind, default), ((_, first), (_, never))) in default.iter().zip(first.iter().zip(&never)) {
            let mut seen = std::collections::BTreeMap::new();
            for (i, t) in [0, 3, 12, 4, 30, 2].into_iter().enumerate() {
                let (d, f, n) = (default(&mut ctx, t), first(&mut ctx, t), never(&mut ctx, t));
                assert!(d.triggered.is_empty() && n.triggered.is_empty(), "{kind} at {t}");
                assert_eq!(results(&d.closed), results(&n.closed), "{kind}: results as without a trigger");
                assert_eq!(results(&d.closed), results(&f.closed), "{kind}: results as without a trigger");
                assert!(i > 0 || !f.triggered.is_empty(), "{kind}: the first record fires");
                for w in &f.triggered {
                    assert_eq!(seen.insert(w.start_ms, w.value), None, "{kind}: {} fired twice", w.start_ms);
                }
            }
        }
    });
}
