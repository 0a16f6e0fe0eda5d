//! What a membership change did to each partition's commits: which partitions moved, the
//! longest gap of those that stayed, the longest pause of those that moved, and how long
//! until every partition committed at its new owner.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One committed transaction's partition: `(when, instance, partition)`, `when` measured
/// from any fixed origin.
pub(crate) type Commit = (Duration, u32, i32);

/// What a membership change did to the commits of a window (see `pauses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pauses {
    /// Partitions committed by a single instance in the window, not a newcomer.
    pub unmoved: usize,
    /// Every other partition that committed in the window.
    pub moved: usize,
    /// The longest gap between two commits of an unmoved partition, the window's edges
    /// counting as commits.
    pub longest_unmoved_gap: Duration,
    /// The longest time a moved partition went from a commit at one owner to its next
    /// commit at another.
    pub longest_moved_pause: Duration,
    /// From the window's start until every partition of `all` had committed at the owner it
    /// ends the window with; `None` if one never did.
    pub all_committing: Option<Duration>,
}

/// Classifies the commits of `log` in `[from, to]`; `newcomers` are the instances that
/// joined at `from`. [`Pauses::all_committing`] is `None` if `partitions` is given and not
/// every one of them committed in the window.
pub(crate) fn pauses(
    log: &[Commit],
    from: Duration,
    to: Duration,
    newcomers: &BTreeSet<u32>,
    partitions: Option<i32>,
) -> Pauses {
    let mut by_partition: BTreeMap<i32, Vec<(Duration, u32)>> = BTreeMap::new();
    for (when, i, p) in log.iter().filter(|c| c.0 >= from && c.0 <= to) {
        by_partition.entry(*p).or_default().push((*when, *i));
    }
    let mut out = Pauses::default();
    let mut resumed = Duration::ZERO;
    for commits in by_partition.values_mut() {
        commits.sort();
        let owners: BTreeSet<u32> = commits.iter().map(|c| c.1).collect();
        if owners.len() == 1 && owners.is_disjoint(newcomers) {
            out.unmoved += 1;
            let edges: Vec<Duration> =
                std::iter::once(from).chain(commits.iter().map(|c| c.0)).chain(std::iter::once(to)).collect();
            let gap = edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
            out.longest_unmoved_gap = out.longest_unmoved_gap.max(gap);
        } else {
            out.moved += 1;
            for w in commits.windows(2).filter(|w| w[0].1 != w[1].1) {
                out.longest_moved_pause = out.longest_moved_pause.max(w[1].0 - w[0].0);
            }
        }
        // The first commit of the run of commits by the partition's last owner.
        let last_owner = commits.last().map(|c| c.1);
        let start = commits.iter().rposition(|c| Some(c.1) != last_owner).map_or(0, |i| i + 1);
        resumed = resumed.max(commits[start].0 - from);
    }
    out.all_committing = match partitions {
        Some(n) if by_partition.len() < n.max(0) as usize => None,
        _ => Some(resumed),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn unmoved_gaps_moved_pauses_and_the_time_until_all_commit() {
        // p0 stays with instance 1 (commits at 100, 900); p1 moves from 1 to 2 (400 -> 1500);
        // p2 is the newcomer's only (commits at 1200).
        let log = vec![
            (ms(100), 1, 0),
            (ms(900), 1, 0),
            (ms(400), 1, 1),
            (ms(1500), 2, 1),
            (ms(1700), 2, 1),
            (ms(1200), 2, 2),
            (ms(5000), 1, 0), // outside the window
        ];
        let p = pauses(&log, ms(0), ms(2000), &BTreeSet::from([2]), Some(3));
        assert_eq!((p.unmoved, p.moved), (1, 2));
        assert_eq!(p.longest_unmoved_gap, ms(1100), "900 to the window's end");
        assert_eq!(p.longest_moved_pause, ms(1100), "400 at the old owner to 1500 at the new");
        assert_eq!(p.all_committing, Some(ms(1500)), "p1's first commit at its last owner");
        assert_eq!(pauses(&log, ms(0), ms(2000), &BTreeSet::from([2]), Some(4)).all_committing, None);
        assert_eq!(
            pauses(&log, ms(0), ms(2000), &BTreeSet::new(), None).unmoved,
            2,
            "p2 is unmoved without a newcomer"
        );
    }
}
