//! Window triggers through the driver: a threshold fires once per window in committed
//! output across aborts, crashes and restores.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_eos::operators::{HoppingWindows, SessionWindows, SlidingWindows, Trigger, WindowUpdate};
use kafka_eos::{OutputRecord, Pipeline, PipelineBuilder};

use super::*;

/// Hopping, session and sliding windows counting per key, each with a threshold at 2 and
/// corrections: emits every alert to `alerts` keyed kind/partition/key/start with the count
/// (state is per input partition), every result to `out`, a tombstone per retracted
/// session.
fn alerting(builder: PipelineBuilder) -> PipelineBuilder {
    let mut b = builder.input_topic("in");
    let s = Duration::from_secs;
    let second = || Trigger::threshold(|n: &u64| *n >= 2);
    let hop = HoppingWindows::<String, u64>::new(&mut b, "hop", s(10), s(5), "late")
        .unwrap()
        .retention(s(8))
        .trigger(second());
    let sessions = SessionWindows::<String, u64>::new(&mut b, "sessions", s(4), "late", |a, b| *a += b)
        .unwrap()
        .retention(s(8))
        .trigger(second());
    let sliding = SlidingWindows::<String, u64>::new(&mut b, "sliding", s(5), "late", |a, b| *a += b)
        .unwrap()
        .retention(s(8))
        .trigger(second());
    let (alerts, out) = (b.output_topic("alerts"), b.output_topic("out"));
    b.processor(move |ctx, rec| {
        let key = rec.key_as::<String>(&kafka_eos::codec::Raw)?;
        let t = rec.timestamp.unwrap_or(0);
        let h = hop.add(ctx, rec, &key, t, |n| *n += 1)?;
        let s = sessions.add(ctx, rec, &key, t, |n| *n += 1)?;
        let l = sliding.add(ctx, rec, &key, t, |n| *n += 1)?;
        for (kind, update) in [("h", h), ("s", s), ("l", l)] {
            let WindowUpdate { triggered, late, closed, retracted } = update;
            for w in triggered {
                let k = format!("{kind}/{}/{}/{}", rec.partition, w.key, w.start_ms);
                ctx.emit(OutputRecord::to(&alerts).key(k).value(w.value.to_string()));
            }
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

/// Every 5th record is 2 to 18 s late (corrections, bridged sessions, late records); a
/// key's records in one partition are 4.2 s apart.
fn inputs() -> Vec<TestInput> {
    (0..240i64)
        .map(|i| {
            let late = if i % 5 == 4 { 2_000 + (i * 733) % 16_000 } else { 0 };
            TestInput::new().partition((i % 2) as i32).key(format!("k{}", i % 3)).timestamp(i * 700 - late).value("v")
        })
        .collect()
}

#[test]
fn threshold_alerts_are_replay_safe_and_fire_once_per_window() {
    let report = check_replay_safe(|| alerting(Pipeline::builder()), &inputs(), 13).expect("replay-safe");
    assert!(report.aborts > 5 && report.crashes > 1, "{report:?}");
    let mut d = TestDriver::new(alerting(Pipeline::builder())).unwrap();
    d.pipe_all(inputs()).unwrap();
    d.commit().unwrap();
    let mut per_window: BTreeMap<String, usize> = BTreeMap::new();
    for r in d.output("alerts") {
        *per_window.entry(r.key_str().unwrap_or_default().to_string()).or_default() += 1;
        let count: u64 = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).parse().unwrap();
        assert!(count >= 2, "fired below the threshold: {count}");
    }
    assert!(per_window.values().all(|&n| n == 1), "{per_window:?}");
    for kind in ["h/", "s/", "l/"] {
        assert!(per_window.keys().any(|k| k.starts_with(kind)), "{kind} fired: {per_window:?}");
    }
}

/// The alert of `docs/state.md`: the 6th payment of a card within a 10-minute window
/// (advancing by 5 minutes) raises one alert per window.
fn card_alerts(builder: PipelineBuilder) -> PipelineBuilder {
    let mut b = builder.input_topic("payments");
    let minutes = |n: u64| Duration::from_secs(60 * n);
    let windows = HoppingWindows::<String, u64>::new(&mut b, "per-card", minutes(10), minutes(5), "late")
        .unwrap()
        .trigger(Trigger::threshold(|n: &u64| *n >= 6));
    let alerts = b.output_topic("alerts");
    b.processor(move |ctx, rec| {
        let card = rec.key_as::<String>(&kafka_eos::codec::Raw)?;
        let update = windows.add(ctx, rec, &card, rec.timestamp.unwrap_or(0), |n| *n += 1)?;
        for w in update.triggered {
            ctx.emit(OutputRecord::to(&alerts).key(format!("{}/{}", w.key, w.start_ms)).value(w.value.to_string()));
        }
        Ok(())
    })
}

#[test]
fn a_fired_threshold_does_not_fire_again_after_the_state_is_restored() {
    let payment = |t: i64| TestInput::new().key("card-1").timestamp(t).value("v");
    let mut d = TestDriver::new(card_alerts(Pipeline::builder())).unwrap();
    // Six payments in [-5, 5) min and [0, 10) min: both windows reach 6 with the 6th.
    d.pipe_all((0..6).map(|i| payment(i * 30_000))).unwrap();
    let alerts = |d: &TestDriver| {
        d.output("alerts").iter().map(|r| r.key_str().unwrap_or_default().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(alerts(&d), ["card-1/-300000", "card-1/0"]);
    d.crash_and_restore().unwrap();
    assert_eq!(d.stats().crashes, 1);
    // The flags came back with the windows: a 7th and 8th payment fire nothing...
    d.pipe_all([payment(180_000), payment(240_000)]).unwrap();
    assert_eq!(alerts(&d).len(), 2);
    // ...while [5, 15) min, which holds none of them, fires at its own 6th.
    d.pipe_all((0..6).map(|i| payment(300_000 + i * 10_000))).unwrap();
    assert_eq!(alerts(&d), ["card-1/-300000", "card-1/0", "card-1/300000"]);
}
