//! The sinks' storage layers (`kafka-eos-postgres`, `kafka-eos-redis`) against real
//! PostgreSQL and Redis servers that the test kit starts (`kafka_eos_testkit::postgres`,
//! `::redis`): one shared server of each for the binary, plus private ones for the tests
//! that kill their server. No Kafka broker is involved yet (the runtime wiring comes later).
//! A server that cannot start fails the test: a skipped test would look green.

mod postgres;
mod redis;
