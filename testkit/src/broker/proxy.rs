//! A fault-injecting TCP proxy in front of each broker: network faults on loopback.
//!
//! # Where it sits
//! With [`ClusterConfig::fault_proxy`](super::ClusterConfig::fault_proxy), every node gets a
//! third listener, `CLIENT`, which *advertises the proxy's port* instead of its own. A client
//! bootstraps through the proxy, and the metadata it gets back names the proxy ports again, so
//! every connection of every client goes through here. Inter-broker replication, controller
//! traffic and the harness's readiness probe stay on the direct `PLAINTEXT` listener. Only
//! 127.0.0.1 is ever listened on or connected to.
//!
//! # Faults, per node, at run time
//! | call | effect |
//! |---|---|
//! | [`delay`](FaultProxy::delay) / [`jitter`](FaultProxy::jitter) | every request waits this long (or a random time in the range) before it is forwarded; order is kept |
//! | [`blackhole`](FaultProxy::blackhole) | bytes in both directions, on existing and new connections, are held (connections stay open) |
//! | [`hold_next`](FaultProxy::hold_next) | the next `count` connections that send a request of one of these API keys are held from that request on, both directions (a held EndTxn, a held Produce) |
//! | [`cut_on`](FaultProxy::cut_on) | the next connection that sends such a request is closed (before or after forwarding it), and the node refuses connections until healed |
//! | [`cut`](FaultProxy::cut) | existing connections are closed (FIN) and new ones closed at once, until healed |
//! | [`reset`](FaultProxy::reset) | existing connections are reset (RST); new ones pass |
//! | [`heal`](FaultProxy::heal) | clears every fault of the node; held bytes are released, in order |
//!
//! Held bytes are never dropped: [`heal`](FaultProxy::heal) releases them, in order, also on a
//! connection the client has closed meanwhile (the request then reaches the broker after the
//! client gave up on it: the delayed-request hazard of the classic transaction protocol).
//!
//! # How
//! Plain threads, no async runtime: an accept thread per node, and per connection a reader and
//! a writer per direction, joined by a channel (so a delay delays each request, not the
//! connection's throughput). Requests (client to broker) are read whole, as Kafka frames
//! (4-byte length, then the header with the API key), so faults can aim at one kind of
//! request; responses are copied as they come. Writers wait at a gate on the node's state:
//! nothing passes while the node is blackholed or the connection is held.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Kafka API keys the suite aims at (see Kafka's `ApiKeys`).
pub mod api {
    /// Produce.
    pub const PRODUCE: i16 = 0;
    /// Consumer offset commit.
    pub const OFFSET_COMMIT: i16 = 8;
    /// Consumer offset fetch.
    pub const OFFSET_FETCH: i16 = 9;
    /// FindCoordinator.
    pub const FIND_COORDINATOR: i16 = 10;
    /// JoinGroup.
    pub const JOIN_GROUP: i16 = 11;
    /// Heartbeat.
    pub const HEARTBEAT: i16 = 12;
    /// LeaveGroup.
    pub const LEAVE_GROUP: i16 = 13;
    /// SyncGroup.
    pub const SYNC_GROUP: i16 = 14;
    /// InitProducerId.
    pub const INIT_PRODUCER_ID: i16 = 22;
    /// AddPartitionsToTxn.
    pub const ADD_PARTITIONS_TO_TXN: i16 = 24;
    /// AddOffsetsToTxn.
    pub const ADD_OFFSETS_TO_TXN: i16 = 25;
    /// EndTxn: the commit or abort of a transaction.
    pub const END_TXN: i16 = 26;
    /// TxnOffsetCommit.
    pub const TXN_OFFSET_COMMIT: i16 = 28;
    /// Every request a consumer sends to its group coordinator.
    pub const GROUP: [i16; 6] = [OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP];
}

/// Largest request frame accepted (Kafka's default `socket.request.max.bytes` is 100 MiB).
const MAX_FRAME: usize = 100 * 1024 * 1024;

/// What a request trigger does to the connection that sent the matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRequest {
    /// Hold the connection from this request on (both directions) until healed.
    Hold,
    /// Forward the request, then close the connection; refuse new ones until healed (the
    /// broker may act on it, the client never hears).
    CutAfter,
    /// Close the connection with an RST without forwarding the request; refuse new ones
    /// until healed (the broker never sees it).
    ResetBefore,
}

#[derive(Debug, Clone)]
struct Trigger {
    apis: Vec<i16>,
    /// Only requests that carry a `transactional.id` (Produce: a transactional producer's).
    transactional_only: bool,
    remaining: u32,
    action: OnRequest,
}

/// One node's fault state.
#[derive(Debug, Default)]
struct Faults {
    /// Added latency per request: a uniform draw from `[lo, hi]`.
    latency: Option<(Duration, Duration)>,
    blackhole: bool,
    /// Close new connections at once.
    refuse: bool,
    triggers: Vec<Trigger>,
    rng: u64,
}

/// Counters of one node, for tests and notes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Requests forwarded.
    pub requests: u64,
    /// Connections held by a trigger.
    pub held: u64,
    /// Connections closed or reset by a fault.
    pub cut: u64,
}

struct Conn {
    client: TcpStream,
    upstream: TcpStream,
    /// Held by a trigger: nothing passes until healed.
    held: AtomicBool,
    /// Responses are dropped (a request was forwarded just before a cut).
    mute: AtomicBool,
    closed: AtomicBool,
}

impl Conn {
    /// Closes both sides; with `rst`, the client gets an RST instead of a FIN (once the last
    /// descriptor of its socket is closed, which the threads do as they see `closed`).
    fn close(&self, rst: bool) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if rst {
            set_linger_zero(&self.client);
            let _ = self.client.shutdown(Shutdown::Read);
        } else {
            let _ = self.client.shutdown(Shutdown::Both);
        }
        let _ = self.upstream.shutdown(Shutdown::Both);
    }
}

/// `SO_LINGER` 0: closing the socket then sends a RST instead of a FIN.
fn set_linger_zero(s: &TcpStream) {
    let linger = nix::libc::linger { l_onoff: 1, l_linger: 0 };
    let _ = nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::Linger, &linger);
}

struct Node {
    id: i32,
    listen: SocketAddr,
    upstream: Mutex<Option<SocketAddr>>,
    faults: Mutex<Faults>,
    cv: Condvar,
    conns: Mutex<Vec<Arc<Conn>>>,
    stop: AtomicBool,
    connections: AtomicU64,
    requests: AtomicU64,
    held: AtomicU64,
    cut: AtomicU64,
}

impl Node {
    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn conns(&self) -> MutexGuard<'_, Vec<Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn change(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.faults());
        self.cv.notify_all();
    }
    fn close_all(&self, rst: bool) {
        let conns: Vec<Arc<Conn>> = self.conns().drain(..).collect();
        self.cut.fetch_add(conns.len() as u64, Ordering::Relaxed);
        for c in conns {
            c.close(rst);
        }
        self.cv.notify_all();
    }
    /// Waits until `conn` may pass bytes (not held, not blackholed, `due` reached); `false`
    /// once the connection is closed.
    fn gate(&self, conn: &Conn, due: Instant) -> bool {
        let mut f = self.faults();
        loop {
            if conn.closed.load(Ordering::SeqCst) || self.stop.load(Ordering::SeqCst) {
                return false;
            }
            let now = Instant::now();
            let blocked = f.blackhole || conn.held.load(Ordering::SeqCst);
            if !blocked && now >= due {
                return true;
            }
            let wait = if blocked { Duration::from_millis(200) } else { due - now };
            f = self.cv.wait_timeout(f, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// A proxy per broker node; see the [module docs](self). Dropping it closes every listener
/// and connection.
pub struct FaultProxy {
    nodes: BTreeMap<i32, Arc<Node>>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.nodes.iter().map(|(id, n)| (id, n.listen))).finish()
    }
}

impl FaultProxy {
    /// Listens on a free loopback port for every node id; where each forwards to is set
    /// with [`FaultProxy::set_upstream`] (a connection before that is closed at once).
    pub fn bind(node_ids: &[i32]) -> std::io::Result<FaultProxy> {
        let mut nodes = BTreeMap::new();
        for (i, &id) in node_ids.iter().enumerate() {
            let listener = TcpListener::bind(("127.0.0.1", 0))?;
            let node = Arc::new(Node {
                id,
                listen: listener.local_addr()?,
                upstream: Mutex::new(None),
                faults: Mutex::new(Faults { rng: 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1), ..Default::default() }),
                cv: Condvar::new(),
                conns: Mutex::new(Vec::new()),
                stop: AtomicBool::new(false),
                connections: AtomicU64::new(0),
                requests: AtomicU64::new(0),
                held: AtomicU64::new(0),
                cut: AtomicU64::new(0),
            });
            let n = node.clone();
            std::thread::Builder::new().name(format!("proxy-accept-{id}")).spawn(move || accept_loop(n, listener))?;
            nodes.insert(id, node);
        }
        Ok(FaultProxy { nodes })
    }

    /// Forwards `node`'s connections to `addr` (a loopback address).
    pub fn set_upstream(&self, node: i32, addr: SocketAddr) {
        assert!(addr.ip().is_loopback(), "the fault proxy only connects to loopback");
        if let Some(n) = self.nodes.get(&node) {
            *n.upstream.lock().unwrap_or_else(|e| e.into_inner()) = Some(addr);
        }
    }

    /// The port clients use for `node`.
    pub fn port(&self, node: i32) -> Option<u16> {
        self.nodes.get(&node).map(|n| n.listen.port())
    }

    /// Node ids, ascending.
    pub fn node_ids(&self) -> Vec<i32> {
        self.nodes.keys().copied().collect()
    }

    fn node(&self, node: i32) -> &Node {
        self.nodes.get(&node).unwrap_or_else(|| panic!("the fault proxy has no node {node}"))
    }

    /// Every request to `node` waits `d` before it is forwarded.
    pub fn delay(&self, node: i32, d: Duration) {
        self.jitter(node, d, d);
    }

    /// Every request to `node` waits a random time in `[lo, hi]` (order is kept: a request
    /// never overtakes an earlier one of its connection).
    pub fn jitter(&self, node: i32, lo: Duration, hi: Duration) {
        tracing::info!(node, ?lo, ?hi, "fault proxy: latency");
        self.node(node).change(|f| f.latency = Some((lo.min(hi), hi.max(lo))));
    }

    /// Holds every byte to and from `node`, on existing and new connections, until healed.
    pub fn blackhole(&self, node: i32) {
        tracing::info!(node, "fault proxy: blackhole");
        self.node(node).change(|f| f.blackhole = true);
    }

    /// Holds the next `count` connections to `node` that send a request with one of `apis`
    /// (with `transactional_only`, only a request carrying a transactional.id, which only
    /// Produce is checked for): that request and everything after it, in both directions,
    /// until healed.
    pub fn hold_next(&self, node: i32, apis: &[i16], transactional_only: bool, count: u32) {
        tracing::info!(node, ?apis, transactional_only, count, "fault proxy: hold the next matching request");
        self.arm(node, apis, transactional_only, count, OnRequest::Hold);
    }

    /// Closes the next connection to `node` that sends a request of one of `apis`, as
    /// `action` says, and refuses new connections from then until healed.
    pub fn cut_on(&self, node: i32, apis: &[i16], action: OnRequest) {
        tracing::info!(node, ?apis, ?action, "fault proxy: cut on the next matching request");
        self.arm(node, apis, false, 1, action);
    }

    fn arm(&self, node: i32, apis: &[i16], transactional_only: bool, count: u32, action: OnRequest) {
        let t = Trigger { apis: apis.to_vec(), transactional_only, remaining: count, action };
        self.node(node).change(|f| f.triggers.push(t));
    }

    /// Closes every connection to `node` (FIN) and closes new ones at once, until healed.
    pub fn cut(&self, node: i32) {
        tracing::info!(node, "fault proxy: cut");
        let n = self.node(node);
        n.change(|f| f.refuse = true);
        n.close_all(false);
    }

    /// Resets every connection to `node` (RST); new connections pass.
    pub fn reset(&self, node: i32) {
        tracing::info!(node, "fault proxy: reset");
        self.node(node).close_all(true);
    }

    /// Clears every fault of `node`: latency, blackhole, refusal, armed triggers; held
    /// connections are released, their bytes forwarded in order.
    pub fn heal(&self, node: i32) {
        tracing::info!(node, "fault proxy: heal");
        let n = self.node(node);
        let mut f = n.faults();
        (f.latency, f.blackhole, f.refuse) = (None, false, false);
        f.triggers.clear();
        for c in n.conns().iter() {
            c.held.store(false, Ordering::SeqCst);
        }
        drop(f);
        n.cv.notify_all();
    }

    /// Heals every node.
    pub fn heal_all(&self) {
        for id in self.node_ids() {
            self.heal(id);
        }
    }

    /// Whether a trigger of `node` is still armed (its request has not come yet).
    pub fn armed(&self, node: i32) -> bool {
        !self.node(node).faults().triggers.is_empty()
    }

    /// `node`'s counters.
    pub fn stats(&self, node: i32) -> ProxyStats {
        let n = self.node(node);
        ProxyStats {
            connections: n.connections.load(Ordering::Relaxed),
            requests: n.requests.load(Ordering::Relaxed),
            held: n.held.load(Ordering::Relaxed),
            cut: n.cut.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for n in self.nodes.values() {
            n.stop.store(true, Ordering::SeqCst);
            n.close_all(false);
            // Wake the accept thread.
            let _ = TcpStream::connect_timeout(&n.listen, Duration::from_millis(200));
        }
    }
}

fn accept_loop(node: Arc<Node>, listener: TcpListener) {
    for stream in listener.incoming() {
        if node.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = stream else { continue };
        node.connections.fetch_add(1, Ordering::Relaxed);
        let upstream = *node.upstream.lock().unwrap_or_else(|e| e.into_inner());
        if node.faults().refuse {
            node.cut.fetch_add(1, Ordering::Relaxed);
            continue; // dropped: closed at once
        }
        let Some(upstream) = upstream.and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).ok()) else {
            continue; // the broker is down: the client sees its connection closed
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        if let Err(e) = spawn_conn(&node, client, upstream) {
            tracing::warn!(node = node.id, error = %e, "fault proxy: cannot start a connection");
        }
    }
}

/// A unit on its way: when it may go, and the bytes; `None` is the end of the stream.
type Unit = Option<(Instant, Vec<u8>)>;

fn spawn_conn(node: &Arc<Node>, client: TcpStream, upstream: TcpStream) -> std::io::Result<()> {
    let conn = Arc::new(Conn {
        client: client.try_clone()?,
        upstream: upstream.try_clone()?,
        held: AtomicBool::new(false),
        mute: AtomicBool::new(false),
        closed: AtomicBool::new(false),
    });
    node.conns().push(conn.clone());
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new().name(format!("proxy-{}-{name}", node.id)).stack_size(128 * 1024).spawn(f)
    };
    let (req_tx, req_rx) = mpsc::channel::<Unit>();
    let (resp_tx, resp_rx) = mpsc::channel::<Unit>();
    let (n, c, from) = (node.clone(), conn.clone(), client.try_clone()?);
    spawn("req-read", Box::new(move || read_requests(&n, &c, from, &req_tx)))?;
    let (n, c, to) = (node.clone(), conn.clone(), upstream.try_clone()?);
    spawn("req-write", Box::new(move || write_units(&n, &c, to, &req_rx, true)))?;
    let (n, c) = (node.clone(), conn.clone());
    spawn("resp-read", Box::new(move || read_raw(&n, &c, upstream, &resp_tx)))?;
    let (n, c) = (node.clone(), conn);
    spawn("resp-write", Box::new(move || write_units(&n, &c, client, &resp_rx, false)))?;
    Ok(())
}

/// Reads whole request frames, applies the node's triggers and latency, queues them.
fn read_requests(node: &Node, conn: &Arc<Conn>, mut from: TcpStream, tx: &mpsc::Sender<Unit>) {
    loop {
        let mut len = [0u8; 4];
        if from.read_exact(&mut len).is_err() {
            break;
        }
        let size = i32::from_be_bytes(len);
        let Some(size) = usize::try_from(size).ok().filter(|s| (4..=MAX_FRAME).contains(s)) else {
            conn.close(false);
            break;
        };
        let mut frame = vec![0u8; 4 + size];
        frame[..4].copy_from_slice(&len);
        if from.read_exact(&mut frame[4..]).is_err() {
            break;
        }
        let api_key = i16::from_be_bytes([frame[4], frame[5]]);
        let (due, fired) = {
            let mut f = node.faults();
            let fired =
                match f.triggers.iter().position(|t| {
                    t.apis.contains(&api_key) && (!t.transactional_only || has_transactional_id(&frame[4..]))
                }) {
                    Some(i) => {
                        let t = &mut f.triggers[i];
                        t.remaining = t.remaining.saturating_sub(1);
                        let action = t.action;
                        if t.remaining == 0 {
                            f.triggers.remove(i);
                        }
                        if action != OnRequest::Hold {
                            f.refuse = true;
                        }
                        Some(action)
                    }
                    None => None,
                };
            let delay = match f.latency {
                Some((lo, hi)) if hi > lo => {
                    f.rng = splitmix(f.rng);
                    lo + (hi - lo).mul_f64((f.rng >> 11) as f64 / (1u64 << 53) as f64)
                }
                Some((lo, _)) => lo,
                None => Duration::ZERO,
            };
            (Instant::now() + delay, fired)
        };
        match fired {
            Some(OnRequest::Hold) => {
                tracing::info!(node = node.id, api_key, "fault proxy: holding a connection");
                node.held.fetch_add(1, Ordering::Relaxed);
                conn.held.store(true, Ordering::SeqCst);
            }
            Some(OnRequest::ResetBefore) => {
                tracing::info!(node = node.id, api_key, "fault proxy: resetting a connection before its request");
                node.cut.fetch_add(1, Ordering::Relaxed);
                node.conns().retain(|c| !Arc::ptr_eq(c, conn));
                conn.close(true);
                node.cv.notify_all();
                break;
            }
            Some(OnRequest::CutAfter) => {
                tracing::info!(node = node.id, api_key, "fault proxy: cutting a connection after its request");
                node.cut.fetch_add(1, Ordering::Relaxed);
                conn.mute.store(true, Ordering::SeqCst);
                let _ = tx.send(Some((due, frame)));
                let _ = tx.send(None);
                // The writer closes the connection once the request is out (see write_units).
                return;
            }
            None => {}
        }
        if tx.send(Some((due, frame))).is_err() {
            break;
        }
        node.requests.fetch_add(1, Ordering::Relaxed);
    }
    let _ = tx.send(None);
}

/// Copies the broker's responses as they come.
fn read_raw(node: &Node, conn: &Conn, mut from: TcpStream, tx: &mpsc::Sender<Unit>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send(Some((Instant::now(), buf[..n].to_vec()))).is_err() {
                    break;
                }
            }
        }
    }
    let _ = (node, conn);
    let _ = tx.send(None);
}

/// Writes queued units when the gate lets them through. At the end of the stream (the
/// reader's peer closed, or a cut after a request) everything queued is still delivered —
/// a held request reaches the broker after its client gave up — then the connection closes.
fn write_units(node: &Node, conn: &Arc<Conn>, mut to: TcpStream, rx: &mpsc::Receiver<Unit>, requests: bool) {
    while let Ok(unit) = rx.recv() {
        let Some((due, bytes)) = unit else {
            if requests {
                // Give the broker a moment to read the last request before the FIN.
                let f = node.faults();
                drop(node.cv.wait_timeout(f, Duration::from_millis(500)));
            }
            break;
        };
        if !node.gate(conn, due) {
            break;
        }
        if !requests && conn.mute.load(Ordering::SeqCst) {
            continue;
        }
        if let Err(e) = to.write_all(&bytes) {
            if e.kind() != ErrorKind::BrokenPipe {
                tracing::debug!(node = node.id, error = %e, "fault proxy: write failed");
            }
            break;
        }
    }
    node.conns().retain(|c| !Arc::ptr_eq(c, conn));
    conn.close(false);
    node.cv.notify_all();
}

/// Whether a request (frame without its length) carries a non-null `transactional_id` as
/// the first field of its body: Produce v3 and later. Header: api_key, api_version,
/// correlation_id, client_id (nullable int16 string), then tagged fields in flexible
/// versions (Produce v9+), where the body's strings are compact (unsigned varint length+1).
pub(crate) fn has_transactional_id(req: &[u8]) -> bool {
    let rd16 = |at: usize| req.get(at..at + 2).map(|b| i16::from_be_bytes([b[0], b[1]]));
    let (Some(api), Some(version)) = (rd16(0), rd16(2)) else { return false };
    if api != api::PRODUCE || version < 3 {
        return false;
    }
    let mut at = 8;
    let Some(client_id) = rd16(at) else { return false };
    at += 2 + usize::try_from(client_id).unwrap_or(0);
    if version >= 9 {
        // Tagged fields of the header: a count, then (tag, size, bytes) each.
        let Some((count, n)) = uvarint(&req[at.min(req.len())..]) else { return false };
        at += n;
        for _ in 0..count {
            let Some((_, n)) = uvarint(&req[at.min(req.len())..]) else { return false };
            at += n;
            let Some((size, n)) = uvarint(&req[at.min(req.len())..]) else { return false };
            at += n + size as usize;
        }
        matches!(uvarint(&req[at.min(req.len())..]), Some((len, _)) if len > 0)
    } else {
        matches!(rd16(at), Some(len) if len >= 0)
    }
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
