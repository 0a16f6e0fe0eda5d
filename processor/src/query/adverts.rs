//! Who owns which input partition, as the instances advertise it on the endpoints topic
//! ([`endpoints`](super::endpoints)): each instance's latest advert, keyed by its endpoint,
//! and the rule that picks one owner per partition from them.
//!
//! The rule: **a partition belongs to the endpoint whose advert listing it came last** (the
//! highest offset of the topic's single partition, read in order). An instance publishes its
//! assignment after every change, so the owner a partition moved to advertises it after the
//! owner it left did: a stale claim — an instance that crashed, or one whose advert of the
//! revocation is not read yet — is overridden by the newer one, and forgotten, so that it
//! does not come back when the newer owner stops. A tombstone (an instance that stopped)
//! withdraws every claim of its endpoint: its partitions have no known owner until their
//! next owner advertises them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, RwLock};

/// An instance of the pipeline that advertises an endpoint, and the input partitions it owns
/// by the adverts read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Instance {
    /// The endpoint it advertises (`host:port`).
    pub endpoint: String,
    /// The partitions of the first input topic it owns, in order.
    pub partitions: Vec<i32>,
}

/// Every endpoint's latest advert: the endpoints topic's offset it came at, and the
/// partitions it lists.
#[derive(Debug, Default)]
pub(crate) struct AdvertTable {
    latest: BTreeMap<String, (i64, Vec<i32>)>,
}

impl AdvertTable {
    /// The advert at `offset` (adverts are applied in offset order): `endpoint` owns
    /// `partitions`, which no other endpoint owns any more; `None` (a tombstone): nothing.
    pub(crate) fn apply(&mut self, offset: i64, endpoint: &str, partitions: Option<Vec<i32>>) {
        match partitions {
            Some(partitions) => {
                for (other, (_, listed)) in self.latest.iter_mut() {
                    if other != endpoint {
                        listed.retain(|p| !partitions.contains(p));
                    }
                }
                self.latest.insert(endpoint.to_string(), (offset, partitions));
            }
            None => {
                self.latest.remove(endpoint);
            }
        }
    }

    /// The endpoint that owns `partition` (see the module docs), if any advert lists it.
    pub(crate) fn owner(&self, partition: i32) -> Option<&str> {
        self.latest
            .iter()
            .filter(|(_, (_, partitions))| partitions.contains(&partition))
            .max_by_key(|(_, (offset, _))| *offset)
            .map(|(endpoint, _)| endpoint.as_str())
    }

    /// Every advertised endpoint with the partitions it owns by [`owner`](Self::owner).
    pub(crate) fn instances(&self) -> Vec<Instance> {
        self.latest
            .iter()
            .map(|(endpoint, (_, listed))| {
                let mut partitions: Vec<i32> =
                    listed.iter().copied().filter(|p| self.owner(*p) == Some(endpoint.as_str())).collect();
                partitions.sort_unstable();
                Instance { endpoint: endpoint.clone(), partitions }
            })
            .collect()
    }
}

/// An advert's value: the partitions, in decimal, comma-separated (`0,2,5`; empty: none).
pub(crate) fn encode(partitions: &[i32]) -> String {
    partitions.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// The partitions of an advert's value; `None` if it is not one.
pub(crate) fn decode(value: &[u8]) -> Option<Vec<i32>> {
    std::str::from_utf8(value).ok()?.split(',').filter(|p| !p.is_empty()).map(|p| p.trim().parse().ok()).collect()
}

/// The adverts an instance has read, shared between the endpoints thread (which writes
/// them) and the queries; and this instance's own endpoint, once known.
#[derive(Debug, Default)]
pub(crate) struct Adverts {
    table: RwLock<AdvertTable>,
    own: OnceLock<String>,
    stop: AtomicBool,
}

impl Adverts {
    /// This instance advertises `endpoint` (set once, when the pipeline starts).
    pub(crate) fn set_own(&self, endpoint: String) {
        let _ = self.own.set(endpoint);
    }

    /// The endpoint this instance advertises, once the pipeline has started.
    pub(crate) fn own(&self) -> Option<&str> {
        self.own.get().map(String::as_str)
    }

    /// See [`AdvertTable::apply`].
    pub(crate) fn apply(&self, offset: i64, endpoint: &str, partitions: Option<Vec<i32>>) {
        self.table.write().unwrap_or_else(|p| p.into_inner()).apply(offset, endpoint, partitions);
    }

    /// See [`AdvertTable::owner`].
    pub(crate) fn owner(&self, partition: i32) -> Option<String> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).owner(partition).map(str::to_string)
    }

    /// See [`AdvertTable::instances`].
    pub(crate) fn instances(&self) -> Vec<Instance> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).instances()
    }

    /// Asks the endpoints thread to stop (the pipeline ended).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_advert_no_owner() {
        let table = AdvertTable::default();
        assert_eq!(table.owner(0), None);
        assert!(table.instances().is_empty());
        let mut idle = AdvertTable::default();
        idle.apply(0, "a:1", Some(vec![]));
        assert_eq!(idle.owner(0), None, "an instance with an empty assignment owns nothing");
        assert_eq!(idle.instances(), vec![Instance { endpoint: "a:1".into(), partitions: vec![] }]);
    }

    #[test]
    fn the_latest_claim_wins_and_a_tombstone_withdraws_every_claim() {
        let mut t = AdvertTable::default();
        t.apply(0, "a:1", Some(vec![0, 1, 2, 3]));
        assert_eq!((t.owner(0), t.owner(3), t.owner(4)), (Some("a:1"), Some("a:1"), None));
        // b joins and is given 2 and 3 before a's advert of their revocation is read.
        t.apply(1, "b:1", Some(vec![3, 2]));
        assert_eq!((t.owner(1), t.owner(2), t.owner(3)), (Some("a:1"), Some("b:1"), Some("b:1")));
        t.apply(2, "a:1", Some(vec![0, 1]));
        assert_eq!(
            t.instances(),
            vec![
                Instance { endpoint: "a:1".into(), partitions: vec![0, 1] },
                Instance { endpoint: "b:1".into(), partitions: vec![2, 3] },
            ]
        );
        // a crashed without a word; b took everything.
        t.apply(3, "b:1", Some(vec![0, 1, 2, 3]));
        assert!((0..4).all(|p| t.owner(p) == Some("b:1")));
        assert_eq!(t.instances()[0].partitions, Vec::<i32>::new(), "a's stale claims are overridden");
        t.apply(4, "b:1", None);
        assert!(
            (0..4).all(|p| t.owner(p).is_none()),
            "a tombstone withdraws b's claims; a's older ones stay forgotten"
        );
        t.apply(5, "c:1", Some(vec![1]));
        assert_eq!((t.owner(0), t.owner(1)), (None, Some("c:1")));
    }

    #[test]
    fn adverts_read_back_what_was_written() {
        assert_eq!(encode(&[0, 2, 15]), "0,2,15");
        assert_eq!(decode(b"0,2,15"), Some(vec![0, 2, 15]));
        assert_eq!(decode(encode(&[]).as_bytes()), Some(vec![]));
        assert_eq!(decode(b"0,x"), None);
        assert_eq!(decode(&[0xff]), None);
    }
}
