//! Hopping, session and sliding windows with corrections against a real broker, stopped and
//! restarted mid-run and with injected aborts: the latest revision of every window on the
//! output (read as a compacted topic would keep it) equals a batch computation over all
//! input records, each revision committed once; and a threshold trigger on the hopping and
//! sliding windows alerts exactly once for each window whose batch total reaches it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_eos::operators::{HoppingWindows, SessionWindows, SlidingWindows, Trigger, WindowUpdate};
use kafka_eos::{Guarantee, OutputRecord, PipelineBuilder, Summary};
use kafka_eos_testkit::admin;
use kafka_eos_testkit::verify::{read_to_end, VerifyConfig};
use rdkafka::Message;

use crate::common::{bootstrap, replaying, spawn, unique, FailOnce};

const PARTITIONS: i32 = 3;
const USERS: u64 = 12;
const EVENTS: u64 = 8_000;
const T0: i64 = 1_700_000_000_000;
const HOP_SIZE_MS: i64 = 10_000;
const HOP_ADVANCE_MS: i64 = 5_000;
const GAP_MS: i64 = 1_500;
const SLIDE_MS: i64 = 2_000;
/// The totals at which a hopping or a sliding window alerts (about a third of the hopping
/// windows, an eighth of the sliding ones reach them; amounts only add, so a window alerts
/// exactly when its final total is at least that).
const HOP_ALERT: u64 = 3_000;
const SLIDE_ALERT: u64 = 1_000;
/// Longer than any record is late, so every late record becomes a correction.
const RETENTION: Duration = Duration::from_secs(60);

/// One input event: user, event time, amount.
type Event = (u64, i64, u64);

/// Users are active 4 s out of every 6 s, each in its own phase, so a user's sessions are
/// separated by 2 s pauses (more than the gap); 8 % of events come 1 to 15 s late, which
/// corrects closed hopping windows and sessions and bridges a pause now and then.
fn events() -> Vec<Event> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut out = Vec::new();
    for i in 0..EVENTS as i64 {
        let now = T0 + i * 15;
        let active: Vec<u64> = (0..USERS).filter(|u| ((now - T0) / 2_000 + *u as i64) % 3 != 2).collect();
        let user = active[next(active.len() as u64) as usize];
        let late = if next(100) < 8 { 1_000 + next(14_000) as i64 } else { 0 };
        out.push((user, now - late, 1 + next(100)));
    }
    out
}

/// What the output must hold: every hopping window, session and sliding window, by
/// kind/user/start.
fn batch(events: &[Event]) -> BTreeMap<String, u64> {
    let mut want = BTreeMap::new();
    let mut by_user: BTreeMap<u64, Vec<(i64, u64)>> = BTreeMap::new();
    for &(user, t, amount) in events {
        let latest = t.div_euclid(HOP_ADVANCE_MS) * HOP_ADVANCE_MS;
        for k in 0..HOP_SIZE_MS / HOP_ADVANCE_MS {
            *want.entry(format!("h/{user}/{}", latest - k * HOP_ADVANCE_MS)).or_default() += amount;
        }
        by_user.entry(user).or_default().push((t, amount));
    }
    for (user, mut times) in by_user {
        times.sort();
        // The sliding window (t - size, t] of every distinct time t.
        for &(t, _) in &times {
            let sum = times.iter().filter(|(u, _)| t - SLIDE_MS < *u && *u <= t).map(|(_, a)| a).sum();
            want.insert(format!("l/{user}/{}", t - SLIDE_MS + 1), sum);
        }
        let (mut start, mut last, mut sum) = (times[0].0, times[0].0, 0);
        for (t, amount) in times {
            if t - last > GAP_MS {
                want.insert(format!("s/{user}/{start}"), sum);
                (start, sum) = (t, 0);
            }
            (last, sum) = (t, sum + amount);
        }
        want.insert(format!("s/{user}/{start}"), sum);
    }
    want
}

struct Windowed {
    bootstrap: String,
    input: String,
    output: String,
    alerts: String,
    late: String,
    app: String,
    /// Records that failed once already (an injected abort each).
    failed: FailOnce,
}

impl Windowed {
    fn pipeline(&self) -> PipelineBuilder {
        let mut b = replaying(&self.bootstrap, &self.app, &self.input, Guarantee::ExactlyOncePerPartition, 300);
        let (size, advance) = (Duration::from_millis(HOP_SIZE_MS as u64), Duration::from_millis(HOP_ADVANCE_MS as u64));
        let hop =
            HoppingWindows::<u64, u64>::new(&mut b, "hop", size, advance, &self.late).unwrap().retention(RETENTION);
        let hop = hop.trigger(Trigger::threshold(|total: &u64| *total >= HOP_ALERT));
        let gap = Duration::from_millis(GAP_MS as u64);
        let sessions = SessionWindows::<u64, u64>::new(&mut b, "sessions", gap, &self.late, |a, b| *a += b)
            .unwrap()
            .retention(RETENTION);
        let slide = Duration::from_millis(SLIDE_MS as u64);
        let sliding = SlidingWindows::<u64, u64>::new(&mut b, "sliding", slide, &self.late, |a, b| *a += b)
            .unwrap()
            .retention(RETENTION)
            .trigger(Trigger::threshold(|total: &u64| *total >= SLIDE_ALERT));
        let (out, alerts) = (b.output_topic(&self.output), b.output_topic(&self.alerts));
        let failed = self.failed.clone();
        b.processor(move |ctx, rec| {
            failed.check(rec, rec.offset % 1_000 == 300)?;
            let text = String::from_utf8(rec.value.clone().unwrap_or_default())?;
            let fields: Vec<i64> = text.split(' ').map(str::parse).collect::<Result<_, _>>()?;
            let updates = match fields[..] {
                [t] => [hop.advance(ctx, t)?, sessions.advance(ctx, t)?, sliding.advance(ctx, t)?]
                    .map(|closed| WindowUpdate { closed, ..Default::default() }),
                [user, t, amount] => {
                    let (user, amount) = (user as u64, amount as u64);
                    [
                        hop.add(ctx, rec, &user, t, |a| *a += amount)?,
                        sessions.add(ctx, rec, &user, t, |a| *a += amount)?,
                        sliding.add(ctx, rec, &user, t, |a| *a += amount)?,
                    ]
                }
                _ => return Err(format!("bad record {text:?}").into()),
            };
            for (kind, update) in ["h", "s", "l"].into_iter().zip(updates) {
                for w in update.triggered {
                    let key = format!("{kind}/{}/{}", w.key, w.start_ms);
                    ctx.emit(OutputRecord::to(&alerts).key(key).value(w.value.to_string()));
                }
                if let Some(late) = update.late {
                    ctx.emit(late);
                }
                for w in update.closed {
                    let key = format!("{kind}/{}/{}", w.key, w.start_ms);
                    ctx.emit(OutputRecord::to(&out).key(key).value(format!("{} {}", w.revision, w.value)));
                }
                for r in update.retracted {
                    ctx.emit(OutputRecord::to(&out).key(format!("{kind}/{}/{}", r.key, r.start_ms)));
                }
            }
            Ok(())
        })
    }

    async fn produce(&self, records: Vec<(Option<i32>, Vec<u8>, Vec<u8>)>) {
        let (b, t) = (self.bootstrap.clone(), self.input.clone());
        tokio::task::spawn_blocking(move || admin::produce(&b, &t, records)).await.unwrap().expect("produce");
    }

    /// Every record of `topic` in offset order per partition: (key, value).
    async fn read(&self, topic: &str) -> Vec<(String, Option<String>)> {
        let cfg = VerifyConfig::new(&self.bootstrap, &self.input, topic);
        let topic = topic.to_string();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            read_to_end(&cfg, &topic, Instant::now() + Duration::from_secs(60), |m| {
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
                out.push((text(m.key()).unwrap_or_default(), text(m.payload())));
            })
            .map(|()| out)
        })
        .await
        .unwrap()
        .expect("read")
    }
}

/// What a reader of the compacted output holds at the end (latest record per key, a
/// tombstone deleting it), after checking that every key's revisions only go up — a
/// revision committed twice (a replay leaking) or out of order would break that.
fn latest(records: &[(String, Option<String>)]) -> (BTreeMap<String, u64>, usize, usize) {
    let (mut table, mut revisions) = (BTreeMap::new(), BTreeMap::<&str, u32>::new());
    let (mut corrections, mut tombstones) = (0, 0);
    for (key, value) in records {
        let Some(value) = value else {
            tombstones += 1;
            table.remove(key);
            revisions.remove(key.as_str());
            continue;
        };
        let (rev, total) = value.split_once(' ').expect("revision total");
        let (rev, total): (u32, u64) = (rev.parse().unwrap(), total.parse().unwrap());
        if let Some(prev) = revisions.insert(key, rev) {
            assert_eq!(rev, prev + 1, "{key}: revision {rev} after {prev}");
        } else {
            assert_eq!(rev, 0, "{key}: first revision");
        }
        corrections += usize::from(rev > 0);
        table.insert(key.clone(), total);
    }
    (table, corrections, tombstones)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hopping_session_and_sliding_totals_with_corrections_match_the_batch_across_restarts_and_aborts() {
    let name = unique("win");
    let w = Windowed {
        bootstrap: bootstrap(),
        input: format!("{name}-in"),
        output: format!("{name}-out"),
        alerts: format!("{name}-alerts"),
        late: format!("{name}-late"),
        app: name,
        failed: FailOnce::default(),
    };
    let (b, topics) = (w.bootstrap.clone(), [w.input.clone(), w.output.clone(), w.alerts.clone(), w.late.clone()]);
    tokio::task::spawn_blocking(move || topics.iter().try_for_each(|t| admin::create_topic(&b, t, PARTITIONS, 1)))
        .await
        .unwrap()
        .expect("topics");
    let events = events();
    let records: Vec<_> = events
        .iter()
        .map(|(user, t, amount)| (None, user.to_string().into_bytes(), format!("{user} {t} {amount}").into_bytes()))
        .collect();
    let mut summaries: Vec<Summary> = Vec::new();
    for part in records.chunks(records.len() / 4) {
        let run = spawn(w.pipeline());
        w.produce(part.to_vec()).await;
        run.wait_records_in(part.len() as u64 / 3, Duration::from_secs(60)).await;
        summaries.push(run.stop().await);
    }
    // The end: a watermark tick on every partition closes what is still open.
    let end = events.iter().map(|e| e.1).max().unwrap() + 120_000;
    let ticks = (0..PARTITIONS).map(|p| (Some(p), b"tick".to_vec(), end.to_string().into_bytes())).collect();
    let last = spawn(w.pipeline());
    w.produce(ticks).await;
    let (b, g, t) = (w.bootstrap.clone(), w.app.clone(), vec![w.input.clone()]);
    tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &g, &t, Duration::from_secs(120)))
        .await
        .unwrap()
        .expect("caught up");
    summaries.push(last.stop().await);

    let (table, corrections, tombstones) = latest(&w.read(&w.output).await);
    let want = batch(&events);
    let sum = |f: fn(&Summary) -> u64| summaries.iter().map(f).sum::<u64>();
    println!(
        "{} windows (hopping, session, sliding), {corrections} corrections, {tombstones} retracted sessions; counted: {} \
         corrections, {} aborts, {} restored records",
        want.len(),
        sum(|s| s.window_corrections),
        sum(|s| s.transactions_aborted),
        sum(|s| s.restored_records),
    );
    let wrong: Vec<_> = want.iter().filter(|(k, v)| table.get(*k) != Some(v)).take(10).collect();
    let extra: Vec<_> = table.keys().filter(|k| !want.contains_key(*k)).take(10).collect();
    assert!(wrong.is_empty() && extra.is_empty(), "wrong or missing {wrong:?}, extra {extra:?}");
    assert_eq!(table.len(), want.len());
    assert!(w.read(&w.late).await.is_empty(), "every late record was within the retention");
    assert_eq!(sum(|s| s.late_records), 0);
    assert!(corrections > 100 && tombstones > 0, "the data must exercise corrections and merges");
    // Every tombstone is a counted retraction (unless a producer was given up with its
    // commit in doubt, which drops that batch's counts).
    if sum(|s| s.producers_fenced) == 0 {
        assert!(sum(|s| s.window_corrections) > tombstones as u64, "{summaries:?}");
    }
    assert!(sum(|s| s.transactions_aborted) >= 5, "injected failures abort");
    assert!(sum(|s| s.restored_records) > 0, "restarts restore the windows");

    // Alerts: once per window whose total reaches the threshold, at a total between the
    // threshold and the window's final one, through the restarts and the aborts.
    let mut alerted: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, value) in w.read(&w.alerts).await {
        alerted.entry(key).or_default().push(value.expect("an alert").parse().unwrap());
    }
    let threshold = |key: &str| if key.starts_with("h/") { HOP_ALERT } else { SLIDE_ALERT };
    let due: Vec<_> = want.iter().filter(|(k, v)| !k.starts_with("s/") && **v >= threshold(k)).collect();
    let twice: Vec<_> = alerted.iter().filter(|(_, v)| v.len() != 1).take(10).collect();
    assert!(twice.is_empty(), "alerted more than once: {twice:?}");
    let wrong: Vec<_> = alerted
        .iter()
        .filter(|(k, v)| !(threshold(k)..=want.get(*k).copied().unwrap_or(0)).contains(&v[0]))
        .take(10)
        .collect();
    assert!(wrong.is_empty(), "alerted at a total below the threshold or above the final one: {wrong:?}");
    let missed: Vec<_> = due.iter().filter(|(k, _)| !alerted.contains_key(*k)).take(10).collect();
    assert!(
        missed.is_empty() && alerted.len() == due.len(),
        "missed {missed:?}; {} alerts, {} due",
        alerted.len(),
        due.len()
    );
    println!(
        "{} alerts ({} hopping), each once",
        alerted.len(),
        alerted.keys().filter(|k| k.starts_with("h/")).count()
    );
}
