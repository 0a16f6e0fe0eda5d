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
///
/// A partition's owners are read beyond the window too: the instance of its last commit
/// before `from` and, with `lookahead`, of its first commit after `to`. Without them a
/// partition that moved but had not committed at its new owner by `to` (or that its old
/// owner last committed before `from`) showed a single owner and counted as unmoved, its
/// pause as an unmoved gap (the scale study's "moved 0" at 1,024 partitions, and a 2.22 s
/// unmoved gap at a scale-in whose kept partitions committed at most 177 ms apart). The
/// steady-gap window goes without `lookahead`: a move after it is the next phase's.
pub(crate) fn pauses(
    log: &[Commit],
    from: Duration,
    to: Duration,
    newcomers: &BTreeSet<u32>,
    partitions: Option<i32>,
    lookahead: bool,
) -> Pauses {
    #[derive(Default)]
    struct Seen {
        before: Option<(Duration, u32)>,
        inside: Vec<(Duration, u32)>,
        after: Option<(Duration, u32)>,
    }
    let mut by_partition: BTreeMap<i32, Seen> = BTreeMap::new();
    for &(when, i, p) in log {
        let seen = by_partition.entry(p).or_default();
        if when < from {
            seen.before = seen.before.max(Some((when, i)));
        } else if when <= to {
            seen.inside.push((when, i));
        } else if lookahead && seen.after.is_none_or(|a| (when, i) < a) {
            seen.after = Some((when, i));
        }
    }
    let mut out = Pauses::default();
    let (mut resumed, mut all_resumed, mut committing) = (Duration::ZERO, true, 0usize);
    for seen in by_partition.values_mut() {
        seen.inside.sort();
        let inside = &seen.inside;
        let around: Vec<(Duration, u32)> = seen.before.iter().chain(inside).chain(&seen.after).copied().collect();
        let owners: BTreeSet<u32> = around.iter().map(|c| c.1).collect();
        if owners.len() == 1 && owners.is_disjoint(newcomers) {
            out.unmoved += 1;
            let edges: Vec<Duration> =
                std::iter::once(from).chain(inside.iter().map(|c| c.0)).chain(std::iter::once(to)).collect();
            let gap = edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
            out.longest_unmoved_gap = out.longest_unmoved_gap.max(gap);
        } else if !owners.is_empty() {
            out.moved += 1;
            // A hand-over with a commit in the window: a partition silent through several
            // windows would otherwise count its one pause in each of them.
            let touches = |c: &(Duration, u32)| c.0 >= from && c.0 <= to;
            for w in around.windows(2).filter(|w| w[0].1 != w[1].1 && (touches(&w[0]) || touches(&w[1]))) {
                out.longest_moved_pause = out.longest_moved_pause.max(w[1].0 - w[0].0);
            }
        }
        // The first commit of the run of commits by the partition's last owner in the
        // window; none if the partition ends the window with an owner yet to commit.
        let Some(&(_, last_owner)) = inside.last() else { continue };
        committing += 1;
        if seen.after.is_some_and(|a| a.1 != last_owner) {
            all_resumed = false;
            continue;
        }
        let start = inside.iter().rposition(|c| c.1 != last_owner).map_or(0, |i| i + 1);
        resumed = resumed.max(inside[start].0.saturating_sub(from));
    }
    out.all_committing = match partitions {
        Some(n) if committing < n.max(0) as usize => None,
        _ if !all_resumed => None,
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
        let p = pauses(&log, ms(0), ms(2000), &BTreeSet::from([2]), Some(3), false);
        assert_eq!((p.unmoved, p.moved), (1, 2));
        assert_eq!(p.longest_unmoved_gap, ms(1100), "900 to the window's end");
        assert_eq!(p.longest_moved_pause, ms(1100), "400 at the old owner to 1500 at the new");
        assert_eq!(p.all_committing, Some(ms(1500)), "p1's first commit at its last owner");
        assert_eq!(pauses(&log, ms(0), ms(2000), &BTreeSet::from([2]), Some(4), false).all_committing, None);
        assert_eq!(
            pauses(&log, ms(0), ms(2000), &BTreeSet::new(), None, false).unmoved,
            2,
            "p2 is unmoved without a newcomer"
        );
    }

    #[test]
    fn owners_before_and_after_the_window_tell_a_move_without_commits_at_both_owners() {
        // Window [1000, 2000]. p0 moves 1 -> 2 but commits at 2 only after the window;
        // p1 was last committed by 3 (leaving at 1000) and commits at 1 from 1600; p2 stays
        // with 1 throughout, committing just before, inside and after the window.
        let log = vec![
            (ms(900), 1, 0),
            (ms(1100), 1, 0),
            (ms(2600), 2, 0),
            (ms(950), 3, 1),
            (ms(1600), 1, 1),
            (ms(1800), 1, 1),
            (ms(990), 1, 2),
            (ms(1500), 1, 2),
            (ms(2100), 1, 2),
        ];
        let p = pauses(&log, ms(1000), ms(2000), &BTreeSet::new(), Some(3), true);
        assert_eq!((p.unmoved, p.moved), (1, 2), "only p2 stayed put");
        assert_eq!(p.longest_unmoved_gap, ms(500), "p2: 1000 (edge) to 1500, 1500 to 2000 (edge)");
        assert_eq!(p.longest_moved_pause, ms(1500), "p0: 1100 at 1 to 2600 at 2");
        assert_eq!(p.all_committing, None, "p0 had not committed at its new owner by the window's end");
        // Without looking ahead, p0 looks unmoved (the steady-gap window's reading) and p1
        // still moved (its last commit before the window was another instance's).
        let q = pauses(&log, ms(1000), ms(2000), &BTreeSet::new(), Some(3), false);
        assert_eq!((q.unmoved, q.moved), (2, 1));
        assert_eq!(q.longest_moved_pause, ms(650), "p1: 950 at 3 to 1600 at 1");
        assert_eq!(q.all_committing, Some(ms(600)), "p1 from 1600 at its new owner");
        // A window with no commit of p0 at all (its 1100 -> 2600 hand-over spans it): moved,
        // with its pause left to the windows that hold one of its ends.
        let r = pauses(&log, ms(2200), ms(2400), &BTreeSet::new(), None, true);
        assert_eq!((r.unmoved, r.moved, r.longest_moved_pause), (2, 1, ms(0)), "p1 and p2 stay with 1, silent");
        assert_eq!(r.longest_unmoved_gap, ms(200), "the whole window");
    }
}
