//! The sinks' storage layers (`kafka-eos-postgres`, `kafka-eos-redis`) against real
//! PostgreSQL and Redis servers that the test kit starts (`kafka_eos_testkit::postgres`,
//! `::redis`): one shared server of each for the binary, plus private ones for the tests
//! that kill their server; `pipeline` runs whole pipelines into them on the real broker.
//! A server that cannot start fails the test: a skipped test would look green.

mod outbox;
mod pipeline;
mod postgres;
mod redis;
