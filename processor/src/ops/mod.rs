//! Operations endpoints and logging set-up, each behind its own feature:
//!
//! - `ops-server`: [`PipelineBuilder::ops_address`](crate::PipelineBuilder::ops_address)
//!   serves Prometheus `/metrics` and `/health` ([`crate::health`]) on the Tokio runtime that
//!   called `run`. The server only reads shared state, so a stuck partition never stalls a
//!   scrape. `/health` answers 200 with the report while every assigned partition is
//!   healthy, 503 otherwise. It also serves `GET /state/<store>/<key>`, the committed value
//!   of a key of the stores declared with `PipelineBuilder::serve_store` ([`crate::query`]).
//! - `logging`: [`init_tracing`], a `tracing` subscriber for applications that have none.
//!
//! **Metrics.** kafka-eos records through the `metrics` facade and installs nothing unless
//! asked: without a recorder the calls cost next to nothing. The first pipeline with an ops
//! address installs a Prometheus recorder as the process's global `metrics` recorder (the
//! one global side effect, and only on request); later pipelines share it. If the
//! application already installed its own recorder, the metrics go there and `/metrics`
//! says so (503).

#[cfg(feature = "ops-server")]
mod server;
#[cfg(feature = "ops-server")]
pub(crate) use server::serve;

/// Installs a `tracing` subscriber for applications that have none: filtered by `RUST_LOG`
/// (default `kafka_eos=info`), human-readable or, with `json`, one JSON object per line with
/// the current span (pipeline, partition, transactional.id) on every event. Colours only
/// when standard output is a terminal, so log files hold no escape codes. Keys and values
/// of records are never logged above TRACE. Does nothing if a subscriber is installed.
#[cfg(feature = "logging")]
pub fn init_tracing(json: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("kafka_eos=info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(std::io::stdout().is_terminal());
    let _ = if json { builder.json().with_current_span(true).try_init() } else { builder.try_init() };
}
