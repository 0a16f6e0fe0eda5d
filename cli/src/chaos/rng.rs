//! The suite's seeded random choices — which instance to kill, when, which broker — all
//! from one `--seed`, so a failing run replays exactly (with the same build: `fastrand`'s
//! sequence for a seed is stable within a version, and Cargo.lock pins it).
//!
//! A thin wrapper over `fastrand::Rng` (wyrand): it names the few draws the suite makes.

use std::time::Duration;

/// A seeded generator for schedules and dice; nothing cryptographic.
#[derive(Debug, Clone)]
pub(crate) struct Rng(fastrand::Rng);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }

    /// A seed for runs without `--seed` (from the OS's randomness, via fastrand).
    pub(crate) fn seed_from_entropy() -> u64 {
        fastrand::u64(..)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0.usize(..n)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        self.0.f64()
    }

    /// Uniform between `lo` and `hi`, at millisecond resolution.
    pub(crate) fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_millis() as u64, hi.as_millis().max(lo.as_millis()) as u64);
        Duration::from_millis(self.0.u64(lo..=hi))
    }

    /// `items` in random order.
    pub(crate) fn shuffled<T>(&mut self, mut items: Vec<T>) -> Vec<T> {
        self.0.shuffle(&mut items);
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            let (x, y) = (a.below(1000), b.below(1000));
            assert_eq!(x, y);
            assert!(a.below(3) < 3);
            b.below(3);
            let d = a.between(Duration::from_secs(2), Duration::from_secs(6));
            b.between(Duration::from_secs(2), Duration::from_secs(6));
            assert!(d >= Duration::from_secs(2) && d <= Duration::from_secs(6));
            let u = a.unit();
            b.unit();
            assert!((0.0..1.0).contains(&u));
        }
        let mut v = Rng::new(1).shuffled((0..10).collect::<Vec<_>>());
        v.sort();
        assert_eq!(v, (0..10).collect::<Vec<_>>());
    }
}
