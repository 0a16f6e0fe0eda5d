//! Complete stateful workloads, shared by the examples, the integration tests and the chaos
//! suite: each has a generator of realistic input, its pipeline, and an independent batch
//! recomputation from the raw input that the streamed result must match.

pub mod card_velocity;
pub mod financial_close;

/// A record to produce: (partition, key, value).
pub type InputRecordSpec = (Option<i32>, Vec<u8>, Vec<u8>);

/// SplitMix64: the generators' deterministic mix of a record's index into its fields.
pub(crate) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
