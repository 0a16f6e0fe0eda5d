//! Unit tests of the fault proxy against a small frame-echo server (no Kafka needed).

use super::*;

/// An upstream that records every frame it receives (api key, correlation id, when) and
/// echoes it back.
struct Echo {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<(i16, i32, Instant)>>>,
}

impl Echo {
    fn start() -> Echo {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<(i16, i32, Instant)>>> = Arc::default();
        let g = got.clone();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { continue };
                let g = g.clone();
                std::thread::spawn(move || loop {
                    let mut len = [0u8; 4];
                    if s.read_exact(&mut len).is_err() {
                        return;
                    }
                    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
                    if s.read_exact(&mut body).is_err() {
                        return;
                    }
                    let api = i16::from_be_bytes([body[0], body[1]]);
                    let corr = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                    g.lock().unwrap().push((api, corr, Instant::now()));
                    if s.write_all(&len).and_then(|()| s.write_all(&body)).is_err() {
                        return;
                    }
                });
            }
        });
        Echo { addr, got }
    }
    fn received(&self) -> Vec<(i16, i32)> {
        self.got.lock().unwrap().iter().map(|(a, c, _)| (*a, *c)).collect()
    }
}

/// A request frame: api key, version 0, correlation id, no client id, `extra` body bytes.
fn frame(api: i16, corr: i32, extra: usize) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(api.to_be_bytes());
    body.extend(0i16.to_be_bytes());
    body.extend(corr.to_be_bytes());
    body.extend((-1i16).to_be_bytes());
    body.extend((0..extra).map(|i| i as u8));
    let mut f = (body.len() as i32).to_be_bytes().to_vec();
    f.extend(body);
    f
}

fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body)?;
    let mut f = len.to_vec();
    f.extend(body);
    Ok(f)
}

fn setup() -> (FaultProxy, Echo) {
    let echo = Echo::start();
    let proxy = FaultProxy::bind(&[1]).unwrap();
    proxy.set_upstream(1, echo.addr);
    (proxy, echo)
}

fn connect(proxy: &FaultProxy) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", proxy.port(1).unwrap())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

#[test]
fn bytes_pass_both_ways() {
    let (proxy, echo) = setup();
    let mut c = connect(&proxy);
    for (i, size) in [0usize, 10, 1 << 20].into_iter().enumerate() {
        let f = frame(3, i as i32, size);
        c.write_all(&f).unwrap();
        assert_eq!(read_frame(&mut c).unwrap(), f, "frame of {size} bytes");
    }
    assert_eq!(echo.received(), vec![(3, 0), (3, 1), (3, 2)]);
    assert_eq!(proxy.stats(1).requests, 3);
}

#[test]
fn delay_is_added_to_each_request() {
    let (proxy, _echo) = setup();
    let mut c = connect(&proxy);
    c.write_all(&frame(3, 0, 0)).unwrap();
    read_frame(&mut c).unwrap();
    proxy.delay(1, Duration::from_millis(200));
    let t = Instant::now();
    c.write_all(&frame(3, 1, 0)).unwrap();
    read_frame(&mut c).unwrap();
    let rtt = t.elapsed();
    assert!(rtt >= Duration::from_millis(200) && rtt < Duration::from_millis(1500), "{rtt:?}");
    // Jitter keeps order and stays within its range (plus scheduling).
    proxy.jitter(1, Duration::from_millis(50), Duration::from_millis(150));
    let t = Instant::now();
    for i in 0..5 {
        c.write_all(&frame(3, 10 + i, 0)).unwrap();
    }
    for i in 0..5 {
        let f = read_frame(&mut c).unwrap();
        assert_eq!(i32::from_be_bytes([f[8], f[9], f[10], f[11]]), 10 + i);
    }
    assert!(t.elapsed() >= Duration::from_millis(50), "{:?}", t.elapsed());
    proxy.heal(1);
    let t = Instant::now();
    c.write_all(&frame(3, 20, 0)).unwrap();
    read_frame(&mut c).unwrap();
    assert!(t.elapsed() < Duration::from_millis(150), "healed: {:?}", t.elapsed());
}

#[test]
fn blackhole_holds_then_releases_in_order() {
    let (proxy, echo) = setup();
    let mut old = connect(&proxy);
    old.write_all(&frame(3, 0, 0)).unwrap();
    read_frame(&mut old).unwrap();
    proxy.blackhole(1);
    let mut new = connect(&proxy);
    for i in 1..=3 {
        old.write_all(&frame(3, i, 100)).unwrap();
    }
    new.write_all(&frame(3, 100, 0)).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(echo.received(), vec![(3, 0)], "nothing passes a blackhole");
    old.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    assert!(read_frame(&mut old).is_err(), "no response either");
    old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    proxy.heal(1);
    for i in 1..=3 {
        let f = read_frame(&mut old).unwrap();
        assert_eq!(i32::from_be_bytes([f[8], f[9], f[10], f[11]]), i, "in order");
    }
    read_frame(&mut new).unwrap();
    let got = echo.received();
    let old_order: Vec<i32> = got.iter().filter(|(_, c)| *c < 100).map(|(_, c)| *c).collect();
    assert_eq!(old_order, vec![0, 1, 2, 3]);
    assert_eq!(got.len(), 5);
}

#[test]
fn hold_next_holds_one_connection_from_the_matching_request() {
    let (proxy, echo) = setup();
    let (mut a, mut b) = (connect(&proxy), connect(&proxy));
    proxy.hold_next(1, &[api::END_TXN], false, 1);
    a.write_all(&frame(3, 1, 0)).unwrap();
    read_frame(&mut a).unwrap();
    a.write_all(&frame(api::END_TXN, 2, 0)).unwrap();
    a.write_all(&frame(3, 3, 0)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!proxy.armed(1), "the trigger fired");
    // Another connection, also with an EndTxn, passes: the trigger held one.
    b.write_all(&frame(api::END_TXN, 10, 0)).unwrap();
    read_frame(&mut b).unwrap();
    assert_eq!(echo.received(), vec![(3, 1), (api::END_TXN, 10)]);
    // The client gives up and closes; the held requests still reach the upstream on heal.
    drop(a);
    std::thread::sleep(Duration::from_millis(100));
    proxy.heal(1);
    let deadline = Instant::now() + Duration::from_secs(3);
    while echo.received().len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(echo.received(), vec![(3, 1), (api::END_TXN, 10), (api::END_TXN, 2), (3, 3)]);
    assert_eq!(proxy.stats(1).held, 1);
}

#[test]
fn reset_and_cut_close_connections() {
    let (proxy, echo) = setup();
    let mut c = connect(&proxy);
    c.write_all(&frame(3, 0, 0)).unwrap();
    read_frame(&mut c).unwrap();
    proxy.reset(1);
    let mut buf = [0u8; 1];
    let err = c.read(&mut buf).expect_err("reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    // New connections pass after a reset.
    let mut c = connect(&proxy);
    c.write_all(&frame(3, 1, 0)).unwrap();
    read_frame(&mut c).unwrap();
    proxy.cut(1);
    assert_eq!(c.read(&mut buf).unwrap(), 0, "FIN after a cut");
    let mut refused = connect(&proxy);
    assert!(matches!(refused.read(&mut buf), Ok(0) | Err(_)), "new connections closed until healed");
    proxy.heal(1);
    let mut c = connect(&proxy);
    c.write_all(&frame(3, 2, 0)).unwrap();
    read_frame(&mut c).unwrap();
    assert_eq!(echo.received(), vec![(3, 0), (3, 1), (3, 2)]);
}

#[test]
fn cut_on_a_request_forwards_or_not() {
    let (proxy, echo) = setup();
    let mut c = connect(&proxy);
    proxy.cut_on(1, &[api::END_TXN], OnRequest::CutAfter);
    c.write_all(&frame(api::END_TXN, 1, 0)).unwrap();
    let mut buf = [0u8; 1];
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)), "closed without the response");
    let mut c = connect(&proxy);
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)), "refused until healed");
    proxy.heal(1);
    let mut c = connect(&proxy);
    proxy.cut_on(1, &[api::END_TXN], OnRequest::ResetBefore);
    c.write_all(&frame(api::END_TXN, 2, 0)).unwrap();
    assert!(c.read(&mut buf).is_err(), "reset");
    assert_eq!(echo.received(), vec![(api::END_TXN, 1)], "forwarded before the cut, not before the reset");
}

#[test]
fn transactional_produce_is_recognised() {
    // Produce v3 (classic header): client id "ab", transactional id "t".
    let mut v3 = vec![0, 0, 0, 3, 0, 0, 0, 7, 0, 2, b'a', b'b', 0, 1, b't'];
    assert!(has_transactional_id(&v3));
    v3.truncate(12);
    v3.extend((-1i16).to_be_bytes());
    assert!(!has_transactional_id(&v3), "null transactional id");
    // Produce v9 (flexible): client id null, no tagged fields, compact transactional id "t".
    let v9 = [0, 0, 0, 9, 0, 0, 0, 7, 0xff, 0xff, 0, 2, b't'];
    assert!(has_transactional_id(&v9));
    let v9_null = [0, 0, 0, 9, 0, 0, 0, 7, 0xff, 0xff, 0, 0];
    assert!(!has_transactional_id(&v9_null));
    assert!(!has_transactional_id(&[0, 26, 0, 3]), "not a produce");
}
