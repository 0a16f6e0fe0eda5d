//! The `kafka-eos` command line, end to end: every subcommand is run as a user runs it (the
//! built binary, a real broker) and its output and exit code are checked. (`kafka-eos chaos`
//! is run end to end by `security::chaos_command_passes_client_properties_to_every_client`,
//! and at CI size by `.ci/run`.)

use std::process::Output;
use std::time::Duration;

use kafka_eos::Guarantee;

use crate::common::{spawn, topics, unique};

async fn kafka_eos(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-eos"))
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run kafka-eos {args:?}: {e}"))
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `broker start` leaves a cluster running after the command returns; `status` finds it
/// and `stop` stops it, after which `status` says so with exit code 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_start_status_stop() {
    let dir = std::env::temp_dir().join(unique("cli-broker"));
    let dir_arg = dir.to_str().unwrap();
    let out = kafka_eos(&["broker", "start", "--dir", dir_arg]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "broker start: {}\n{stdout}\n{stderr}", out.status);
    let bootstrap = stdout.trim().to_string();
    assert!(bootstrap.starts_with("127.0.0.1:"), "start prints the bootstrap servers: {stdout:?}");

    let out = kafka_eos(&["broker", "status", "--dir", dir_arg]).await;
    let (stdout, stderr) = text(&out);
    let still_running = out.status.success() && stdout.trim() == format!("running: {bootstrap}");

    let stop = kafka_eos(&["broker", "stop", "--dir", dir_arg]).await;
    let (stop_out, stop_err) = text(&stop);
    assert!(still_running, "status after start: {}\n{stdout}\n{stderr}", out.status);
    assert!(
        stop.status.success() && stop_out.trim() == "stopped",
        "broker stop: {}\n{stop_out}\n{stop_err}",
        stop.status
    );

    let out = kafka_eos(&["broker", "status", "--dir", dir_arg]).await;
    let (stdout, _) = text(&out);
    assert_eq!((out.status.code(), stdout.trim()), (Some(1), "not running"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `verify` passes an exactly-once copy (exit 0) and fails, with exit code 1 and the count
/// of missing records, when outputs are missing; with `--max-outputs-per-input` inputs
/// without an output pass (a filter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_a_copy_and_fails_a_partial_one() {
    const RECORDS: u64 = 2_000;
    let t = topics("cli-verify", 2, RECORDS, 50).await;
    let app = unique("cli-verify");
    let run = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition));
    t.wait_caught_up(&app, Duration::from_secs(120)).await;
    run.stop().await;

    let args = ["verify", "--bootstrap", &t.bootstrap, "--input", &t.input, "--output", &t.output];
    let out = kafka_eos(&[&args[..], &["--timeout-secs", "60"]].concat()).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "verify of a good copy: {}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains(&format!("verified: {RECORDS} in, {RECORDS} out, 0 duplicates, 0 missing")), "{stdout}");

    // More input that nothing copied: the same output now misses 500 records.
    t.produce(500).await;
    let out = kafka_eos(&[&args[..], &["--timeout-secs", "60"]].concat()).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "verify must fail: {stdout}\n{stderr}");
    assert!(stdout.contains("0 duplicates, 500 missing"), "{stdout}");

    // Judged as a filter (at most one output each), the 500 are filtered out, not missing.
    let filter = [&args[..], &["--timeout-secs", "60", "--max-outputs-per-input", "1"]].concat();
    let out = kafka_eos(&filter).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "verify as a filter: {}\n{stdout}\n{stderr}", out.status);
    assert!(
        stdout.contains(&format!("verified: {} in, {RECORDS} out, 0 duplicates, 0 missing", RECORDS + 500)),
        "{stdout}"
    );
}

/// `bench` copies with every subject, verifies each copy and prints one table row per
/// subject, every cell under a header (it used to panic on a row longer than its header).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_prints_a_verified_row_per_subject() {
    let stdout = bench("5000", &[]).await;
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with('|')).collect();
    assert!(rows.first().is_some_and(|h| h.contains("records/s") && h.contains("verified")), "{stdout}");
    let bars = rows[0].matches('|').count();
    assert!(rows.iter().all(|r| r.matches('|').count() == bars), "ragged table:\n{stdout}");
    for subject in ["ceiling", "at-least-once", "exactly-once", "exactly-once-per-consumer"] {
        let row = rows.iter().find(|r| r.split('|').nth(1).is_some_and(|c| c.trim() == subject));
        let row = row.unwrap_or_else(|| panic!("no row for {subject}:\n{stdout}"));
        let verified = row.trim_end_matches('|').rsplit('|').next().unwrap().trim();
        let expected = if subject == "ceiling" { ["ok", "-"].contains(&verified) } else { verified == "ok" };
        assert!(expected, "{subject} copy not verified ok: {row}");
    }
}

/// Runs `kafka-eos bench` on 2 partitions with `records` records and `extra` arguments;
/// asserts it succeeded and returns what it printed.
async fn bench(records: &str, extra: &[&str]) -> String {
    let bootstrap = crate::common::bootstrap();
    let mut args = vec!["bench", "--bootstrap", &bootstrap, "--partitions", "2", "--records", records];
    args.extend(["--duration-secs", "60"]);
    args.extend_from_slice(extra);
    let out = kafka_eos(&args).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "bench: {}\n{stdout}\n{stderr}", out.status);
    stdout
}

/// `bench --subject` measures only the subjects named, with `--workers` and
/// `--max-concurrent-transactions` passed to the pipelines; each copy still verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_measures_only_the_subjects_named_with_the_settings_given() {
    let subjects = ["--subject", "at-least-once", "--subject", "exactly-once"];
    let settings = ["--workers", "1", "--max-concurrent-transactions", "1"];
    let stdout = bench("3000", &[subjects, settings].concat()).await;
    let rows: Vec<&str> =
        stdout.lines().filter(|l| l.starts_with('|') && !l.contains("records/s") && !l.starts_with("|-")).collect();
    let cell = |row: &str, last: bool| -> String {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        (if last { cells.last() } else { cells.first() }).copied().unwrap_or_default().to_string()
    };
    let subjects: Vec<String> = rows.iter().map(|r| cell(r, false)).collect();
    assert_eq!(subjects, ["at-least-once", "exactly-once"], "{stdout}");
    assert!(rows.iter().all(|r| cell(r, true) == "ok"), "every copy verified:\n{stdout}");
}

/// `topic create`, `produce` (keys, a tombstone, a header), `tail` and `lag`, as a user
/// tries a pipeline by hand: the records come back as written, and the lag of a group that
/// copied the topic is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_produce_tail_and_lag() {
    let bootstrap = crate::common::bootstrap();
    let topic = unique("cli-data");
    let out = kafka_eos(&["topic", "create", &topic, "--partitions", "1", "--bootstrap", &bootstrap]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "topic create: {stdout}\n{stderr}");
    assert_eq!(stdout.trim(), format!("created {topic} (1 partitions)"));

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-eos"))
        .args(["produce", &topic, "--bootstrap", &bootstrap, "--key-separator", "\t", "--tombstones"])
        .args(["--header", "source=cli-test"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run kafka-eos produce");
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a\tfirst\nb\tsecond\na\t\nno key here\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "produce: {stdout}\n{stderr}");
    assert_eq!(stdout.trim(), format!("produced 4 records to {topic}"));

    let out = kafka_eos(&["tail", &topic, "--bootstrap", &bootstrap]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "tail: {stdout}\n{stderr}");
    assert_eq!(stdout, "0/0 a first\n0/1 b second\n0/2 a ∅\n0/3 ∅ no key here\n4 records\n", "{stderr}");
    let records =
        kafka_eos_testkit::read::read_all(&kafka_eos::admin::Client::new(&bootstrap), &topic, Duration::from_secs(30))
            .unwrap();
    assert!(records.iter().all(|r| r.header("source") == Some(&b"cli-test"[..])), "{records:?}");

    // A group that committed everything has lag 0; one that never ran has the whole topic.
    let out = kafka_eos(&["lag", "--group", &unique("cli-nobody"), "--topic", &topic, "--bootstrap", &bootstrap]).await;
    assert_eq!(text(&out).0.trim(), "lag 4");
    let out = kafka_eos(&[
        "lag",
        "--group",
        &unique("cli-nobody"),
        "--topic",
        &topic,
        "--wait",
        "2",
        "--bootstrap",
        &bootstrap,
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "lag 4 never reaches 0: {}", text(&out).0);
}

/// `lag` of a group that read all of a topic written in transactions is 0: each commit
/// marker takes an offset that no consumer gets, and the group's committed offset stays
/// below the end offset by the markers after its last record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_is_zero_for_a_group_that_read_a_transactional_topic_to_its_end() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let t = topics("cli-lag-txn", 1, 0, 0).await;
    let (b, input) = (t.bootstrap.clone(), t.input.clone());
    tokio::task::spawn_blocking(move || {
        let p: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &b)
            .set("transactional.id", unique("cli-lag-writer"))
            .create()
            .expect("producer");
        p.init_transactions(Duration::from_secs(30)).expect("init");
        for batch in 0..2 {
            p.begin_transaction().expect("begin");
            for i in 0..5 {
                let value = format!("{batch}-{i}");
                p.send(BaseRecord::<[u8], [u8]>::to(&input).partition(0).payload(value.as_bytes()))
                    .map_err(|(e, _)| e)
                    .expect("send");
            }
            p.commit_transaction(Duration::from_secs(30)).expect("commit");
        }
    })
    .await
    .unwrap();
    let app = unique("cli-lag-txn");
    let run = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition));
    run.wait_records_in(10, Duration::from_secs(60)).await;
    run.stop().await;
    let out = kafka_eos(&["lag", "--group", &app, "--topic", &t.input, "--bootstrap", &t.bootstrap]).await;
    assert_eq!(text(&out).0.trim(), "lag 0", "10 records and 2 markers, all read: {}", text(&out).1);
}
