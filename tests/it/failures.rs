//! Processor failures in the middle of a transaction.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_eos::{Error, Guarantee, OutputRecord, ProcessorErrorPolicy};
use kafka_eos_testkit::admin;
use kafka_eos_testkit::verify::VerifyConfig;

use crate::common::{emit_reversed, spawn, topics, unique};

const RECORDS: u64 = 4_000;

/// The processor fails (error, then panic) on one record in the middle of a batch: the
/// batch's transaction is aborted, none of its outputs is visible to read_committed readers
/// (they are in the log: a read_uncommitted reader sees them), and the replay commits every
/// record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_transaction_outputs_are_never_visible_and_processing_resumes() {
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let t = topics("fail", 2, RECORDS, 100).await;
        let app = unique("fail");
        let calls = Arc::new(AtomicU32::new(0));
        let out = kafka_eos::Topic::new(&t.output);
        let c = calls.clone();
        let run = spawn(
            t.pipeline(&app, guarantee)
                .max_records_per_transaction(500)
                .on_processor_error(ProcessorErrorPolicy::retry(3).backoff(Duration::from_millis(10)))
                .processor(move |ctx, r| {
                    if r.partition == 1 && r.offset == 1_200 {
                        // Let the outputs produced so far in this transaction reach the
                        // broker (linger.ms is 5), so that the abort has something to hide.
                        std::thread::sleep(Duration::from_millis(200));
                        match c.fetch_add(1, Ordering::SeqCst) {
                            0 => return Err("simulated failure".into()),
                            1 => panic!("simulated panic"),
                            _ => {}
                        }
                    }
                    emit_reversed(ctx, &out, r)
                }),
        );
        t.wait_caught_up(&app, Duration::from_secs(60)).await;
        let summary = run.stop().await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "the failing record is retried until it succeeds");
        assert!(summary.transactions_aborted >= 2, "{summary:?}");
        let report = t.verify().await;
        assert!(report.is_exactly_once(), "{}: {report:?}", guarantee.as_str());
        assert_eq!(report.output_records, RECORDS);
        let uncommitted = t.count_output_uncommitted().await;
        assert!(
            uncommitted > RECORDS,
            "{}: the aborted attempts' outputs are in the log ({uncommitted} records) but invisible to read_committed",
            guarantee.as_str()
        );
    }
}

/// A record that always fails goes to the dead-letter topic inside the transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_record_is_dead_lettered_and_the_rest_committed() {
    let t = topics("dlq", 2, RECORDS, 100).await;
    let dlq = unique("dlq-dead");
    let (b, d) = (t.bootstrap.clone(), dlq.clone());
    tokio::task::spawn_blocking(move || admin::create_topic(&b, &d, 1, 1)).await.unwrap().unwrap();
    let app = unique("dlq");
    let out = kafka_eos::Topic::new(&t.output);
    let run = spawn(
        t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .on_processor_error(
                ProcessorErrorPolicy::retry(1).backoff(Duration::from_millis(10)).then_dead_letter(&dlq),
            )
            .processor(move |ctx, r| {
                if r.partition == 0 && r.offset == 777 {
                    return Err("cannot decode".into());
                }
                emit_reversed(ctx, &out, r)
            }),
    );
    t.wait_caught_up(&app, Duration::from_secs(60)).await;
    let summary = run.stop().await;
    assert_eq!(summary.dead_lettered, 1, "{summary:?}");
    let report = t.verify_with(|c: &mut VerifyConfig| c.output_topics.push(dlq.clone())).await;
    assert!(report.is_exactly_once(), "outputs plus the dead letter cover the input exactly once: {report:?}");
    let report = t.verify().await;
    assert_eq!((report.missing, report.duplicates), (1, 0), "only the poison record lacks an output");
}

/// Under the stop policy the pipeline stops with an error naming the record; nothing of
/// the failing batch is committed; a restart with a fixed processor resumes there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_policy_stops_with_the_record_and_a_restart_resumes() {
    let t = topics("stop", 1, RECORDS, 100).await;
    let app = unique("stop");
    let out = kafka_eos::Topic::new(&t.output);
    let run = spawn(
        t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .on_processor_error(ProcessorErrorPolicy::retry(1).backoff(Duration::from_millis(10)))
            .processor(
                move |ctx, r| if r.offset == 2_500 { Err("bad record".into()) } else { emit_reversed(ctx, &out, r) },
            ),
    );
    let err = run.finish().await.expect_err("the pipeline must stop");
    match &err {
        Error::Processor { origin, attempts, source } => {
            assert!(origin.ends_with("/0/2500"), "{origin}");
            assert_eq!(*attempts, 2);
            assert_eq!(source.to_string(), "bad record", "the processor's own error, kept whole");
        }
        other => panic!("expected a processor error, got {other}"),
    }
    assert!(err.to_string().contains("restart"), "the message says what to do: {err}");
    let partial = t.verify().await;
    assert!(partial.output_records < 2_501 && partial.duplicates == 0, "{partial:?}");

    let out = kafka_eos::Topic::new(&t.output);
    let run = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).processor(move |ctx, r| {
        ctx.emit(OutputRecord::to(&out).value(r.value.clone().unwrap_or_default()).partition(r.partition));
        Ok(())
    }));
    t.wait_caught_up(&app, Duration::from_secs(60)).await;
    let summary = run.stop().await;
    assert_eq!(summary.records_in, RECORDS - partial.output_records, "resumed at the first uncommitted record");
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?}");
}

/// Issue 11, item 3: one partition whose producer cannot be initialised (its first three
/// `init_transactions` fail) does not stop the pipeline: the other partitions run, the
/// partition is paused and its task retried from the consumer thread until it starts, and
/// then resumes from its committed offset. No rebalance; exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_producer_cannot_start_is_retried_while_the_others_run() {
    let t = topics("initfail", 4, RECORDS, 100).await;
    let app = unique("initfail");
    let run = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).inject_init_failures(2, 3));
    t.wait_caught_up(&app, Duration::from_secs(90)).await;
    let summary = run.stop().await;
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?} ({summary:?})");
    assert_eq!(report.output_records, RECORDS);
    assert_eq!(summary.records_in, RECORDS, "{summary:?}");
    assert_eq!(summary.rebalances, 1, "retried in place, no rebalance: {summary:?}");
}

/// A partition whose committed offset lies past its log's end (the topic deleted and created
/// again, say) sends librdkafka's `auto.offset.reset` to the partition's start, below the
/// committed offset. Nothing below the committed offset is processed, in either exactly-once
/// mode: the partition is rewound, and when its position keeps going back the pipeline stops
/// with an error that names the partition and the fix; the committed offset stays, no output
/// is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_reset_below_the_committed_offset_is_never_processed() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let t = topics("reset", 1, 1_000, 100).await;
        let app = unique("reset");
        let group = |t: &crate::common::Topics| -> BaseConsumer {
            ClientConfig::new()
                .set("bootstrap.servers", &t.bootstrap)
                .set("group.id", &app)
                .set("enable.auto.commit", "false")
                .create()
                .expect("consumer")
        };
        let committed = |t: &crate::common::Topics| -> Offset {
            let mut wanted = TopicPartitionList::new();
            wanted.add_partition(&t.input, 0);
            group(t).committed_offsets(wanted, Duration::from_secs(10)).expect("committed offsets").elements()[0]
                .offset()
        };
        let mut past_the_end = TopicPartitionList::new();
        past_the_end.add_partition_offset(&t.input, 0, Offset::Offset(5_000)).unwrap();
        group(&t).commit(&past_the_end, CommitMode::Sync).expect("commit past the end");

        let run = spawn(t.pipeline(&app, guarantee));
        let handle = run.handle.clone();
        let Ok(ended) = tokio::time::timeout(Duration::from_secs(60), run.finish()).await else {
            handle.shutdown();
            tokio::time::sleep(Duration::from_secs(5)).await;
            let report = t.verify().await;
            panic!(
                "{guarantee:?}: still running after 60 s; {} records written, committed offset now {:?}",
                report.output_records,
                committed(&t)
            );
        };
        let err = ended.expect_err("the pipeline must stop");
        match &err {
            Error::OffsetReset { partition, offset, committed } => {
                assert_eq!((partition.as_str(), *offset, *committed), (format!("{}-0", t.input).as_str(), 0, 5_000));
            }
            other => panic!("{guarantee:?}: expected an offset reset, got {other}"),
        }
        assert!(err.to_string().contains("--reset-offsets"), "the message says what to do: {err}");
        let report = t.verify().await;
        assert_eq!(report.output_records, 0, "{guarantee:?}: nothing below the committed offset processed");
        assert_eq!(committed(&t), Offset::Offset(5_000), "{guarantee:?}: the committed offset stays");
    }
}

/// A partition whose unprocessed records were deleted while the pipeline was stopped (its
/// retention ran out: here `DeleteRecords`, as a retention check does it) resumes past its
/// committed offset: librdkafka resets it to the log's start, and those records would be
/// skipped silently. The pipeline stops instead, naming the gap, with nothing processed; told
/// to skip, it goes on from the log's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_before_they_were_processed_stop_the_pipeline_unless_skipped() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let t = topics("deleted", 1, 1_000, 100).await;
        let app = unique("deleted");
        // The group had processed 300 records when the pipeline stopped.
        commit_group_at(&t, &app, 300);
        // Then records up to 600, never processed, are deleted.
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &t.bootstrap).create().expect("admin client");
        let mut below = TopicPartitionList::new();
        below.add_partition_offset(&t.input, 0, Offset::Offset(600)).unwrap();
        let deleted = admin.delete_records(&below, &AdminOptions::new()).await.expect("delete records");
        assert_eq!(deleted.elements()[0].offset(), Offset::Offset(600), "the log starts at 600");

        let run = spawn(t.pipeline(&app, guarantee));
        let handle = run.handle.clone();
        let Ok(ended) = tokio::time::timeout(Duration::from_secs(60), run.finish()).await else {
            handle.shutdown();
            tokio::time::sleep(Duration::from_secs(5)).await;
            let out = t.count_output_uncommitted().await;
            panic!("{guarantee:?}: still running after 60 s, {out} records written past the deleted ones");
        };
        let err = ended.expect_err("the pipeline must stop");
        match &err {
            Error::RecordsDeleted { partition, resume, log_start } => {
                assert_eq!((partition.as_str(), *resume, *log_start), (format!("{}-0", t.input).as_str(), 300, 600));
            }
            other => panic!("{guarantee:?}: expected records deleted, got {other}"),
        }
        assert!(err.to_string().contains("skip_deleted_records"), "the message says what to do: {err}");
        assert_eq!(t.count_output_uncommitted().await, 0, "{guarantee:?}: nothing past the gap processed");

        // Told to skip them: from the log's start, once.
        let run = spawn(t.pipeline(&app, guarantee).skip_deleted_records(true));
        t.wait_caught_up(&app, Duration::from_secs(60)).await;
        let summary = run.stop().await;
        assert_eq!(summary.records_in, 400, "{guarantee:?}: 600..1000 processed: {summary:?}");
        assert_eq!(t.count_output_uncommitted().await, 400, "{guarantee:?}");
    }
}

/// The check that nothing past a partition's committed offset was deleted unprocessed reads
/// where the partition's log starts. A partition whose committed offset points at a
/// transaction marker (its upstream writer is transactional) resumes one past it, so the
/// check runs at every start. When that read keeps failing, the partition is rewound and
/// read again until the task timeout, then the pipeline stops with an error naming the
/// partition and the read, never rewinding forever; when it fails a few times, the pipeline
/// goes on once it succeeds, with nothing skipped or processed twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_start_that_cannot_be_read_is_retried_then_stops_the_pipeline() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::ClientConfig;
    let t = topics("logstart", 1, 0, 100).await;
    let app = unique("logstart");
    // Two upstream transactions: records 0..300 with their marker at 300, then 700 more.
    let writer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &t.bootstrap)
        .set("transactional.id", unique("logstart-writer"))
        .create()
        .expect("producer");
    writer.init_transactions(Duration::from_secs(30)).expect("init");
    for range in [0..300u32, 300..1_000] {
        writer.begin_transaction().expect("begin");
        for i in range {
            let key = i.to_string();
            let mut record = BaseRecord::to(&t.input).key(&key).payload(&key).partition(0);
            while let Err((e, back)) = writer.send(record) {
                assert!(matches!(e.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::QueueFull)), "{e}");
                writer.poll(Duration::from_millis(10));
                record = back;
            }
        }
        writer.commit_transaction(Duration::from_secs(30)).expect("commit");
    }
    // The group processed the first transaction: its committed offset is the marker's.
    commit_group_at(&t, &app, 300);

    let task_timeout = Duration::from_secs(5);
    let run = spawn(
        t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .task_timeout(task_timeout)
            .inject_log_start_failures(u32::MAX),
    );
    let handle = run.handle.clone();
    let Ok(ended) = tokio::time::timeout(Duration::from_secs(60), run.finish()).await else {
        handle.shutdown();
        panic!("still running after 60 s with the log's start unreadable: rewinding forever");
    };
    let err = ended.expect_err("the pipeline must stop");
    let partition = format!("{}-0", t.input);
    match &err {
        Error::TaskTimeout { what, timeout, .. } => {
            assert!(what.contains(&partition) && what.contains("log"), "names the partition and the read: {err}");
            assert_eq!(*timeout, task_timeout);
        }
        other => panic!("expected a task timeout, got {other}"),
    }
    assert_eq!(t.count_output_uncommitted().await, 0, "nothing processed unchecked");

    let run = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).inject_log_start_failures(3));
    t.wait_caught_up(&app, Duration::from_secs(60)).await;
    let summary = run.stop().await;
    assert_eq!(summary.records_in, 700, "301..1001 processed once: {summary:?}");
    assert_eq!(t.count_output_uncommitted().await, 700, "nothing skipped, nothing twice");
}

/// Commits `offset` for the group `app` on partition 0 of `t`'s input, as a pipeline stopped
/// there would have.
fn commit_group_at(t: &crate::common::Topics, app: &str, offset: i64) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let mut at = TopicPartitionList::new();
    at.add_partition_offset(&t.input, 0, Offset::Offset(offset)).unwrap();
    let group: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &t.bootstrap)
        .set("group.id", app)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    group.commit(&at, CommitMode::Sync).expect("commit the group's offset");
}
