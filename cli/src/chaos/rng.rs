//! A small seeded random number generator (SplitMix64).
//!
//! The suite needs reproducible choices — which instance to kill, when, which broker — from
//! one `--seed`, and nothing cryptographic: 20 lines beat a dependency.

use std::time::Duration;

/// SplitMix64: fast, full-period over `u64`, good enough for schedules and dice.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A seed from the clock and the pid, for runs without `--seed`.
    pub(crate) fn seed_from_entropy() -> u64 {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        Rng::new(nanos as u64 ^ ((std::process::id() as u64) << 32)).next_u64()
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), without modulo bias worth mentioning (multiply-high).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform between `lo` and `hi`, at millisecond resolution.
    pub(crate) fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_millis() as u64, hi.as_millis().max(lo.as_millis()) as u64);
        Duration::from_millis(lo + self.below((hi - lo + 1) as usize) as u64)
    }

    /// `items` in random order.
    pub(crate) fn shuffled<T>(&mut self, mut items: Vec<T>) -> Vec<T> {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
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
            assert_eq!(a.next_u64(), b.next_u64());
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
