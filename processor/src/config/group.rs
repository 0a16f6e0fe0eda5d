//! How a pipeline's instances share its partitions: the rebalance protocol and static
//! membership, and the consumer properties that would contradict them.

use rdkafka::ClientConfig;

use super::Properties;
use crate::error::{Error, Result};

/// How the group moves partitions when an instance joins, leaves or fails (see
/// `docs/scaling.md` for the measurements behind the default).
///
/// Whatever the protocol, a partition is only given to its next owner after its current
/// owner committed (or dropped) its batch, and under
/// [`ExactlyOncePerPartition`](crate::Guarantee::ExactlyOncePerPartition) the next owner's `init_transactions`
/// fences the previous one first: the choice costs pauses, never correctness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Rebalancing {
    /// Incremental, on the classic protocol: `partition.assignment.strategy=cooperative-sticky`
    /// (KIP-429). Only the partitions that move are revoked, and only they pause;
    /// the others keep processing and committing through the rebalance (it takes two
    /// rounds: revoke what moves, then assign it). Works with every broker this crate
    /// supports. The default, except under
    /// [`ExactlyOncePerConsumer`](crate::Guarantee::ExactlyOncePerConsumer) (see
    /// [`Rebalancing::Eager`]).
    #[default]
    Cooperative,
    /// Incremental, on the KIP-848 consumer protocol (`group.protocol=consumer`): the broker
    /// computes the assignment and moves partitions one member at a time, driven by
    /// heartbeats. Needs Kafka 4.0 or newer; `session.timeout.ms` and
    /// `heartbeat.interval.ms` are then broker settings (`group.consumer.*`) and refused
    /// here, and `group.remote.assignor` picks the broker's assignor.
    Consumer,
    /// The default under
    /// [`ExactlyOncePerConsumer`](crate::Guarantee::ExactlyOncePerConsumer), which accepts
    /// the incremental protocols too: there a worker's transaction holds all its
    /// partitions, so under an incremental protocol the transactions in flight when the
    /// generation changes are refused and replayed, unmoved partitions included. With cheap
    /// assignments eager pauses the whole group for about one commit interval, less than
    /// the moved partitions wait under cooperative, and aborts nothing (docs/scaling.md,
    /// *Rebalance protocols*); the incremental protocols pay off when assignments are
    /// costly (large stores to restore, many partitions).
    ///
    /// Stop-the-world, on the classic protocol (`range,roundrobin`): every rebalance revokes
    /// every partition of every instance, and under `ExactlyOncePerPartition` re-creates every
    /// partition's producer and restores every store. Simplest to reason about; every join,
    /// leave or crash pauses the whole group.
    Eager,
}

impl Rebalancing {
    /// `cooperative`, `consumer` or `eager`.
    pub fn as_str(self) -> &'static str {
        match self {
            Rebalancing::Cooperative => "cooperative",
            Rebalancing::Consumer => "consumer",
            Rebalancing::Eager => "eager",
        }
    }
}

impl std::str::FromStr for Rebalancing {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cooperative" | "cooperative-sticky" => Ok(Rebalancing::Cooperative),
            "consumer" | "kip-848" => Ok(Rebalancing::Consumer),
            "eager" => Ok(Rebalancing::Eager),
            _ => Err(Error::Config(format!("unknown rebalancing {s:?}; use cooperative, consumer or eager"))),
        }
    }
}

/// The group's settings of a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupSettings {
    pub rebalancing: Rebalancing,
    /// `group.instance.id` (static membership, KIP-345), if enabled.
    pub static_member: Option<String>,
}

impl GroupSettings {
    /// Sets the protocol's and membership's librdkafka properties.
    pub(crate) fn apply(&self, c: &mut ClientConfig) {
        match self.rebalancing {
            Rebalancing::Cooperative => {
                c.set("partition.assignment.strategy", "cooperative-sticky");
            }
            Rebalancing::Consumer => {
                c.set("group.protocol", "consumer");
            }
            Rebalancing::Eager => {
                c.set("partition.assignment.strategy", "range,roundrobin");
            }
        }
        if self.rebalancing != Rebalancing::Consumer {
            // A member learns of a rebalance from its next heartbeat, and a cooperative one
            // takes two rounds: with librdkafka's default interval moved partitions wait for up
            // to two of them (docs/scaling.md). 1 s costs one small request per second per
            // instance. The user's consumer property, applied after, wins.
            c.set("heartbeat.interval.ms", "1000");
        }
        if let Some(id) = &self.static_member {
            c.set("group.instance.id", id);
        }
    }

    /// Refuses consumer properties that would contradict these settings: the protocol is
    /// chosen with [`PipelineBuilder::rebalancing`](crate::PipelineBuilder::rebalancing),
    /// because the runtime's rebalance handling depends on it.
    pub(crate) fn validate(&self, c: &Properties) -> Result<()> {
        let refuse = |key: &str, why: &str| -> Result<()> {
            match c.get(key) {
                Some(_) => Err(Error::Config(format!("do not set consumer property {key}: {why}"))),
                None => Ok(()),
            }
        };
        let choose = "choose the protocol with PipelineBuilder::rebalancing (cooperative, consumer or eager)";
        refuse("partition.assignment.strategy", choose)?;
        refuse("group.protocol", choose)?;
        refuse(
            "group.instance.id",
            "use PipelineBuilder::static_membership, which takes the instance_id as group.instance.id",
        )?;
        if self.rebalancing == Rebalancing::Consumer {
            let broker = "with Rebalancing::Consumer (KIP-848) it is a broker setting (group.consumer.*)";
            refuse("session.timeout.ms", broker)?;
            refuse("heartbeat.interval.ms", broker)?;
        } else {
            refuse("group.remote.assignor", "it only applies to Rebalancing::Consumer (KIP-848)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> Properties {
        let mut p = Properties::default();
        for &(k, v) in kv {
            p.set(k, v);
        }
        p
    }

    #[test]
    fn each_protocol_sets_its_properties_and_refuses_contradictions() {
        let g = |rebalancing| GroupSettings { rebalancing, static_member: None };
        for (r, key, value) in [
            (Rebalancing::Cooperative, "partition.assignment.strategy", "cooperative-sticky"),
            (Rebalancing::Eager, "partition.assignment.strategy", "range,roundrobin"),
            (Rebalancing::Consumer, "group.protocol", "consumer"),
        ] {
            let mut c = ClientConfig::new();
            g(r).apply(&mut c);
            assert_eq!(c.get(key), Some(value), "{r:?}");
            assert!(c.get("group.instance.id").is_none());
            assert!(g(r).validate(&props(&[("partition.assignment.strategy", "range")])).is_err());
            assert!(g(r).validate(&props(&[("group.protocol", "classic")])).is_err());
            assert!(g(r).validate(&props(&[("fetch.min.bytes", "1")])).is_ok());
        }
        let err = g(Rebalancing::Consumer).validate(&props(&[("session.timeout.ms", "6000")])).unwrap_err();
        assert!(err.to_string().contains("group.consumer"), "{err}");
        assert!(g(Rebalancing::Cooperative).validate(&props(&[("session.timeout.ms", "6000")])).is_ok());
        assert!(g(Rebalancing::Eager).validate(&props(&[("group.remote.assignor", "uniform")])).is_err());
        assert!(g(Rebalancing::Consumer).validate(&props(&[("group.remote.assignor", "uniform")])).is_ok());
        let mut c = ClientConfig::new();
        GroupSettings { rebalancing: Rebalancing::Cooperative, static_member: Some("pod-3".into()) }.apply(&mut c);
        assert_eq!(c.get("group.instance.id"), Some("pod-3"));
        assert_eq!("kip-848".parse::<Rebalancing>().unwrap(), Rebalancing::Consumer);
        assert!("sticky".parse::<Rebalancing>().is_err());
    }
}
