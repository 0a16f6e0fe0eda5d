//! Scaling out and in: what a membership change costs the partitions of a consumer group.
//!
//! Two runs share the commit-gap analysis of `gaps`:
//! - [`join_third`] (module `join`): two instances in this process, a third joins, under
//!   each rebalance protocol. Shared by the integration test (`tests/it/scale.rs`, which
//!   asserts the targets) and the benchmark (`benches/rebalance.rs`, which prints the
//!   figures of `docs/scaling.md`).
//! - [`study`]: the scale study of `docs/scaling.md` — instances as OS processes going
//!   through a sequence of sizes (1 → 2 → 4 → 2), with their threads, sockets and memory
//!   (`benches/scale_study.rs`).
//! - [`rolling`]: a rolling restart of every instance, with and without static membership:
//!   partition-seconds paused, partitions moved, records restored (also
//!   `benches/scale_study.rs`).
//!
//! # The join run ([`join_third`])
//! Two instances share an input topic while a paced writer puts one record into every
//! partition every 20 ms; once both commit, and `settle` later, a third instance joins;
//! `settle` after its first commit the input stops, the group catches up and the copy is
//! verified exactly once. Every committed transaction is logged with its instant, instance
//! and partitions ([`TransactionEvent::partitions`](kafka_eos::observe::TransactionEvent)).
//! In the window from `settle` before the join to `settle` after the newcomer's first
//! commit:
//! - a partition committed by a single instance, not the newcomer, is **unmoved**: its
//!   longest gap between commits (the window's edges count as commits) is what incremental
//!   rebalancing promises to keep short;
//! - any other partition **moved**: its pause is the gap between its last commit at the
//!   old owner and its first at the new one.

mod gaps;
mod input;
mod join;
pub mod rolling;
pub mod study;

pub use join::{join_third, JoinOptions, JoinReport};
