//! How long `read_committed` readers wait after an instance dies. Killed in the middle of a
//! transaction, an instance leaves that transaction open, and the open transaction holds
//! back the last stable offset of every output partition it wrote — outputs committed after
//! it by other instances included — until the transaction coordinator aborts it: when a
//! producer initialises the same transactional id (per partition: the partition's new
//! owner; per consumer: the instance restarted under the same instance id), or else once
//! the transaction timeout has passed (the coordinator's periodic scan for expired ones).
//!
//! # The run ([`run`])
//! `kafka-eos chaos instance` processes copy an input topic with each output sent to its
//! key's partition (`--by-key`), so that every transaction writes every output partition,
//! with its input's timestamp. A paced writer feeds `rate` records/s over every partition;
//! a `read_committed` reader of every output partition notes when each output first becomes
//! visible. Once every instance commits, and `steady` later, instance 0 is SIGKILLed: for
//! good, beside a second instance that takes its partitions over ([`Takeover::Survivor`]),
//! or as the only instance, started again at once with the same instance id
//! ([`Takeover::Restart`], a pod restarted by its orchestrator) or with a new one
//! ([`Takeover::RestartNewId`]). `after` later the writer stops, the group catches up and
//! stops, and the copy is verified (exactly once, or at least once).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kafka_eos_testkit::verify::{verify, Report, VerifyConfig};
use rdkafka::message::Message;

use super::input::{per_tick, Paced};
use super::study::{catch_up_and_stop, check_crashes, wall};
use super::Group;
use crate::chaos::fleet::Fleet;
use crate::chaos::InstanceConfig;

/// Who takes over the killed instance's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// Two instances; the other one, after the session timeout.
    Survivor,
    /// One instance, started again at once under the same instance id.
    Restart,
    /// One instance, started again at once under a new instance id (the runtime's default).
    RestartNewId,
}

impl Takeover {
    /// Every takeover, in the order the bench runs them.
    pub const ALL: [Takeover; 3] = [Takeover::Survivor, Takeover::Restart, Takeover::RestartNewId];

    /// Its name in the bench's table.
    pub fn as_str(&self) -> &'static str {
        match self {
            Takeover::Survivor => "second instance",
            Takeover::Restart => "restart, same id",
            Takeover::RestartNewId => "restart, new id",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct VisibilityOptions {
    /// The group; its `instances` is set by `takeover`.
    pub group: Group,
    /// Who takes the killed instance's partitions over.
    pub takeover: Takeover,
    /// Input records per second, all partitions together.
    pub rate: u64,
    /// From every instance committing to the kill.
    pub steady: Duration,
    /// From the kill to the writer's stop.
    pub after: Duration,
    /// The producers' `transaction.timeout.ms`: the runtime's default unless set.
    pub transaction_timeout: Duration,
}

impl VisibilityOptions {
    /// Per-partition exactly-once, a second instance, 400 records/s, a 6 s session timeout,
    /// the runtime's default 10 s transaction timeout, 10 s before the kill and 40 s after.
    pub fn new(exe: std::path::PathBuf, bootstrap: &str, partitions: i32, log_dir: &std::path::Path) -> Self {
        VisibilityOptions {
            group: Group::pair(exe, bootstrap, partitions, log_dir),
            takeover: Takeover::Survivor,
            rate: 400,
            steady: Duration::from_secs(10),
            after: Duration::from_secs(40),
            transaction_timeout: Duration::from_secs(10),
        }
    }
}

/// What the kill cost the readers (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct VisibilityReport {
    /// Per output partition: from the kill until every output of a record written before
    /// the kill was visible (0 if all were already).
    pub hidden: BTreeMap<i32, Duration>,
    /// The worst latency (written to visible) of the records written from 6 s to 1 s before
    /// the kill, whose transactions ended before it: the baseline.
    pub worst_before: Duration,
    /// The worst latency of the records written in the second after the kill.
    pub worst_after: Duration,
    /// Records written.
    pub produced: u64,
    /// The copy's verification.
    pub verified: Report,
}

impl VisibilityReport {
    /// The longest any output partition stayed behind the kill.
    pub fn longest(&self) -> Duration {
        self.hidden.values().copied().max().unwrap_or_default()
    }

    /// The shortest: every partition's readers waited at least this long.
    pub fn shortest(&self) -> Duration {
        self.hidden.values().copied().min().unwrap_or_default()
    }
}

/// Runs the measurement (see the [module docs](self)); `Err` says what failed.
pub fn run(opts: &VisibilityOptions) -> Result<VisibilityReport, String> {
    let instances = if opts.takeover == Takeover::Survivor { 2 } else { 1 };
    let g = Group { instances, ..opts.group.clone() };
    let run = g.prepare("visibility")?;
    let reader = Reader::start(&g.bootstrap, &run.output, g.partitions)?;
    let mut fleet = Fleet::new(g.exe.clone(), Vec::new(), run.dir.clone());
    let config = |slot: usize| InstanceConfig {
        by_key: true,
        commit_log: None,
        transaction_timeout: opts.transaction_timeout,
        instance_id: (opts.takeover != Takeover::RestartNewId).then(|| format!("visibility-{slot}")),
        ..g.instance(&run)
    };
    let mut ids = Vec::new();
    for slot in 0..instances {
        ids.push(fleet.start_with(Group::args(&config(slot)))?);
    }
    let writer = Paced::start(&g.bootstrap, &run.input, g.partitions, per_tick(opts.rate))?;
    wait_committing(&mut fleet, &ids)?;
    std::thread::sleep(opts.steady);
    let killed_at = wall();
    let idx = fleet.index_of(ids[0]).ok_or("instance 0 is gone")?;
    fleet.kill(idx);
    if opts.takeover != Takeover::Survivor {
        fleet.start_with(Group::args(&config(0)))?;
    }
    let until = Instant::now() + opts.after;
    while Instant::now() < until {
        check_crashes(&mut fleet)?;
        std::thread::sleep(Duration::from_millis(200));
    }
    let produced = writer.finish()?;
    catch_up_and_stop(&mut fleet, &g.bootstrap, &run.name, &run.input)?;
    let outputs = reader.finish(produced, Duration::from_secs(60))?;
    let verified =
        verify(&VerifyConfig::new(&g.bootstrap, &run.input, &run.output)).map_err(|e| format!("verifying: {e}"))?;
    let kill_ms = killed_at.as_millis() as i64;
    let worst = |from: i64, to: i64| {
        let ms = outputs.iter().filter(|o| (from..to).contains(&o.written_ms)).map(|o| o.latency_ms()).max();
        Duration::from_millis(ms.unwrap_or(0).max(0) as u64)
    };
    Ok(VisibilityReport {
        hidden: hidden(&outputs, kill_ms),
        worst_before: worst(kill_ms - 6_000, kill_ms - 1_000),
        worst_after: worst(kill_ms, kill_ms + 1_000),
        produced,
        verified,
    })
}

/// One output as the reader first saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Output {
    pub partition: i32,
    /// Its input's timestamp (the writer's send time), ms since the Unix epoch.
    pub written_ms: i64,
    /// When the reader first got it, ms since the Unix epoch.
    pub visible_ms: i64,
}

impl Output {
    fn latency_ms(&self) -> i64 {
        self.visible_ms - self.written_ms
    }
}

/// Per output partition with an output of a record written before `kill_ms`: how long after
/// the kill the last of those became visible (zero if before).
pub(crate) fn hidden(outputs: &[Output], kill_ms: i64) -> BTreeMap<i32, Duration> {
    let mut out = BTreeMap::new();
    for o in outputs.iter().filter(|o| o.written_ms < kill_ms) {
        let wait = Duration::from_millis((o.visible_ms - kill_ms).max(0) as u64);
        let e = out.entry(o.partition).or_insert(wait);
        *e = (*e).max(wait);
    }
    out
}

/// Waits until every instance of `ids` has copied records.
fn wait_committing(fleet: &mut Fleet, ids: &[u32]) -> Result<(), String> {
    let started = Instant::now();
    let committing =
        |fleet: &Fleet, id: &u32| fleet.status_of(*id).and_then(|s| s.summary).is_some_and(|s| s.records_in > 0);
    while !ids.iter().all(|id| committing(fleet, id)) {
        check_crashes(fleet)?;
        if started.elapsed() > Duration::from_secs(120) {
            return Err("not every instance copied records within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// The `read_committed` reader of every output partition from the beginning, noting each
/// key's first output (a replay under at-least-once writes some twice).
struct Reader {
    stop: Arc<AtomicBool>,
    distinct: Arc<AtomicU64>,
    join: JoinHandle<Result<HashMap<Vec<u8>, Output>, String>>,
}

impl Reader {
    fn start(bootstrap: &str, topic: &str, partitions: i32) -> Result<Reader, String> {
        let consumer = crate::bench::output_reader(bootstrap, topic, partitions, "visibility-reader")?;
        let (stop, distinct) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (flag, count) = (stop.clone(), distinct.clone());
        let join = std::thread::spawn(move || {
            let mut seen = HashMap::new();
            while !flag.load(Ordering::Relaxed) {
                let m = match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "visibility reader");
                        continue;
                    }
                    None => continue,
                };
                let visible_ms = wall().as_millis() as i64;
                let (Some(key), Some(written_ms)) = (m.key(), m.timestamp().to_millis()) else {
                    return Err(format!("an output without a key or timestamp at offset {}", m.offset()));
                };
                seen.entry(key.to_vec()).or_insert(Output { partition: m.partition(), written_ms, visible_ms });
                count.store(seen.len() as u64, Ordering::Relaxed);
            }
            Ok(seen)
        });
        Ok(Reader { stop, distinct, join })
    }

    /// Waits until it has seen `records` distinct keys (or `timeout`), then stops it.
    fn finish(self, records: u64, timeout: Duration) -> Result<Vec<Output>, String> {
        let deadline = Instant::now() + timeout;
        while self.distinct.load(Ordering::Relaxed) < records && Instant::now() < deadline && !self.join.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
        }
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.join.join().map_err(|_| "the reader panicked".to_string())??;
        Ok(seen.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(partition: i32, written_ms: i64, visible_ms: i64) -> Output {
        Output { partition, written_ms, visible_ms }
    }

    #[test]
    fn each_partition_waits_for_its_last_output_written_before_the_kill() {
        let kill = 10_000;
        let outputs = [
            out(0, 9_000, 9_050),   // visible before the kill
            out(0, 9_900, 17_000),  // held back by the open transaction: 7 s
            out(0, 10_100, 17_000), // written after the kill: not counted
            out(1, 9_950, 9_990),
            out(1, 8_000, 8_100),
            out(2, 12_000, 30_000), // only after the kill: no entry
        ];
        let h = hidden(&outputs, kill);
        assert_eq!(h, BTreeMap::from([(0, Duration::from_secs(7)), (1, Duration::ZERO)]));
        assert!(hidden(&[], kill).is_empty());
    }
}
