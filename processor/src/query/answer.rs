//! What a query answers: a store's committed value, where to ask instead, or a local scan.

/// The answer to a key lookup ([`StateQuery::get`](super::StateQuery::get)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueryAnswer<V> {
    /// The key's value as the last committed transaction of its partition left it.
    Found(V),
    /// This instance owns the key's partition and has restored it: the key has no value.
    Absent,
    /// Another instance owns the key's partition (or none does yet: a rebalance under way).
    NotOwnedHere {
        /// The key's input partition.
        partition: i32,
        /// The owner's advertised endpoint, if known: ask it the same question.
        owner: Option<String>,
    },
    /// This instance owns the key's partition but has not restored its stores yet (or has
    /// no task for it: see [`HealthReport::unserved`](crate::health::HealthReport::unserved)).
    /// Ask again shortly.
    NotReady {
        /// The key's input partition.
        partition: i32,
    },
}

/// Where a key lives ([`StateQuery::metadata_for_key`](super::StateQuery::metadata_for_key)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyMetadata {
    /// The key's input partition (of the first input topic; co-partitioned inputs share it).
    pub partition: i32,
    /// The advertised endpoint of the instance that owns it, if known (this instance's own
    /// when [`local`](Self::local)).
    pub owner: Option<String>,
    /// Whether this instance owns the partition (restored or not).
    pub local: bool,
}

/// The entries of one store that this instance serves, from every partition it owns
/// ([`StateQuery::range`](super::StateQuery::range), [`StateQuery::prefix`](super::StateQuery::prefix)).
/// Other instances hold the other partitions: ask each of
/// [`StateQuery::instances`](super::StateQuery::instances) for a whole-store scan.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalScan<K, V> {
    /// The matching entries, sorted by the key type's `Ord`, each as its partition's last
    /// committed transaction left it (partitions may stand at different commits).
    pub entries: Vec<(K, V)>,
    /// The partitions read, in order.
    pub partitions: Vec<i32>,
    /// The partitions this instance owns but has not restored yet: not read.
    pub not_ready: Vec<i32>,
}
