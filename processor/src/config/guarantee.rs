//! The delivery guarantee a pipeline is run with, and how it reads from text.

use crate::error::{Error, Result};

/// The delivery guarantee of a pipeline. Chosen per pipeline: exactly-once costs a
/// transaction per batch (a few milliseconds of coordinator round trips, amortised over
/// the commit interval); at-least-once costs nothing extra but may write an output twice
/// after a crash or rebalance. See `docs/semantics.md` for the full contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Guarantee {
    /// One transactional producer per assigned input partition, with
    /// `transactional.id = <application-id>:<topic>:<partition>`. Its `init_transactions` on
    /// assignment fences the partition's previous owner and resolves its open transaction
    /// before this instance reads the committed offset; so its offsets name the consumer
    /// group alone, not the member's generation, and a rebalance never refuses the
    /// transactions of partitions that stay put (`docs/semantics.md`). Isolates failures
    /// per partition (one partition's abort does not touch the others); costs one
    /// librdkafka producer (threads, sockets, buffers) per partition. The default.
    #[default]
    ExactlyOncePerPartition,
    /// One transactional producer per instance, committing all its partitions' offsets in
    /// one transaction and fenced by consumer-group generation (KIP-447,
    /// `transactional.id = <application-id>:<instance-id>`). Fewer producers and
    /// transactions; an abort replays every partition's batch.
    ExactlyOncePerConsumer,
    /// An idempotent producer and no transaction: a batch's offsets are committed only after
    /// every one of its outputs is acknowledged, so nothing is lost, but a crash between the
    /// two writes the batch's outputs again.
    AtLeastOnce,
}

impl Guarantee {
    /// The per-partition guarantee's former name.
    #[deprecated(note = "renamed `Guarantee::ExactlyOncePerPartition`")]
    #[allow(non_upper_case_globals)]
    pub const ExactlyOnce: Guarantee = Guarantee::ExactlyOncePerPartition;

    /// Whether this guarantee uses Kafka transactions.
    pub fn is_transactional(self) -> bool {
        !matches!(self, Guarantee::AtLeastOnce)
    }

    /// `exactly-once-per-partition`, `exactly-once-per-consumer` or `at-least-once`.
    pub fn as_str(self) -> &'static str {
        match self {
            Guarantee::ExactlyOncePerPartition => "exactly-once-per-partition",
            Guarantee::ExactlyOncePerConsumer => "exactly-once-per-consumer",
            Guarantee::AtLeastOnce => "at-least-once",
        }
    }
}

impl std::str::FromStr for Guarantee {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "exactly-once-per-partition" | "exactly-once" | "eos" => Ok(Guarantee::ExactlyOncePerPartition),
            "exactly-once-per-consumer" | "eos-per-consumer" => Ok(Guarantee::ExactlyOncePerConsumer),
            "at-least-once" | "alo" => Ok(Guarantee::AtLeastOnce),
            _ => Err(Error::Config(format!(
                "unknown guarantee {s:?}; use exactly-once-per-partition (or exactly-once), exactly-once-per-consumer or at-least-once"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Guarantee;

    const ALL: [Guarantee; 3] =
        [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce];

    #[test]
    fn every_guarantee_reads_back_from_its_name() {
        for g in ALL {
            assert_eq!(g.as_str().parse::<Guarantee>().unwrap(), g);
        }
        assert!("exactly-twice".parse::<Guarantee>().is_err());
    }

    #[test]
    #[allow(deprecated)]
    fn the_former_name_still_means_per_partition_in_code_and_text() {
        assert_eq!(Guarantee::ExactlyOnce, Guarantee::ExactlyOncePerPartition);
        assert!(matches!(Guarantee::default(), Guarantee::ExactlyOnce));
        assert_eq!("exactly-once".parse::<Guarantee>().unwrap(), Guarantee::ExactlyOncePerPartition);
    }
}
