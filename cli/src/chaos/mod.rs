//! The chaos suite: exactly-once under crashes, broker failures, rebalances and stalls.
//!
//! "Exactly once" is only worth what survives faults. This module runs real pipelines as
//! separate OS processes — so they can be SIGKILLed, SIGTERMed, SIGSTOPped and restarted
//! like a supervisor would — against a real 3-node Kafka cluster, injects one class of fault
//! per [`Scenario`], and checks the outcome three ways:
//!
//! 1. the **verifier** ([`kafka_eos_testkit::verify`]) over the read_committed output once everything
//!    has caught up: 0 duplicates, exactly the input set, per-partition order kept;
//! 2. a **concurrent read_committed reader** that runs through the whole scenario, as a
//!    downstream consumer would: it must never see an output twice (an origin already seen),
//!    its offsets per partition must only go forward, and everything it saw must still be
//!    there at the end — a record it saw that the final read does not contain (compared by
//!    output partition and offset) is an **aborted read**;
//! 3. for the stall scenario, evidence that every stalled instance was **fenced** when it woke.
//!
//! The shape follows Kafka's own system test for read-process-write transactions
//! (`transactions_test.py`: 3 brokers, replication factor 3, `min.insync.replicas=2`,
//! {clean, hard} × {broker, processor} bounces, a concurrent and a final read_committed
//! consumer) and adds what Jepsen's analyses look for (aborted reads, non-monotonic polls).
//!
//! # Moving parts
//! | module | what |
//! |---|---|
//! | `workload` | what a cell's instances run, and the sink they write to |
//! | `matrix` | the fault matrix: workload × guarantee × fault, and each cell's verdict |
//! | `plan` | the scenarios ([`Scenario`]) and their fault schedules |
//! | `suite` | runs scenarios: cluster, topics, instances, faults, checks |
//! | `fleet` | the instance processes: start, kill, stop, stall, read their status |
//! | `pace` | the virtual clock that paces input and faults together |
//! | `reader` | the concurrent read_committed reader and the final comparison |
//! | `instance` | the body of one instance process (`kafka-eos chaos instance`) |
//! | `delayed` | the timers workload: the copy, its outputs sent by wall-clock timers |
//! | `sink` | the sink scenarios' servers, instance pipelines and checks (PostgreSQL, Redis) |
//! | `subject` | who runs the pipeline: our instances, or the copy on Kafka's Java clients |
//!
//! # Pacing
//! The input is not produced up front: a producer writes it while the scenario runs, paced
//! by a virtual clock that also schedules the faults, so that every fault lands while records
//! are flowing and transactions are open. While a fault takes long to inject (a broker
//! restart), the clock runs on for at most half the gap to the next fault and then waits:
//! a slow fault never leaves the next one hitting an idle pipeline.

mod delayed;
pub(crate) mod fleet;
mod instance;
mod join;
pub mod matrix;
mod net;
mod pace;
mod plan;
mod reader;
mod report;
mod rng;
mod sink;
mod subject;
mod suite;
mod workload;

pub use instance::{describe_instance, run_instance, InstanceConfig};
pub use plan::Scenario;
pub use report::{Anomalies, ScenarioResult, Seen, SuiteReport};
pub use subject::Subject;
pub use suite::{run_cells, run_suite, Progress, SuiteConfig};
