//! # kafka-eos-redis: an effectively-once Redis counter sink
//!
//! Counters in Redis hashes (`HINCRBY key field delta`), each input event applied **once
//! within a time window**: every event carries an id, and its increments are applied
//! together with a dedup key `<namespace>:dedup:<id>` that expires after a TTL, in one
//! atomic step. An event whose dedup key still exists changes nothing, so replays of
//! at-least-once delivery (a crash before the consumer committed its offsets, a
//! rebalance) are no-ops.
//!
//! ```text
//! per batch   apply(events) -> one EVALSHA: for each event,
//!                              SET <ns>:dedup:<id> 1 NX PX <ttl>; if it was set, HINCRBY each increment
//! ```
//!
//! # The window
//!
//! Exactness holds while the dedup key lives: **a replay arriving within the TTL of the
//! first application is a no-op; after it, the event counts again.** Choose the TTL longer
//! than the longest time an event can take to be replayed: the consumer's commit interval,
//! plus failure detection (session timeout), rebalance, restart and catching up on the lag:
//! minutes for a healthy pipeline, so an hour or a day is common. A pipeline that is down
//! for longer than the TTL and then replays from older committed offsets over-counts the
//! replayed events whose keys expired. Memory is one key per event within the TTL (about
//! 60–100 bytes each with a short id); per-batch ids cost less but are only correct when a
//! replayed batch has the same id *and* the same events (see `docs/sinks.md`).
//!
//! Redis itself must keep what it acknowledged: with `appendonly yes` and `appendfsync
//! always` a Redis crash loses nothing; with `everysec` a machine crash can lose the last
//! second — increments and their dedup keys together (the script's effects are written
//! to the append-only file as one transaction), so those events are neither counted nor
//! marked, and the Kafka offsets committed after them make them lost, not doubled.
//!
//! # Why a Lua script and not MULTI/EXEC
//!
//! The step is conditional: the increments depend on whether the dedup key was new.
//! `MULTI`/`EXEC` queues commands without seeing their results, so the condition needs
//! `WATCH` on every dedup key, a read, then the transaction, and a retry whenever a watched
//! key changed: three round trips at best, livelock-prone under contention. A script runs
//! atomically on the server in one round trip (`EVALSHA`, with the script loaded again
//! automatically after a Redis restart emptied its script cache) and nothing else runs in
//! between.
//!
//! A script is atomic in isolation but *not* all-or-nothing: Redis does not undo a
//! script's earlier writes when a later command fails. So the script first checks every
//! target (each key is a hash or absent, each field absent or an integer) and only then
//! writes; the writes that follow cannot fail on their data. It is declared with a
//! `#!lua` shebang, so Redis refuses it *before* it starts when the server is out of
//! memory (`maxmemory`), rather than in the middle. Not checked: an increment that would
//! overflow a 64-bit counter (Lua sees numbers as doubles).
//!
//! # Why the `redis` crate
//!
//! `redis` (redis-rs, maintained under the redis-rs organisation) is the maintained,
//! complete async client: multiplexed connections, [`Script`](redis::Script) with
//! `EVALSHA`-then-`EVAL` fallback, pipelines, and a
//! [`ConnectionManager`] that reconnects after a Redis
//! restart — which the chaos scenarios need. `fred` is the alternative; it brings more
//! (pools, cluster routing, its own runtime tasks) than a sink that sends one script per
//! batch uses.
//!
//! Redis Cluster: all keys of one script call must hash to one slot; give the counters and
//! the namespace one hash tag (`{page_views}`), or split batches per slot (not done here).
#![warn(missing_docs)]

use std::time::Duration;

/// The client crate, re-exported for applications and tests.
pub use redis;
use redis::aio::{ConnectionLike, ConnectionManager};

/// The script (see the crate docs). KEYS: the events' dedup keys, then the distinct hash
/// keys. ARGV: ttl in ms, number of events, then per event its number of increments and,
/// per increment, the 1-based index of its hash key among the hash keys, the field and the
/// delta. Returns the number of events applied.
const SCRIPT: &str = r#"#!lua
local ttl = ARGV[1]
local n_events = tonumber(ARGV[2])
local checked = {}
local pos = 3
for e = 1, n_events do
  local n = tonumber(ARGV[pos]); pos = pos + 1
  for i = 1, n do
    local key = KEYS[n_events + tonumber(ARGV[pos])]
    local field = ARGV[pos + 1]
    if checked[key] == nil then
      local t = redis.call('TYPE', key)['ok']
      if t ~= 'hash' and t ~= 'none' then
        return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. t .. ', not a hash: nothing applied')
      end
      checked[key] = true
    end
    local cur = redis.call('HGET', key, field)
    if cur and not string.match(cur, '^%-?%d+$') then
      return redis.error_reply('NOTINT ' .. key .. ' ' .. field .. ' is not an integer: nothing applied')
    end
    pos = pos + 3
  end
end
local applied = 0
pos = 3
for e = 1, n_events do
  local n = tonumber(ARGV[pos]); pos = pos + 1
  local fresh = redis.call('SET', KEYS[e], '1', 'NX', 'PX', ttl)
  if fresh then
    applied = applied + 1
    for i = 1, n do
      redis.call('HINCRBY', KEYS[n_events + tonumber(ARGV[pos])], ARGV[pos + 1], ARGV[pos + 2])
      pos = pos + 3
    end
  else
    pos = pos + 3 * n
  end
end
return applied
"#;

/// One counter update: `HINCRBY key field delta`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    /// The hash.
    pub key: String,
    /// The field in the hash.
    pub field: String,
    /// What to add (negative to subtract).
    pub delta: i64,
}

impl Increment {
    /// `HINCRBY key field delta`.
    pub fn new(key: impl Into<String>, field: impl Into<String>, delta: i64) -> Self {
        Increment { key: key.into(), field: field.into(), delta }
    }
}

/// An input event's effect: its increments, applied once per id within the TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The dedup id: the event's own id, or its input position ([`event_id`]).
    pub id: String,
    /// Its increments (none is allowed: the event is then only marked).
    pub increments: Vec<Increment>,
}

impl Event {
    /// An event with id `id` and no increments yet.
    pub fn new(id: impl Into<String>) -> Self {
        Event { id: id.into(), increments: Vec::new() }
    }

    /// Adds `HINCRBY key field delta`.
    pub fn incr(mut self, key: impl Into<String>, field: impl Into<String>, delta: i64) -> Self {
        self.increments.push(Increment::new(key, field, delta));
        self
    }
}

/// The dedup id of an input record by its position: `<topic>/<partition>/<offset>`. Unique
/// per record and the same on every replay — unlike an id made up while processing.
pub fn event_id(topic: &str, partition: i32, offset: i64) -> String {
    format!("{topic}/{partition}/{offset}")
}

/// What [`RedisCounterSink::apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// Events whose increments were applied.
    pub applied: usize,
    /// Events skipped because their dedup key existed (replays within the TTL).
    pub duplicates: usize,
}

/// Errors of the Redis sink.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisSinkError {
    /// Redis refused the batch or the connection failed. A refusal by the script's checks
    /// (`WRONGTYPE`, `NOTINT`) or by `maxmemory` applied nothing. A connection failure
    /// leaves the outcome unknown — retrying the same events is safe within the TTL, which
    /// is the point of the dedup keys.
    #[error("{context}: {source}")]
    Redis {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// The batch cannot be sent as given.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

/// Counter updates with per-event dedup keys (see the crate docs).
#[derive(Clone)]
pub struct RedisCounterSink<C = ConnectionManager> {
    con: C,
    namespace: String,
    ttl: Duration,
    script: redis::Script,
    /// Whether a pipeline's writes deduplicate ([`without_dedup`](Self::without_dedup)).
    dedup: bool,
}

impl<C> std::fmt::Debug for RedisCounterSink<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCounterSink").field("namespace", &self.namespace).field("ttl", &self.ttl).finish()
    }
}

impl RedisCounterSink<ConnectionManager> {
    /// Connects to `url` (`redis://host:port/db`) with a [`ConnectionManager`], which
    /// reconnects after a Redis restart.
    pub async fn connect(url: &str, namespace: &str, ttl: Duration) -> Result<Self, RedisSinkError> {
        let ctx = || format!("connecting to Redis at {url}");
        let client = redis::Client::open(url).map_err(|source| RedisSinkError::Redis { context: ctx(), source })?;
        let con =
            ConnectionManager::new(client).await.map_err(|source| RedisSinkError::Redis { context: ctx(), source })?;
        Self::new(con, namespace, ttl)
    }
}

impl<C: ConnectionLike + Send> RedisCounterSink<C> {
    /// A sink over an existing connection. Dedup keys are `<namespace>:dedup:<id>` and live
    /// `ttl` (at least 1 ms).
    pub fn new(con: C, namespace: &str, ttl: Duration) -> Result<Self, RedisSinkError> {
        if ttl.as_millis() == 0 {
            return Err(RedisSinkError::InvalidBatch("the dedup TTL must be at least 1 ms".into()));
        }
        Ok(RedisCounterSink {
            con,
            namespace: namespace.to_string(),
            ttl,
            script: redis::Script::new(SCRIPT),
            dedup: true,
        })
    }

    /// As a pipeline's sink, writes with [`apply_without_dedup`](Self::apply_without_dedup):
    /// at-least-once, a replay counts again. Default: with dedup (effectively-once within the
    /// TTL), which costs 3–5.5× in throughput and a key per input record for the TTL
    /// (`docs/sinks.md`).
    pub fn without_dedup(mut self) -> Self {
        self.dedup = false;
        self
    }

    /// The dedup key of event id `id`.
    pub fn dedup_key(&self, id: &str) -> String {
        format!("{}:dedup:{id}", self.namespace)
    }

    /// The exactness window.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The connection.
    pub fn connection(&mut self) -> &mut C {
        &mut self.con
    }

    /// **Per batch, effectively-once:** applies each event's increments unless its dedup key
    /// exists, and sets the key with the TTL — all events in one atomic script call. Within
    /// one call, an id that appears twice is applied once.
    pub async fn apply(&mut self, events: &[Event]) -> Result<Applied, RedisSinkError> {
        if events.is_empty() {
            return Ok(Applied::default());
        }
        let mut hash_keys: Vec<&str> = Vec::new();
        let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut inv = self.script.prepare_invoke();
        for e in events {
            inv.key(self.dedup_key(&e.id));
        }
        inv.arg(self.ttl.as_millis().min(i64::MAX as u128) as i64).arg(events.len());
        for e in events {
            inv.arg(e.increments.len());
            for inc in &e.increments {
                let i = *index.entry(&inc.key).or_insert_with(|| {
                    hash_keys.push(&inc.key);
                    hash_keys.len()
                });
                inv.arg(i).arg(&inc.field).arg(inc.delta);
            }
        }
        for k in &hash_keys {
            inv.key(*k);
        }
        let applied: usize = inv.invoke_async(&mut self.con).await.map_err(|source| RedisSinkError::Redis {
            context: format!("applying {} events with dedup", events.len()),
            source,
        })?;
        Ok(Applied { applied, duplicates: events.len() - applied })
    }

    /// **At-least-once baseline:** the same increments as one pipeline of `HINCRBY`s, no
    /// dedup and no atomicity — a replay counts again.
    pub async fn apply_without_dedup(&mut self, events: &[Event]) -> Result<(), RedisSinkError> {
        let mut pipe = redis::pipe();
        for inc in events.iter().flat_map(|e| &e.increments) {
            pipe.hincr(&inc.key, &inc.field, inc.delta).ignore();
        }
        pipe.query_async::<()>(&mut self.con).await.map_err(|source| RedisSinkError::Redis {
            context: format!("applying {} events without dedup", events.len()),
            source,
        })
    }
}

mod pipeline;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_keys() {
        assert_eq!(event_id("views", 3, 42), "views/3/42");
        let e = Event::new("a").incr("h", "f", 2).incr("h", "g", -1);
        assert_eq!(e.increments.len(), 2);
        assert!(SCRIPT.starts_with("#!lua\n"), "the shebang makes Redis check maxmemory before the script runs");
    }
}
