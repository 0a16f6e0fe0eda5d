//! Which input partition a key is in: the [`Partitioner`] the input's producers use, and the
//! [`PartitionKey`] of a store key (the input record key it came with).
//!
//! The owner of a key is the owner of the input partition its records are written to, so a
//! query must place the key exactly as the input's producers did. Nothing in Kafka records
//! which partitioner a producer used: the pipeline is told
//! ([`PipelineBuilder::input_partitioner`](crate::PipelineBuilder::input_partitioner)), and
//! the default is the Java client's default, murmur2 over the key bytes. librdkafka's own
//! default (`consistent_random`, a CRC32) places keys differently: librdkafka producers of
//! the input must set `partitioner=murmur2_random`, which matches Java's for every non-null
//! key, or the pipeline must be given their rule with [`Partitioner::custom`].

use std::borrow::Cow;
use std::sync::Arc;

/// The partition of a key among an input topic's partitions, as the input's producers chose
/// it. Default: [`Partitioner::murmur2`].
///
/// ```
/// use kafka_eos::query::Partitioner;
/// let java = Partitioner::murmur2();
/// assert!((0..4).contains(&java.partition(b"merchant-7", 4)));
/// // The financial close writes merchant m (keyed by its decimal id) to partition m % n.
/// let by_id = Partitioner::custom(|key, partitions| {
///     std::str::from_utf8(key).ok().and_then(|k| k.parse::<i64>().ok()).map_or(0, |m| (m % partitions as i64) as i32)
/// });
/// assert_eq!(by_id.partition(b"42", 4), 2);
/// ```
#[derive(Clone, Default)]
pub struct Partitioner(Rule);

/// A user's rule: `(key, partitions) -> partition`.
type CustomRule = Arc<dyn Fn(&[u8], i32) -> i32 + Send + Sync>;

#[derive(Clone, Default)]
enum Rule {
    #[default]
    Murmur2,
    Custom(CustomRule),
}

impl Partitioner {
    /// The Java client's default for keyed records, and librdkafka's `murmur2_random`:
    /// `(murmur2(key) & 0x7fffffff) % partitions` (see [`murmur2`]).
    pub fn murmur2() -> Partitioner {
        Partitioner(Rule::Murmur2)
    }

    /// The producers' own rule: `f(key, partitions)`. A result outside `0..partitions` is
    /// taken modulo `partitions` (Euclidean), so it always names a partition.
    pub fn custom(f: impl Fn(&[u8], i32) -> i32 + Send + Sync + 'static) -> Partitioner {
        Partitioner(Rule::Custom(Arc::new(f)))
    }

    /// The partition of `key` among `partitions` (at least 1).
    pub fn partition(&self, key: &[u8], partitions: i32) -> i32 {
        let n = partitions.max(1);
        match &self.0 {
            Rule::Murmur2 => (murmur2(key) & 0x7fff_ffff) % n,
            Rule::Custom(f) => f(key, n).rem_euclid(n),
        }
    }
}

impl std::fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Rule::Murmur2 => "Partitioner::murmur2",
            Rule::Custom(_) => "Partitioner::custom",
        })
    }
}

/// The 32-bit murmur2 hash of `data` as Kafka's Java client computes it
/// (`org.apache.kafka.common.utils.Utils.murmur2`: seed `0x9747b28c`, little-endian blocks),
/// which librdkafka's `murmur2` partitioners compute too.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut blocks = data.chunks_exact(4);
    for b in &mut blocks {
        let mut k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        if tail.len() == 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// How a store key maps to the input record key it came with: the bytes the input's
/// producers partitioned by, which find the key's partition for
/// [`StateQuery::get`](super::StateQuery::get). Implemented for `String` (its UTF-8 bytes)
/// and `Vec<u8>` (itself); for other key types, implement it on the type, or pass the
/// input key to [`StateQuery::get_for_input_key`](super::StateQuery::get_for_input_key).
pub trait PartitionKey {
    /// The input record key that carries this store key.
    fn partition_key(&self) -> Cow<'_, [u8]>;
}

impl PartitionKey for String {
    fn partition_key(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

impl PartitionKey for Vec<u8> {
    fn partition_key(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of Kafka's own test of `Utils.murmur2` (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_the_java_client() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ];
        for (data, hash) in cases {
            assert_eq!(murmur2(data), hash, "{:?}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn partitions_are_in_range_whatever_the_rule_answers() {
        let java = Partitioner::murmur2();
        for k in 0..200 {
            let key = format!("key-{k}");
            assert!((0..7).contains(&java.partition(key.as_bytes(), 7)));
        }
        assert_eq!(java.partition(b"21", 1), 0);
        assert_eq!(java.partition(b"abc", 0), 0, "no partitions: the only answer is 0");
        let wild = Partitioner::custom(|_, _| -5);
        assert_eq!(wild.partition(b"x", 4), 3, "taken modulo, Euclidean");
        assert_eq!(format!("{:?}", Partitioner::default()), "Partitioner::murmur2");
    }

    #[test]
    fn string_keys_partition_by_their_utf8_bytes() {
        assert_eq!(&*"m7".to_string().partition_key(), b"m7");
        assert_eq!(&*vec![1u8, 2].partition_key(), &[1u8, 2][..]);
    }
}
