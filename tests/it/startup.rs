//! Startup errors: clear, bounded in time, naming what to fix.

use std::time::{Duration, Instant};

use kafka_eos::Error;

use crate::common::{bootstrap, noop, run_expecting_error, unique};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_brokers_fail_within_the_startup_timeout_naming_them() {
    let started = Instant::now();
    let err =
        run_expecting_error(noop("127.0.0.1:1", "nobody-home", "in").startup_timeout(Duration::from_secs(3))).await;
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_input_topic_is_named() {
    let missing = unique("no-such-topic");
    let err = run_expecting_error(noop(&bootstrap(), &unique("unknown"), &missing)).await;
    match err {
        Error::UnknownTopics { topics, .. } => assert_eq!(topics, vec![missing]),
        other => panic!("expected UnknownTopics, got {other}"),
    }
}

/// A processor writing to a topic that does not exist: the pipeline stops with the topic
/// named, soon after the first produce to it fails (the transaction's message timeout, or
/// librdkafka's unknown-topic verdict under at-least-once) — not after retrying the same
/// batch for the whole task timeout with `MessageTimedOut` and no topic named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_output_topic_stops_the_pipeline_naming_it() {
    use kafka_eos::{Guarantee, OutputRecord};
    let runs = [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce].map(
        |g| async move {
            let t = crate::common::topics(&format!("no-output-{}", g.as_str()), 1, 10, 10).await;
            let missing = unique("no-such-output");
            let out = missing.clone();
            let started = Instant::now();
            let err = run_expecting_error(noop(&t.bootstrap, &unique("no-output"), &t.input).guarantee(g).processor(
                move |ctx, _| {
                    ctx.emit(OutputRecord::to(out.as_str()).value("v"));
                    Ok(())
                },
            ))
            .await;
            match &err {
                Error::UnknownTopics { topics, .. } => assert_eq!(topics, &vec![missing], "{}", g.as_str()),
                other => panic!("{}: expected UnknownTopics, got {other}", g.as_str()),
            }
            assert!(err.to_string().contains("create them"), "{err}");
            (g, started.elapsed())
        },
    );
    for (g, elapsed) in futures::future::join_all(runs).await {
        println!("{}: stopped naming the missing output topic after {:.1} s", g.as_str(), elapsed.as_secs_f64());
        assert!(elapsed < Duration::from_secs(90), "{}: took {elapsed:?}", g.as_str());
    }
}

/// Declared output topics (and with them a window's late-records topic) are checked before
/// the pipeline joins its group, like the input: a missing one is named at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_declared_output_topic_is_named_at_start_up() {
    let t = crate::common::topics("declared-output", 1, 0, 10).await;
    let missing = unique("no-such-declared-output");
    let mut builder = noop(&t.bootstrap, &unique("declared-output"), &t.input);
    let out = builder.output_topic(missing.as_str());
    let started = Instant::now();
    let err = run_expecting_error(builder.processor(move |ctx, rec| {
        ctx.forward(rec, &out);
        Ok(())
    }))
    .await;
    match err {
        Error::UnknownTopics { topics, .. } => assert_eq!(topics, vec![missing]),
        other => panic!("expected UnknownTopics, got {other}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}
