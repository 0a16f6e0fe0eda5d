//! Error paths a real broker rarely produces, driven by librdkafka's mock cluster. The mock
//! does not implement transactions faithfully (no markers, no fencing by epoch), so these
//! tests prove only that each injected error is classified and surfaced at the right step
//! — never exactly-once itself (the integration tests do that on a real broker).

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use super::tests::rec;
use super::*;
use crate::config::PipelineConfig;
use crate::error::ErrorClass;
use crate::runtime::reconcile::{reconcile, spans, verdict, Verdict};
use crate::Pipeline;

fn setup() -> (MockCluster<'static, DefaultProducerContext>, TxnProducer) {
    let (mock, p, _) = setup_with_config();
    (mock, p)
}

fn setup_with_config() -> (MockCluster<'static, DefaultProducerContext>, TxnProducer, PipelineConfig) {
    setup_with(|b| b)
}

fn setup_with(
    tune: impl FnOnce(crate::PipelineBuilder) -> crate::PipelineBuilder,
) -> (MockCluster<'static, DefaultProducerContext>, TxnProducer, PipelineConfig) {
    let mock = MockCluster::new(1).expect("mock cluster");
    mock.create_topic("out", 1, 1).expect("topic");
    mock.create_topic("in", 1, 1).expect("topic");
    let builder = Pipeline::builder()
        .bootstrap_servers(mock.bootstrap_servers())
        .application_id("mock")
        .input_topic("in")
        .processor(|_, _| Ok(()));
    let pipeline = tune(builder).build().expect("config");
    let mut p = TxnProducer::create(pipeline.config(), Some("mock-in-0".into()), "in-0").expect("producer");
    p.init(soon(30)).expect("init_transactions");
    (mock, p, pipeline.config().clone())
}

/// The group metadata of a consumer of group `mock` on the mock cluster.
fn group_metadata(
    mock: &MockCluster<'static, DefaultProducerContext>,
) -> std::sync::Arc<rdkafka::consumer::ConsumerGroupMetadata> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("group.id", "mock")
        .create()
        .expect("consumer");
    std::sync::Arc::new(consumer.group_metadata().expect("group metadata"))
}

fn soon(secs: u64) -> Deadline<'static> {
    (Instant::now() + Duration::from_secs(secs)).into()
}

fn produce_one(p: &mut TxnProducer) -> Result<(), StepError> {
    p.begin()?;
    p.send(&OutputRecord::to("out").value("v"), Some(&rec("in", 0, 0)), soon(30))?;
    p.await_acks(soon(30))
}

#[test]
fn producer_fenced_on_end_txn_is_classified_fenced() {
    let (mock, mut p) = setup();
    produce_one(&mut p).expect("produce");
    mock.request_errors(RDKafkaApiKey::EndTxn, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED]);
    let err = p.commit(soon(30)).expect_err("commit must fail");
    assert_eq!((err.step, err.class), (Step::Commit, ErrorClass::Fenced), "{err}");
}

#[test]
fn failed_produce_is_abortable_and_the_next_transaction_commits() {
    let (mock, mut p) = setup();
    mock.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE]);
    let err = produce_one(&mut p).expect_err("the delivery report carries the error");
    assert_eq!((err.step, err.class), (Step::AwaitAcks, ErrorClass::Abortable), "{err}");
    p.abort(soon(30)).expect("abort");
    // As the task does: abort and replay while abortable. (After an abortable error
    // librdkafka bumps the producer epoch and may purge the first replay's message.)
    for attempt in 1.. {
        match produce_one(&mut p).and_then(|()| p.commit(soon(30))) {
            Ok(()) => break,
            Err(e) if e.class == ErrorClass::Abortable && attempt < 5 => p.abort(soon(30)).expect("abort"),
            Err(e) => panic!("replay {attempt} failed: {e}"),
        }
    }
}

/// `send_offsets_to_transaction` refused because this consumer is no longer the group
/// member its metadata names is fenced, and gives the producer up at once (no replay can
/// succeed as this member); a generation that moved on (an incremental rebalance) and an abortable refusal
/// for another reason are replayed, with the metadata read afresh.
#[test]
fn offsets_refused_for_a_member_that_left_the_group_give_the_producer_up() {
    use RDKafkaRespErr as E;

    let refuse = |code: E| {
        let (mock, mut p) = setup();
        let group = group_metadata(&mock);
        produce_one(&mut p).expect("produce");
        mock.request_errors(RDKafkaApiKey::TxnOffsetCommit, &[code]);
        let offsets = next_offsets(&[rec("in", 0, 0)]);
        let err = p.send_offsets(&offsets, &group, soon(30)).expect_err("the offsets are refused");
        assert_eq!(err.step, Step::SendOffsets, "{err}");
        (err, p, mock)
    };
    for code in [E::RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID, E::RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID] {
        let (err, mut p, _mock) = refuse(code);
        assert_eq!(err.class, ErrorClass::Fenced, "{code:?} fences this member: {err}");
        assert_eq!(verdict(&err, true), Verdict::GiveUp, "{code:?} must give the producer up: {err}");
        // The group refused the member, not the transaction coordinator the producer: its
        // open transaction can and must still be aborted.
        assert!(err.refused_by_group(), "{code:?}: {err}");
        p.abort(soon(30)).expect("the transaction of a producer the group refused is aborted");
    }
    let (err, _, _) = refuse(E::RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION);
    assert!(!err.refused_by_group(), "{err}");
    assert_eq!(err.class, ErrorClass::Abortable, "{err}");
    assert_eq!(verdict(&err, true), Verdict::Replay, "an old generation is replayed: {err}");
    let (err, _, _) = refuse(E::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED);
    assert!(!err.refused_by_group(), "{err}");
    assert_eq!(verdict(&err, true), Verdict::Stop, "a refused ACL stops: {err}");
}

/// A refusal for want of an ACL, at whichever step of the cycle, is classed not authorized,
/// is not retried (the call returns long before its deadline), stops the pipeline (no replay,
/// no reconcile), and names the ACL: the transactional ids' `Write` at `init_transactions`
/// and at the commit, the output topic's `Write` at a produce, the group's `Read` at the
/// offsets. A refused produce's transaction is still aborted.
#[test]
fn refusals_stop_at_every_step_naming_the_acl_and_are_never_retried() {
    use crate::acl::{Operation, ResourceType};
    use RDKafkaRespErr as E;
    let named = |e: crate::Error| match e {
        crate::Error::NotAuthorized(n) => (n.acl.resource_type, n.acl.name, n.acl.operation),
        other => panic!("not a refusal: {other}"),
    };
    let stops = |err: &StepError, step: Step, started: Instant| {
        assert_eq!((err.step, err.class), (step, ErrorClass::NotAuthorized), "{err}");
        assert_eq!(verdict(err, true), Verdict::Stop, "{err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{step:?} retried: {:?}", started.elapsed());
    };

    let declaring_out = |mut b: crate::PipelineBuilder| {
        let _ = b.output_topic("out");
        b
    };

    let (mock, _, cfg) = setup_with_config();
    mock.request_errors(RDKafkaApiKey::InitProducerId, &[E::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED]);
    let mut p = TxnProducer::create(&cfg, Some("mock:in:0".into()), "in-0").expect("producer");
    let started = Instant::now();
    let err = p.init(soon(60)).expect_err("init_transactions refused");
    stops(&err, Step::Init, started);
    let ids = (ResourceType::TransactionalId, "mock:".to_string(), Operation::Write);
    assert_eq!(named(p.failure(err, &cfg, "mock:in:0")), ids);

    let (mock, mut p, cfg) = setup_with(declaring_out);
    mock.request_errors(RDKafkaApiKey::Produce, &[E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED]);
    let started = Instant::now();
    let err = produce_one(&mut p).expect_err("the produce is refused");
    stops(&err, Step::AwaitAcks, started);
    assert_eq!(named(p.failure(err, &cfg, "x")), (ResourceType::Topic, "out".to_string(), Operation::Write));
    p.abort(soon(30)).expect("the refused transaction is aborted");
    // librdkafka keeps the topic's refusal: the next record to it is refused as it is sent.
    let err = produce_one(&mut p).expect_err("the topic stays refused");
    stops(&err, Step::Produce, started);
    p.abort(soon(30)).expect("abort");

    // Refused as a partition of the transaction: librdkafka purges the record, and the
    // transaction's error says why.
    let (mock, mut p, cfg) = setup_with(declaring_out);
    mock.request_errors(RDKafkaApiKey::AddPartitionsToTxn, &[E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED]);
    let started = Instant::now();
    let err = produce_one(&mut p).expect_err("the partition is refused to the transaction");
    stops(&err, Step::AwaitAcks, started);
    assert_eq!(named(p.failure(err, &cfg, "x")), (ResourceType::Topic, "out".to_string(), Operation::Write));
    p.abort(soon(30)).expect("the refused transaction is aborted");

    let (mock, mut p, cfg) = setup_with_config();
    let group = group_metadata(&mock);
    produce_one(&mut p).expect("produce");
    mock.request_errors(RDKafkaApiKey::TxnOffsetCommit, &[E::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED]);
    let started = Instant::now();
    let err = p.send_offsets(&next_offsets(&[rec("in", 0, 0)]), &group, soon(60)).expect_err("refused");
    stops(&err, Step::SendOffsets, started);
    assert_eq!(named(p.failure(err, &cfg, "x")), (ResourceType::Group, "mock".to_string(), Operation::Read));

    let (mock, mut p, cfg) = setup_with_config();
    produce_one(&mut p).expect("produce");
    mock.request_errors(RDKafkaApiKey::EndTxn, &[E::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED]);
    let started = Instant::now();
    let err = p.commit(soon(60)).expect_err("the commit is refused");
    stops(&err, Step::Commit, started);
    assert_eq!(named(p.failure(err, &cfg, "x")), ids);
}

/// An abort refused with `INVALID_TXN_STATE` leaves the producer in librdkafka's fatal
/// state (`rd_kafka_txn_handle_EndTxn` marks it fatal): every later call fails. The
/// transaction's fate is unknown to the task (the coordinator refuses an abort of a
/// transaction it is completing), so the task reconciles: a fresh producer of the same
/// transactional.id is initialised and works. (The mock stores no transactional offsets, so
/// the reconcile always finds "aborted" here: only the path is tested, not the answer.)
#[test]
fn abort_refused_with_invalid_txn_state_is_reconciled_with_a_fresh_producer() {
    let (mock, mut p, cfg) = setup_with_config();
    produce_one(&mut p).expect("produce");
    mock.request_errors(RDKafkaApiKey::EndTxn, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_TXN_STATE]);
    let err = p.abort(soon(30)).expect_err("the abort is refused");
    assert_eq!((err.step, err.class), (Step::Abort, ErrorClass::Fatal), "{err}");
    let next = p.begin().expect_err("a fatal producer cannot begin another transaction");
    assert_eq!(next.class, ErrorClass::Fatal, "{next}");
    assert_eq!(verdict(&err, true), Verdict::Reconcile, "{err}");
    drop(p);
    let batch = [rec("in", 0, 0)];
    let (mut fresh, found) = reconcile(
        &cfg,
        "mock-in-0",
        "in-0",
        &spans(&batch, &next_offsets(&batch)),
        None,
        &Default::default(),
        soon(30),
    )
    .expect("reconciled");
    assert_eq!(found, crate::observe::Reconciliation::Aborted);
    produce_one(&mut fresh).and_then(|()| fresh.commit(soon(30))).expect("the fresh producer commits");
}

/// A commit that gets no answer (the broker is down: `EndTxn` never reaches it) is made
/// once — no second call on the same epoch — and fails retriable; its outcome is unknown, so
/// the task reconciles: once the broker is back, a fresh producer of the same
/// transactional.id is initialised (the epoch bump that fences the old one) and commits.
#[test]
fn commit_without_an_answer_is_reconciled_with_a_fresh_producer() {
    let (mock, mut p, cfg) = setup_with_config();
    produce_one(&mut p).expect("produce");
    mock.broker_down(1).expect("broker down");
    let started = Instant::now();
    let err = p.commit((Instant::now() + Duration::from_secs(2)).into()).expect_err("no broker, no commit");
    // librdkafka does not always honour the call's timeout here (confluentinc/librdkafka#5456,
    // worst on a loaded machine); the call's watchdog bounds it.
    let bound = Duration::from_secs(2) + super::watchdog::GRACE + Duration::from_secs(2);
    assert!(started.elapsed() < bound, "one call, bounded: {:?}", started.elapsed());
    assert_eq!((err.step, err.class), (Step::Commit, ErrorClass::Retriable), "{err}");
    assert_eq!(verdict(&err, true), Verdict::Reconcile, "{err}");
    drop(p);
    let reconciling = std::thread::spawn(move || {
        let batch = [rec("in", 0, 0)];
        reconcile(&cfg, "mock-in-0", "in-0", &spans(&batch, &next_offsets(&batch)), None, &Default::default(), soon(30))
    });
    std::thread::sleep(Duration::from_millis(1_500));
    mock.broker_up(1).expect("broker up");
    let (mut fresh, _) = reconciling.join().unwrap().expect("reconciled once the broker is back");
    produce_one(&mut fresh).and_then(|()| fresh.commit(soon(30))).expect("the fresh producer commits");
}

/// A commit whose call times out while its `EndTxn` has no answer yet (the coordinator's
/// broker down, back later) is resumed, not given up, even when the task's partitions were
/// lost meanwhile: librdkafka goes on with the same `EndTxn` in the background, and giving
/// up would make the task fence the producer, whose fresh epoch can abort what the
/// coordinator is committing. Once committed, the producer asks to be replaced: an `EndTxn`
/// of the timed-out call may still arrive and would commit its next transaction.
#[test]
fn a_commit_that_times_out_is_resumed_until_its_answer_even_when_interrupted() {
    use crate::runtime::interrupt::Interrupt;
    // Transaction timeout 1 s: each commit call waits at most 5 s (the call timeout's floor),
    // the commit 10 s. Reconnects retried every 0.5 s at most: the broker is seen back soon.
    let (mock, mut p, _) = setup_with(|b| {
        b.transaction_timeout(Duration::from_secs(1)).producer_property("reconnect.backoff.max.ms", "500")
    });
    produce_one(&mut p).expect("produce");
    mock.broker_down(1).expect("broker down");
    let started = Instant::now();
    let committing = std::thread::spawn(move || {
        let interrupt = Interrupt::default();
        interrupt.revoke(true, Instant::now());
        p.commit(Deadline::interruptible(Instant::now() + Duration::from_secs(30), &interrupt)).map(|()| p)
    });
    std::thread::sleep(Duration::from_secs(7));
    mock.broker_up(1).expect("broker up");
    let mut p = committing.join().unwrap().expect("resumed until the coordinator answered");
    assert!(started.elapsed() >= Duration::from_secs(7), "the broker was down: {:?}", started.elapsed());
    assert!(p.must_be_replaced(), "a resumed commit's producer begins no other transaction");
    assert!(p.begin().is_err(), "and refuses to");
    let (_mock, mut quick, _) = setup_with(|b| b);
    produce_one(&mut quick).and_then(|()| quick.commit(soon(30))).expect("a commit answered at once");
    assert!(!quick.must_be_replaced(), "a commit answered at once leaves the producer in use");
}

/// An abort whose call times out while its `EndTxn` has no answer yet (the coordinator's
/// broker down, back later) is retried, and librdkafka sends the `EndTxn` again: the first
/// one may still arrive, and a late `EndTxn(abort)` of the same epoch aborts the producer's
/// next transaction half-done — its records, while the offsets it sends next open a new
/// transaction and commit alone (records lost). So, like a resumed commit, a retried abort
/// leaves the producer to be replaced before its next transaction.
#[test]
fn an_abort_that_times_out_and_is_retried_leaves_the_producer_to_be_replaced() {
    let (mock, mut p, _) = setup_with(|b| {
        b.transaction_timeout(Duration::from_secs(1)).producer_property("reconnect.backoff.max.ms", "500")
    });
    produce_one(&mut p).expect("produce");
    mock.broker_down(1).expect("broker down");
    let aborting = std::thread::spawn(move || p.abort(soon(30)).map(|()| p));
    std::thread::sleep(Duration::from_secs(7));
    mock.broker_up(1).expect("broker up");
    let mut p = aborting.join().unwrap().expect("retried until the coordinator answered");
    assert!(p.must_be_replaced(), "a retried abort's producer begins no other transaction");
    assert!(p.begin().is_err(), "and refuses to");
    let (_mock, mut quick, _) = setup_with(|b| b);
    produce_one(&mut quick).and_then(|()| quick.abort(soon(30))).expect("an abort answered at once");
    assert!(!quick.must_be_replaced(), "an abort answered at once leaves the producer in use");
}

/// A commit whose connection to the coordinator breaks during the call, and which
/// librdkafka completes within that one call (the broker back before the call's timeout):
/// librdkafka sends an `EndTxn` again on its own after a transport error or a request
/// timeout, and a first copy may still wait at a stalled broker. The client error it reported
/// meanwhile leaves the producer to be replaced, as a commit the runtime resumed does.
#[test]
fn a_commit_during_which_the_connection_broke_leaves_the_producer_to_be_replaced() {
    // Transaction timeout 1 s: the call timeout's floor, 5 s, outlasts the 2 s outage.
    let (mock, mut p, _) = setup_with(|b| {
        b.transaction_timeout(Duration::from_secs(1)).producer_property("reconnect.backoff.max.ms", "200")
    });
    produce_one(&mut p).expect("produce");
    mock.broker_down(1).expect("broker down");
    let committing = std::thread::spawn(move || p.commit(soon(30)).map(|()| p));
    std::thread::sleep(Duration::from_secs(2));
    mock.broker_up(1).expect("broker up");
    let mut p = committing.join().unwrap().expect("committed once the broker was back");
    assert!(p.must_be_replaced(), "the connection broke during the EndTxn call: it may have been sent twice");
    assert!(p.begin().is_err(), "no transaction begins on it");
}

/// `send_offsets_to_transaction` without an answer (the broker is down) is made once and
/// fails retriable: a `TxnOffsetCommit` may still land later, in a later transaction of the
/// same epoch, so the task reconciles rather than retrying or aborting on this producer.
#[test]
fn offsets_without_an_answer_are_reconciled() {
    let (mock, mut p) = setup();
    let group = group_metadata(&mock);
    produce_one(&mut p).expect("produce");
    mock.broker_down(1).expect("broker down");
    let offsets = next_offsets(&[rec("in", 0, 0)]);
    let started = Instant::now();
    let err = p
        .send_offsets(&offsets, &group, (Instant::now() + Duration::from_secs(2)).into())
        .expect_err("no broker, no offsets");
    // librdkafka does not always honour the call's timeout here (confluentinc/librdkafka#5456,
    // worst on a loaded machine); the call's watchdog bounds it.
    let bound = Duration::from_secs(2) + super::watchdog::GRACE + Duration::from_secs(2);
    assert!(started.elapsed() < bound, "one call, bounded: {:?}", started.elapsed());
    assert_eq!((err.step, err.class), (Step::SendOffsets, ErrorClass::Retriable), "{err}");
    assert_eq!(verdict(&err, true), Verdict::Reconcile, "{err}");
}

/// A reconcile that cannot learn the outcome by the deadline (the brokers stay away) says
/// so, and the task falls back to giving the partitions up.
#[test]
fn a_reconcile_that_cannot_finish_by_the_deadline_fails() {
    let (mock, p, cfg) = setup_with_config();
    drop(p);
    mock.broker_down(1).expect("broker down");
    let started = Instant::now();
    let why = reconcile(
        &cfg,
        "mock-in-0",
        "in-0",
        &spans(&[rec("in", 0, 0)], &next_offsets(&[rec("in", 0, 0)])),
        None,
        &Default::default(),
        (Instant::now() + Duration::from_secs(2)).into(),
    )
    .map(|(_, found)| found)
    .expect_err("no broker, no answer");
    assert!(started.elapsed() < Duration::from_secs(8), "bounded by the deadline: {:?}", started.elapsed());
    assert!(why.contains("fencing the old producer"), "{why}");
}
