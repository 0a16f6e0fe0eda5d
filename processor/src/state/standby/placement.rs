//! Where standby replicas go: the partitions whose stores an instance keeps warm, decided
//! from the group's members and their assignment, as every instance reads them.
//!
//! The rule: the members, ordered by member id, form a ring; a partition's standbys are
//! the `replicas` members after its owner. Every instance applies the rule to the same
//! group description, so each partition gets the same standbys whoever computes them, and
//! never on its owner. The assignor decides where a partition moves, not this rule: with
//! `replicas` at least the number of other members, every other member holds one, so a
//! moved partition always lands on a warm copy; with fewer, about `replicas / (members - 1)`
//! of moves do (`docs/scaling.md`).

use std::collections::BTreeSet;

/// A member of the group and the input partitions it owns (of the first input topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub id: String,
    pub partitions: Vec<i32>,
}

/// The partitions member `me` keeps standbys of (see the module docs). Empty when `me` is
/// not among `members` (not joined yet, or the description is older than its join).
pub(crate) fn standby_partitions(me: &str, members: &[Member], replicas: usize) -> BTreeSet<i32> {
    let mut ring: Vec<&Member> = members.iter().collect();
    ring.sort_by(|a, b| a.id.cmp(&b.id));
    ring.dedup_by(|a, b| a.id == b.id);
    let mut mine = BTreeSet::new();
    let Some(at) = ring.iter().position(|m| m.id == me) else { return mine };
    let n = ring.len();
    for (i, owner) in ring.iter().enumerate() {
        // `me` is the k-th member after this owner, k in 1..n.
        let k = (at + n - i) % n;
        if k >= 1 && k <= replicas {
            mine.extend(owner.partitions.iter().copied());
        }
    }
    // A partition two members claim (a description caught mid-rebalance) is never kept
    // beside its owner.
    if let Some(me) = ring.get(at) {
        for p in &me.partitions {
            mine.remove(p);
        }
    }
    mine
}

/// The partitions of `topic` in a member's assignment as the classic consumer protocol
/// encodes it (`ConsumerProtocolAssignment`, every version: a version, then per topic its
/// name and partitions, then user data that is not read). `None`: not that encoding. An
/// empty assignment (a member that has none yet) has no partitions.
pub(crate) fn assigned_partitions(bytes: &[u8], topic: &str) -> Option<Vec<i32>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    let mut r = Reader(bytes);
    let version = r.i16()?;
    if version < 0 {
        return None;
    }
    let topics = r.i32()?;
    let mut mine = Vec::new();
    for _ in 0..topics.max(0) {
        let len = r.i16()?;
        let name = r.take(usize::try_from(len).ok()?)?;
        let count = r.i32()?;
        for _ in 0..count.max(0) {
            let p = r.i32()?;
            if name == topic.as_bytes() {
                mine.push(p);
            }
        }
    }
    mine.sort_unstable();
    mine.dedup();
    Some(mine)
}

/// Big-endian reads from the front of a slice, `None` past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Option<i32> {
        self.take(4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// `members` members (ids `m0`..) dealing `partitions` partitions round-robin.
    fn group(members: usize, partitions: i32) -> Vec<Member> {
        (0..members)
            .map(|i| Member {
                id: format!("m{i}"),
                partitions: (0..partitions).filter(|p| *p as usize % members == i).collect(),
            })
            .collect()
    }

    /// Every group of 0–6 members over 0–9 partitions, every replica count 0–7: each owned
    /// partition has `min(replicas, members - 1)` standbys, none on its owner, and the
    /// answer does not depend on the order the description lists the members in.
    #[test]
    fn each_partition_gets_its_replicas_on_distinct_members_other_than_its_owner() {
        for members in 0..=6 {
            for partitions in 0..=9 {
                let g = group(members, partitions);
                let mut reversed = g.clone();
                reversed.reverse();
                for replicas in 0..=7 {
                    let mut holders: BTreeMap<i32, Vec<String>> = BTreeMap::new();
                    for m in &g {
                        let mine = standby_partitions(&m.id, &g, replicas);
                        assert_eq!(mine, standby_partitions(&m.id, &reversed, replicas), "order-independent");
                        for p in mine {
                            assert!(!m.partitions.contains(&p), "never on the owner");
                            holders.entry(p).or_default().push(m.id.clone());
                        }
                    }
                    let want = replicas.min(members.saturating_sub(1));
                    for p in 0..partitions {
                        let n = holders.get(&p).map_or(0, Vec::len);
                        assert_eq!(n, want, "{members} members, {partitions} partitions, {replicas} replicas: p{p}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_member_missing_from_the_description_keeps_nothing_and_unowned_partitions_are_left_out() {
        let g = group(3, 6);
        assert!(standby_partitions("not-joined", &g, 2).is_empty());
        assert!(standby_partitions("m0", &[], 1).is_empty());
        let mut moving = g.clone();
        moving[1].partitions.clear(); // m1's partitions mid-move: nobody owns them
        let mine = standby_partitions("m2", &moving, 1);
        assert!(!mine.contains(&1) && !mine.contains(&4), "{mine:?}");
    }

    #[test]
    fn a_partition_two_members_claim_is_never_kept_beside_one_of_them() {
        let mut g = group(2, 4);
        g[1].partitions.push(0); // m0 still lists 0 too
        assert!(!standby_partitions("m1", &g, 1).contains(&0));
    }

    fn encode(version: i16, topics: &[(&str, &[i32])], user_data: &[u8]) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend((topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
            b.extend((ps.len() as i32).to_be_bytes());
            for p in *ps {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend((user_data.len() as i32).to_be_bytes());
        b.extend(user_data);
        b
    }

    #[test]
    fn assignments_of_every_version_are_read_and_other_bytes_refused() {
        for version in 0..=3 {
            let b = encode(version, &[("other", &[0, 1]), ("in", &[5, 2, 2]), ("in", &[7])], b"sticky");
            assert_eq!(assigned_partitions(&b, "in"), Some(vec![2, 5, 7]));
            assert_eq!(assigned_partitions(&b, "absent"), Some(vec![]));
            // Every truncation that cuts into the topics is refused, never misread.
            let topics_end = b.len() - 4 - 6;
            for cut in 1..topics_end {
                assert_eq!(assigned_partitions(&b[..cut], "in"), None, "cut at {cut}");
            }
        }
        assert_eq!(assigned_partitions(&[], "in"), Some(vec![]));
        assert_eq!(assigned_partitions(&encode(-1, &[], &[]), "in"), None);
    }
}
