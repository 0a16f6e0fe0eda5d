//! The replay-safety property check: the same input, with and without random aborts and
//! crashes, must give the same committed outputs and the same final state.
//!
//! Exactly-once rests on one property the user's processor must keep: *processing a record
//! again — after an abort, or after a crash and a restore of the state — gives the same
//! result*. Kafka's transactions discard the outputs and the state changes of an aborted
//! attempt; they cannot discard what the processor kept elsewhere. Two ways to break it:
//! - **state outside the stores**: a counter in a field of the processor (or a static)
//!   keeps counting through an abort, and starts from zero after a crash;
//! - **inputs other than the record and the stores**: the wall clock, a random number, a
//!   lookup whose answer changes.
//!
//! The check runs the input once in batches of fixed size with no faults (the reference),
//! then [`ReplayCheck::runs`] more times with random batch sizes, aborts after processing
//! and crashes (all from the seed), and compares each with the reference: outputs per topic
//! and input partition, in order, byte for byte (headers and timestamps included); and
//! every store's final entries. Runs start a few milliseconds apart and a replay comes at
//! least a millisecond after its first attempt, so a wall-clock read at millisecond
//! resolution shows; a read of a coarser clock (whole seconds) may go unnoticed.

use std::collections::BTreeMap;
use std::fmt;

use kafka_eos::PipelineBuilder;

use super::{Faults, TestDriver, TestInput, TestRecord};

/// The knobs of [`ReplayCheck::run`]; [`check_replay_safe`] uses the defaults.
#[derive(Debug, Clone)]
pub struct ReplayCheck {
    /// Seed of the batch sizes and faults (the same seed, the same faults).
    pub seed: u64,
    /// Faulty runs compared with the reference. Default 3.
    pub runs: u32,
    /// Batch size of the reference run. Default 10.
    pub reference_batch: usize,
    /// Largest batch of a faulty run (sizes are drawn from 1 to this). Default 20.
    pub max_batch: usize,
    /// Chance that an attempt is aborted after processing. Default 0.3.
    pub abort_probability: f64,
    /// Chance that an attempt ends in a crash (instances and state lost). Default 0.15.
    pub crash_probability: f64,
}

impl ReplayCheck {
    /// The defaults, with `seed`.
    pub fn new(seed: u64) -> ReplayCheck {
        ReplayCheck {
            seed,
            runs: 3,
            reference_batch: 10,
            max_batch: 20,
            abort_probability: 0.3,
            crash_probability: 0.15,
        }
    }

    /// Runs the check: `pipeline()` builds a fresh pipeline for every run.
    pub fn run(
        &self,
        pipeline: impl Fn() -> PipelineBuilder,
        inputs: &[TestInput],
    ) -> Result<ReplayReport, ReplayViolation> {
        let reference = Outcome::of(pipeline(), inputs, |_| Some(self.reference_batch), None)?;
        let mut report = ReplayReport::default();
        for run in 0..self.runs {
            std::thread::sleep(std::time::Duration::from_millis(2));
            let mut rng = Rng(self.seed ^ (u64::from(run) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let sizes = Rng(rng.next());
            let faults = Faults { rng, abort: self.abort_probability, crash: self.crash_probability, per_batch: 3 };
            let max = self.max_batch.max(1) as u64;
            let mut sizes = sizes;
            let faulty = Outcome::of(pipeline(), inputs, |_| Some(1 + (sizes.next() % max) as usize), Some(faults))?;
            report.aborts += faulty.stats.transactions_aborted;
            report.crashes += faulty.stats.crashes;
            report.runs += 1;
            if let Some(difference) = reference.difference(&faulty) {
                return Err(ReplayViolation { run, seed: self.seed, difference, report });
            }
        }
        report.outputs = reference.outputs.values().map(Vec::len).sum::<usize>() as u64;
        Ok(report)
    }
}

/// Checks that the pipeline `pipeline()` builds is replay-safe on `inputs`: see the
/// `replay` module's docs. `Ok` tells how many aborts and crashes the faulty runs went through;
/// `Err` names the first difference.
///
/// ```
/// use kafka_eos::{OutputRecord, Pipeline};
/// use kafka_eos_testkit::driver::{check_replay_safe, TestInput};
///
/// let pipeline = || {
///     let mut b = Pipeline::builder().input_topic("in");
///     let count = b.store::<(), u64>("count");
///     let out = b.output_topic("out");
///     b.processor(move |ctx, _rec| {
///         let n = ctx.store(&count).get(&())?.unwrap_or(0) + 1; // in the store: replay-safe
///         ctx.store(&count).put(&(), &n)?;
///         ctx.emit(OutputRecord::to(&out).value(n.to_string()));
///         Ok(())
///     })
/// };
/// let inputs: Vec<_> = (0..100).map(|i| TestInput::new().partition(i % 2).value("x")).collect();
/// let report = check_replay_safe(pipeline, &inputs, 7).expect("replay-safe");
/// assert!(report.aborts > 0 && report.crashes > 0);
/// ```
pub fn check_replay_safe(
    pipeline: impl Fn() -> PipelineBuilder,
    inputs: &[TestInput],
    seed: u64,
) -> Result<ReplayReport, ReplayViolation> {
    ReplayCheck::new(seed).run(pipeline, inputs)
}

/// What a passed check exercised.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplayReport {
    /// Faulty runs compared.
    pub runs: u32,
    /// Aborted attempts over the faulty runs (injected and processor errors).
    pub aborts: u64,
    /// Crashes over the faulty runs.
    pub crashes: u64,
    /// Committed outputs of the reference run.
    pub outputs: u64,
}

/// A processor that is not replay-safe: where a faulty run first differed from the reference.
#[derive(Debug, Clone)]
pub struct ReplayViolation {
    /// The faulty run (from 0).
    pub run: u32,
    /// The check's seed.
    pub seed: u64,
    /// The first difference, described.
    pub difference: String,
    /// What the runs had exercised until then.
    pub report: ReplayReport,
}

impl fmt::Display for ReplayViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not replay-safe (seed {}, faulty run {} after {} aborts and {} crashes): {}. Keep what must survive a \
             replay in state stores, and compute outputs only from the record and the stores (no wall clock, no \
             randomness, no fields of the processor)",
            self.seed, self.run, self.report.aborts, self.report.crashes, self.difference
        )
    }
}

impl std::error::Error for ReplayViolation {}

/// One run's result.
struct Outcome {
    /// Outputs per (topic, input partition), in order.
    outputs: BTreeMap<(String, i32), Vec<TestRecord>>,
    state: super::Snapshot,
    error: Option<String>,
    stats: super::DriverStats,
}

impl Outcome {
    fn of(
        builder: PipelineBuilder,
        inputs: &[TestInput],
        mut batch: impl FnMut(usize) -> Option<usize>,
        faults: Option<Faults>,
    ) -> Result<Outcome, ReplayViolation> {
        let violation =
            |difference: String| ReplayViolation { run: 0, seed: 0, difference, report: ReplayReport::default() };
        let mut driver = TestDriver::new(builder).map_err(|e| violation(format!("invalid pipeline: {e}")))?;
        driver.batch_size = None;
        driver.faults = faults;
        let mut error = None;
        let mut i = 0;
        while i < inputs.len() && error.is_none() {
            let n = batch(i).unwrap_or(inputs.len()).min(inputs.len() - i);
            for input in &inputs[i..i + n] {
                let _ = driver.pipe(input.clone());
            }
            i += n;
            error = driver.commit().err().map(|e| e.to_string());
        }
        let mut outputs: BTreeMap<(String, i32), Vec<TestRecord>> = BTreeMap::new();
        for (topic, records) in driver.topics() {
            for r in records {
                outputs.entry((topic.clone(), r.input.0)).or_default().push(r.clone());
            }
        }
        let state = driver.state_snapshot().map_err(|e| violation(format!("the state cannot be restored: {e}")))?;
        Ok(Outcome { outputs, state, error, stats: driver.stats() })
    }

    fn difference(&self, other: &Outcome) -> Option<String> {
        if self.error != other.error {
            return Some(format!(
                "the reference run ended with {:?}, the faulty run with {:?}",
                self.error, other.error
            ));
        }
        let keys: std::collections::BTreeSet<_> = self.outputs.keys().chain(other.outputs.keys()).collect();
        for key in keys {
            let (a, b) = (
                self.outputs.get(key).map_or(&[][..], Vec::as_slice),
                other.outputs.get(key).map_or(&[][..], Vec::as_slice),
            );
            if let Some(i) = (0..a.len().max(b.len())).find(|i| a.get(*i) != b.get(*i)) {
                return Some(format!(
                    "output {i} of topic {:?} from input partition {} differs: expected {}, got {}",
                    key.0,
                    key.1,
                    describe(a.get(i)),
                    describe(b.get(i))
                ));
            }
        }
        let keys: std::collections::BTreeSet<_> = self.state.keys().chain(other.state.keys()).collect();
        for key in keys {
            let (a, b) = (self.state.get(key), other.state.get(key));
            let empty = |s: Option<&Vec<_>>| s.is_none_or(|s| s.is_empty());
            if a != b && !(empty(a) && empty(b)) {
                return Some(format!(
                    "the final state of store {:?} in partition {} differs: {} entries expected, {} got",
                    key.0,
                    key.1,
                    a.map_or(0, Vec::len),
                    b.map_or(0, Vec::len)
                ));
            }
        }
        None
    }
}

fn describe(r: Option<&TestRecord>) -> String {
    match r {
        None => "no record".into(),
        Some(r) => format!(
            "key {:?} value {:?} (from offset {})",
            r.key.as_deref().map(String::from_utf8_lossy),
            r.value.as_deref().map(|v| String::from_utf8_lossy(&v[..v.len().min(120)]).into_owned()),
            r.input.1
        ),
    }
}

/// splitmix64: a small deterministic generator (no dependency for the test kit's users).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}
