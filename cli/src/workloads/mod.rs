//! Complete stateful workloads, shared by the examples, the integration tests and the chaos
//! suite: each has a generator of realistic input, its pipeline, and an independent batch
//! recomputation from the raw input that the streamed result must match.

pub mod card_velocity;
pub mod financial_close;
