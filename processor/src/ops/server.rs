//! The `/metrics` and `/health` server (feature `ops-server`).

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::error::{Error, Result};

/// The process-wide Prometheus handle, or why there is none.
fn prometheus() -> &'static std::result::Result<PrometheusHandle, String> {
    static HANDLE: OnceLock<std::result::Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| format!("another metrics recorder is installed ({e}); read kafka-eos metrics from it"))
    })
}

/// Binds `addr` and serves `/metrics`, `/health` and the served stores' `/state`
/// ([`crate::query`]) until the returned task is aborted.
pub(crate) async fn serve(
    addr: SocketAddr,
    handle: crate::ShutdownHandle,
    query: crate::query::StateQuery,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let prom = prometheus();
    let app = Router::new()
        .route(
            "/metrics",
            get(move || async move {
                match prom {
                    Ok(h) => {
                        h.run_upkeep();
                        (StatusCode::OK, h.render())
                    }
                    Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.clone()),
                }
            }),
        )
        .route(
            "/health",
            get(move || async move {
                let report = handle.health();
                (if report.healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, Json(report))
            }),
        )
        .merge(crate::query::http::router(query));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Config(format!("cannot listen on the ops address {addr}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| Error::Internal(e.to_string()))?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "ops server stopped");
        }
    });
    tracing::info!(address = %bound, "serving /metrics, /health and /state");
    Ok((bound, task))
}
