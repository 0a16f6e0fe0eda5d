//! Metrics through the `metrics` crate; install any recorder (e.g. a Prometheus exporter)
//! to collect them. Names follow Kafka Streams' where one exists.

use std::time::Duration;

use crate::error::ErrorClass;

/// `kafka_eos_commit_total`, `kafka_eos_records_per_transaction`,
/// `kafka_eos_transaction_seconds`: one committed cycle.
pub(crate) fn cycle_committed(app: &str, records: usize, elapsed: Duration) {
    let app = app.to_string();
    metrics::counter!("kafka_eos_commit_total", "application_id" => app.clone()).increment(1);
    metrics::histogram!("kafka_eos_records_per_transaction", "application_id" => app.clone()).record(records as f64);
    metrics::histogram!("kafka_eos_transaction_seconds", "application_id" => app).record(elapsed.as_secs_f64());
}

/// `kafka_eos_cycle_failures_total{class}`: a cycle failed with a Kafka error of this class.
pub(crate) fn cycle_failed(app: &str, class: ErrorClass) {
    metrics::counter!("kafka_eos_cycle_failures_total", "application_id" => app.to_string(), "class" => class.as_str())
        .increment(1);
}
