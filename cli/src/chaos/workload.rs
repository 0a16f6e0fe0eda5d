//! What the instances of a chaos cell run (the workload) and the sink a workload writes to:
//! the vocabulary the fault plans and the matrix share.

/// What the instances of a cell run, and how the cell's outcome is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// The 1:1 copy, checked by the verifier, a final read and the concurrent reader.
    Copy,
    /// The copy with every output sent by a wall-clock timer a second after its record,
    /// most of them in transactions of timers alone; checked like the copy.
    Timers,
    /// The financial close (dedup, daily windows closed by idle timers, a join with the
    /// merchant table) with its stores in memory; checked against a batch recomputation.
    Close,
    /// The same with its stores on disk (`kafka-eos-disk`), one state directory per
    /// instance slot, reused by the slot's restarts.
    CloseDisk,
    /// Kafka → PostgreSQL through the exactly-once sink; checked from the table.
    Postgres,
    /// Kafka → Redis counters through the effectively-once sink (dedup keys).
    Redis,
    /// Kafka → Redis counters without dedup (at-least-once): a counter may only drift up.
    RedisNoDedup,
    /// The financial close with its stores in memory and a standby replica of every
    /// partition on every other instance: a partition that moves continues a warm copy.
    CloseStandby,
    /// The card-velocity example: hopping windows with a threshold trigger, alerts into
    /// PostgreSQL through an outbox sink, per-merchant totals through a repartition topic;
    /// checked against a batch recomputation of the input, and every alert row written once.
    Velocity,
    /// A windowed stream–stream join of orders and shipments, one order in 500 undecodable
    /// and dead-lettered; checked by key: one joined record per order, one dead letter per
    /// poison order.
    Join,
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 10] = [
        Workload::Copy,
        Workload::Timers,
        Workload::Close,
        Workload::CloseDisk,
        Workload::Postgres,
        Workload::Redis,
        Workload::RedisNoDedup,
        Workload::CloseStandby,
        Workload::Velocity,
        Workload::Join,
    ];

    /// The name on the command line and in result rows.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Copy => "copy",
            Workload::Timers => "timers",
            Workload::Close => "close",
            Workload::CloseDisk => "close-disk",
            Workload::Postgres => "postgres",
            Workload::Redis => "redis",
            Workload::RedisNoDedup => "redis-no-dedup",
            Workload::CloseStandby => "close-standby",
            Workload::Velocity => "velocity",
            Workload::Join => "join",
        }
    }

    /// The server the workload writes to (besides its output topics, for `velocity`).
    pub(crate) fn sink(self) -> Option<SinkKind> {
        match self {
            Workload::Postgres | Workload::Velocity => Some(SinkKind::Postgres),
            Workload::Redis => Some(SinkKind::Redis { dedup: true }),
            Workload::RedisNoDedup => Some(SinkKind::Redis { dedup: false }),
            _ => None,
        }
    }

    /// Whether the workload writes output records to Kafka (the sink workloads write none).
    pub(crate) fn produces(self) -> bool {
        !matches!(self, Workload::Postgres | Workload::Redis | Workload::RedisNoDedup)
    }

    /// The financial close, on either backend, with or without standbys.
    pub(crate) fn close(self) -> bool {
        matches!(self, Workload::Close | Workload::CloseDisk | Workload::CloseStandby)
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL.into_iter().find(|w| w.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
            format!("unknown workload {s:?}; one of: {}", names.join(", "))
        })
    }
}

/// The system outside Kafka a sink scenario writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SinkKind {
    Postgres,
    Redis { dedup: bool },
}
