//! The handle that stops a running pipeline from anywhere and reads its counters and health.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::stats::{Stats, Summary};
use crate::health::{Health, HealthReport};

/// Stops a running pipeline gracefully from anywhere (cheap to clone), and reads its
/// counters and health while it runs.
#[derive(Clone)]
pub struct ShutdownHandle {
    pub(super) inner: Arc<HandleInner>,
}

pub(super) struct HandleInner {
    flag: AtomicBool,
    stats: Stats,
    health: Health,
    pub(super) ops_address: OnceLock<SocketAddr>,
}

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownHandle")
            .field("shutdown", &self.is_shutdown())
            .field("summary", &self.summary())
            .finish()
    }
}

impl ShutdownHandle {
    pub(super) fn new(health_threshold: Duration) -> ShutdownHandle {
        ShutdownHandle {
            inner: Arc::new(HandleInner {
                flag: AtomicBool::new(false),
                stats: Stats::default(),
                health: Health::new(health_threshold),
                ops_address: OnceLock::new(),
            }),
        }
    }

    /// Asks the pipeline to stop: every task commits its collected batch, the consumer
    /// leaves the group, and `run` returns. Idempotent.
    pub fn shutdown(&self) {
        self.inner.flag.store(true, Ordering::SeqCst);
    }

    /// Whether shutdown was requested.
    pub fn is_shutdown(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// The counters so far.
    pub fn summary(&self) -> Summary {
        self.inner.stats.summary()
    }

    /// The health report `/health` serves (assignment, last commit age per partition).
    pub fn health(&self) -> HealthReport {
        self.inner.health.report()
    }

    /// The address `/metrics` and `/health` are served on, once bound.
    pub fn ops_address(&self) -> Option<SocketAddr> {
        self.inner.ops_address.get().copied()
    }

    pub(crate) fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    pub(crate) fn health_state(&self) -> &Health {
        &self.inner.health
    }
}
