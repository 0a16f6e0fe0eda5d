//! Zombie fencing: an instance stuck mid-transaction loses its partition; the new owner's
//! `init_transactions` fences it, its late commit fails, and none of its records appear. In
//! per-consumer mode, an instance whose session expired is fenced by the group generation,
//! also in a transaction of timers alone.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use kafka_eos::observe::Outcome;
use kafka_eos::processor::{Context, ProcessError, Processor};
use kafka_eos::timers::{Timer, Timers};
use kafka_eos::{Guarantee, InputRecord, OutputRecord, Pipeline, PipelineBuilder, Rebalancing, Topic};

use crate::common::{
    committed_by_key, init_logging, open_transaction_time, own_broker_turn, spawn, topics, topics_on, unique, Stuck,
    Topics,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_instance_is_fenced_and_its_transaction_never_appears() {
    const RECORDS: u64 = 2_000;
    let t = topics("zombie", 1, RECORDS, 100).await;
    let app = unique("zombie");

    // Instance A blocks inside its transaction on offset 1,000 until released (once).
    // Eager: a joining instance revokes everything, so A must give up its only partition
    // (an incremental protocol would leave it with A, which owns it rightfully).
    let stuck = Stuck::default();
    let a = spawn(
        t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .rebalancing(Rebalancing::Eager)
            .task_timeout(Duration::from_secs(3))
            .max_records_per_transaction(200)
            .processor(stuck.processor(&t.output, 0, 1_000)),
    );
    stuck.wait_reached(Duration::from_secs(60)).await;
    // Its open transaction already holds outputs of offsets 1000.. (the batch began).
    // Instance B joins: the rebalance revokes A's partition; A's task cannot finish within
    // the task timeout and is abandoned; whoever gets the partition (B, or A's next task)
    // re-initialises its transactional.id, which fences the stuck producer and aborts its
    // transaction.
    let b = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).rebalancing(Rebalancing::Eager));
    t.wait_caught_up(&app, Duration::from_secs(90)).await;

    // Wake the zombie: it finishes processing and tries to commit with a fenced producer.
    stuck.release();
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.handle.summary().producers_fenced == 0 {
        assert!(Instant::now() < deadline, "the zombie's commit was not fenced: {:?}", a.handle.summary());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sa = a.stop().await;
    let sb = b.stop().await;
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?} (A: {sa:?}, B: {sb:?})");
    assert_eq!(report.output_records, RECORDS);
    assert_eq!(sa.records_in + sb.records_in, RECORDS, "every record committed once across both instances");
}

/// Schedules a wall-clock timer at the time a record's value names (ms since the epoch); the
/// timer emits `timer/<offset> → who fired it`.
#[derive(Clone)]
struct AlarmAt {
    timers: Timers,
    out: Topic,
    who: &'static str,
}

impl Processor for AlarmAt {
    async fn process(&mut self, ctx: &mut Context<'_>, rec: &InputRecord) -> Result<(), ProcessError> {
        let at_ms: u64 = std::str::from_utf8(rec.value.as_deref().unwrap_or_default())?.parse()?;
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(at_ms);
        self.timers.at_wall_clock(ctx, at, rec.offset as u64)?;
        Ok(())
    }

    async fn on_timer(&mut self, ctx: &mut Context<'_>, timer: &Timer) -> Result<(), ProcessError> {
        ctx.emit(OutputRecord::to(&self.out).key(format!("timer/{}", timer.tag)).value(self.who));
        Ok(())
    }
}

fn alarm_at(bootstrap: &str, t: &Topics, app: &str, who: &'static str) -> PipelineBuilder {
    let mut b = Pipeline::builder()
        .bootstrap_servers(bootstrap)
        .application_id(app)
        .input_topic(&t.input)
        .guarantee(Guarantee::ExactlyOncePerConsumer)
        .handle_signals(false)
        // Incremental, so that B's joining leaves the partition with A.
        .rebalancing(Rebalancing::Cooperative)
        .consumer_property("session.timeout.ms", "6000")
        .consumer_property("heartbeat.interval.ms", "1000");
    let timers = Timers::new(&mut b, "alarms");
    let out = b.output_topic(&t.output);
    b.processor_impl(AlarmAt { timers, out, who })
}

/// A record whose value is a wall-clock time `from_now` ahead.
async fn produce_alarm(t: &Topics, from_now: Duration) {
    let at = SystemTime::now() + from_now;
    let ms = at.duration_since(SystemTime::UNIX_EPOCH).expect("clock after 1970").as_millis();
    let (b, topic) = (t.bootstrap.clone(), t.input.clone());
    tokio::task::spawn_blocking(move || {
        let w = kafka_eos_testkit::write::Writer::new(&kafka_eos_testkit::admin::Client::new(&b))?;
        w.send(&OutputRecord::to(topic.as_str()).partition(0).value(ms.to_string()))?;
        w.flush_all_delivered(Duration::from_secs(30))
    })
    .await
    .unwrap()
    .expect("produce");
}

/// Per consumer, a transaction of timers alone is fenced by the group generation like any
/// other (KIP-447): instance A's heartbeats are held until the group expires its session and
/// gives its partition to B, while A's poll thread is slow to tell A's task (an injected
/// fault). B restores the partition's timer and fires it; A's task, not yet told, fires the
/// same timer in a transaction of timers alone, whose offsets carry A's stale group metadata:
/// the broker must refuse it, so the timer's output is committed once, by B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_consumer_a_timer_only_transaction_after_the_session_expired_is_fenced() {
    use kafka_eos_testkit::broker::proxy::api;
    use kafka_eos_testkit::broker::{ClusterConfig, LocalCluster, BOOTSTRAP_ENV};

    assert!(
        std::env::var(BOOTSTRAP_ENV).map_or(true, |b| b.trim().is_empty()),
        "this test starts its own broker; unset {BOOTSTRAP_ENV} or skip it with `cargo test -- --skip session_expired`"
    );
    init_logging();
    let _turn = own_broker_turn().await;
    let cfg = ClusterConfig { fault_proxy: true, ready_timeout: Duration::from_secs(120), ..Default::default() };
    let cluster = tokio::task::spawn_blocking(move || LocalCluster::start(cfg))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start a broker with a fault proxy: {e}"));
    let proxy = cluster.proxy().expect("started with a fault proxy");
    let node = proxy.node_ids()[0];
    let t = topics_on(&cluster.bootstrap_servers(), "session-expired", 1, 0, 0).await;
    let app = unique("session-expired");

    // A through the proxy, B direct, so that only A's heartbeats can be held.
    let not_committed: Arc<Mutex<Vec<(usize, Outcome)>>> = Arc::default();
    let hook = not_committed.clone();
    let a = spawn(
        alarm_at(&cluster.bootstrap_servers(), &t, &app, "a")
            .inject_slow_lost_relay(Duration::from_secs(25))
            .on_transaction(move |e| {
                if !matches!(e.outcome, Outcome::Committed) {
                    hook.lock().unwrap().push((e.records, e.outcome.clone()));
                }
            }),
    );
    // A owns the partition: its first record's timer fires at once.
    produce_alarm(&t, Duration::ZERO).await;
    a.wait_records_in(1, Duration::from_secs(60)).await;
    let b = spawn(alarm_at(&cluster.direct_bootstrap_servers(), &t, &app, "b"));
    tokio::time::sleep(Duration::from_secs(6)).await; // B joins; A keeps the partition (sticky)
    produce_alarm(&t, Duration::from_secs(20)).await;
    a.wait_records_in(2, Duration::from_secs(30)).await;
    // A's next heartbeat and everything after it on that connection are held: the group
    // expires A's session 6 s after its last heartbeat and gives the partition to B.
    proxy.hold_next(node, &[api::HEARTBEAT], false, 1);
    let held = Instant::now();
    // The timer fires 20 s after the record, B's restore long done; A's task is told of the
    // loss 25 s after A's own client notices the expiry (A's stop waits for that).
    let refused = async {
        while !not_committed.lock().unwrap().iter().any(|(records, _)| *records == 0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(24), refused).await;
    // A's refused transaction already holds the timer's output: given up unaborted, it would
    // hide every later output of the partition until its transaction timeout.
    let open = open_transaction_time(&cluster.direct_bootstrap_servers(), &t.output, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(24).saturating_sub(held.elapsed())).await;
    proxy.heal(node);
    let sa = a.stop().await;
    let sb = b.stop().await;
    let out = committed_by_key(&cluster.direct_bootstrap_servers(), &t.input, &t.output).await;
    let not_committed = not_committed.lock().unwrap().clone();
    println!(
        "outputs {out:?}; A's transactions not committed {not_committed:?}; a transaction open {open:?} after A's refusal; A {sa:?}; B {sb:?}"
    );
    assert_eq!(out.get("timer/0").map(Vec::as_slice), Some(&["a".to_string()][..]), "{out:?}");
    assert_eq!(
        out.get("timer/1").map(Vec::as_slice),
        Some(&["b".to_string()][..]),
        "the second timer's output, exactly once, by B: {out:?}; A's transactions not committed: {not_committed:?}"
    );
    assert!(
        not_committed.iter().any(|(records, _)| *records == 0),
        "A's task fired the timer after its session expired and was refused: {not_committed:?}"
    );
    assert!(
        open <= Duration::from_secs(3),
        "the output partition kept a transaction open for {open:?} after A's was refused: {not_committed:?}"
    );
    tokio::task::spawn_blocking(move || cluster.stop()).await.unwrap().expect("stop");
}
