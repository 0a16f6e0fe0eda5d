//! Security settings: a pipeline over a `SASL_PLAINTEXT` listener with SCRAM credentials,
//! PLAIN, and wrong credentials failing fast with a clear error that leaks no secret.
//!
//! These tests need a broker whose users they know, so they start their own 1-node
//! [`LocalCluster`] with a SASL listener (shared by the tests of this module). With
//! `KAFKA_BOOTSTRAP` set they fail with an explanation instead of passing silently: the
//! external cluster's listeners and users are unknown, and a skipped security test would
//! look green (skip them explicitly with `cargo test -- --skip security`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kafka_eos::config::Properties;
use kafka_eos::{Error, Guarantee, Pipeline};
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::broker::{ClusterConfig, LocalCluster, SaslConfig, BOOTSTRAP_ENV};
use kafka_eos_testkit::verify::{verify, VerifyConfig};

use crate::common::{emit_reversed, noop, run_expecting_error, spawn, unique};

const USER: &str = "alice";
const PASSWORD: &str = "alice-s3cret-Q7x";
const WRONG_PASSWORD: &str = "not-alices-pw-K9z";

/// The SASL bootstrap servers of this module's own cluster (started on first use).
fn sasl_bootstrap() -> String {
    if std::env::var(BOOTSTRAP_ENV).is_ok_and(|b| !b.trim().is_empty()) {
        panic!(
            "the security tests need a local broker with a SASL listener and known users, which \
             they start themselves; {BOOTSTRAP_ENV} names an external cluster whose listeners and \
             credentials they cannot know. Unset {BOOTSTRAP_ENV} (Java 17 and, once, Maven are \
             needed) or skip these tests with `cargo test -- --skip security`"
        );
    }
    static CLUSTER: OnceLock<LocalCluster> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
            let cfg = ClusterConfig { sasl: Some(SaslConfig::with_user(USER, PASSWORD)), ..Default::default() };
            LocalCluster::start(cfg).unwrap_or_else(|e| panic!("cannot start the SASL test broker: {e}"))
        })
        .sasl_bootstrap_servers()
        .expect("the cluster was started with a SASL listener")
}

/// Client properties for `mechanism` with `password`.
fn sasl(mechanism: &str, password: &str) -> Properties {
    let mut p = Properties::default();
    p.set("security.protocol", "SASL_PLAINTEXT");
    p.set("sasl.mechanism", mechanism);
    p.set("sasl.username", USER);
    p.set("sasl.password", password);
    p
}

/// [`sasl_bootstrap`] from async code, its panic (no broker, `KAFKA_BOOTSTRAP`) kept as is.
async fn cluster() -> String {
    tokio::task::spawn_blocking(sasl_bootstrap).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> kafka_eos::Result<T> + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap().unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_over_sasl_scram_is_exactly_once() {
    let bootstrap = cluster().await;
    let (input, output, app) = (unique("sasl-in"), unique("sasl-out"), unique("sasl-app"));
    let (partitions, records) = (3, 3_000);

    // Topics and input through PLAIN.
    let plain = admin::Client::new(&bootstrap).properties(sasl("PLAIN", PASSWORD));
    let (a, i, o) = (plain.clone(), input.clone(), output.clone());
    blocking(move || {
        a.create_topic(&i, partitions, 1)?;
        a.create_topic(&o, partitions, 1)?;
        a.produce_sequence(&i, partitions, records, 100)
    })
    .await;

    // The pipeline (consumer and every producer) through SCRAM-SHA-256.
    let scram256 = sasl("SCRAM-SHA-256", PASSWORD);
    let out = kafka_eos::Topic::new(&output);
    let builder = Pipeline::builder()
        .bootstrap_servers(&bootstrap)
        .application_id(&app)
        .input_topic(&input)
        .guarantee(Guarantee::ExactlyOncePerPartition)
        .handle_signals(false)
        .startup_timeout(Duration::from_secs(20))
        .processor(move |ctx, r| emit_reversed(ctx, &out, r));
    let running = spawn(builder.client_properties(&scram256));
    running.wait_records_in(records, Duration::from_secs(90)).await;
    let lag = admin::Client::new(&bootstrap).properties(scram256.clone());
    let (g, t) = (app.clone(), vec![input.clone()]);
    blocking(move || lag.wait_for_catch_up(&g, &t, Duration::from_secs(60))).await;
    let summary = running.stop().await;
    assert_eq!(summary.records_in, records, "{summary:?}");

    // The verifier through SCRAM-SHA-512.
    let mut cfg = VerifyConfig::new(&bootstrap, &input, &output);
    cfg.client_properties = sasl("SCRAM-SHA-512", PASSWORD);
    let report = blocking(move || verify(&cfg)).await;
    eprintln!("over SASL: {report}");
    assert_eq!(report.input_records, records);
    assert_eq!((report.duplicates, report.missing), (0, 0), "{report}");
    assert!(report.is_exactly_once(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_fails_within_the_startup_timeout_without_leaking_it() {
    let bootstrap = cluster().await;
    let input = unique("sasl-wrong-in");
    let a = admin::Client::new(&bootstrap).properties(sasl("SCRAM-SHA-256", PASSWORD));
    let i = input.clone();
    blocking(move || a.create_topic(&i, 1, 1)).await;

    for mechanism in ["SCRAM-SHA-256", "PLAIN"] {
        let startup_timeout = Duration::from_secs(10);
        let builder = noop(&bootstrap, &unique("sasl-wrong"), &input).startup_timeout(startup_timeout);
        let pipeline = builder.client_properties(&sasl(mechanism, WRONG_PASSWORD)).build().unwrap();
        let config_debug = format!("{:?}", pipeline.config());
        let started = Instant::now();
        let err = pipeline.run().await.expect_err("a wrong password must not start the pipeline");
        let elapsed = started.elapsed();
        let (display, debug) = (err.to_string(), format!("{err:?}"));
        eprintln!("{mechanism} with a wrong password failed after {elapsed:?}: {display}");
        assert!(matches!(err, Error::Unreachable { .. }), "{debug}");
        // A refused authentication is definitive: reported at once, not at the timeout.
        assert!(elapsed < startup_timeout, "took {elapsed:?}");
        assert!(display.contains(&bootstrap), "{display}");
        assert!(display.contains("security settings") && display.contains("credentials"), "{display}");
        assert!(display.to_lowercase().contains("authentication"), "the cause should be named: {display}");
        for text in [&display, &debug, &config_debug] {
            assert!(!text.contains(WRONG_PASSWORD) && !text.contains(PASSWORD), "a password leaked: {text}");
        }
        assert!(config_debug.contains("sasl.password") && config_debug.contains("[redacted]"), "{config_debug}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_security_settings_fail_within_the_startup_timeout_naming_them() {
    // A plaintext client on the SASL listener: the broker just drops the connection, so all
    // the client sees is a timeout, and the error must point at the security settings.
    let bootstrap = cluster().await;
    let startup_timeout = Duration::from_secs(3);
    let started = Instant::now();
    // A plaintext client must not get through a SASL listener.
    let err = run_expecting_error(noop(&bootstrap, &unique("sasl-none"), "in").startup_timeout(startup_timeout)).await;
    let elapsed = started.elapsed();
    eprintln!("no security settings: failed after {elapsed:?}: {err}");
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(elapsed < startup_timeout + Duration::from_secs(5), "took {elapsed:?}");
    let display = err.to_string();
    assert!(display.contains(&bootstrap) && display.contains("security settings"), "{display}");
}

/// `kafka-eos chaos` against a cluster that requires SASL: every client the suite creates —
/// topic creation, the input producer, the instance processes' pipelines, the concurrent
/// reader, the verifier — must get the security settings, or it cannot connect. The
/// password is only in the `--client-config` file (the `-X` flags add the rest and
/// override the file's mechanism); the command's output names the properties with the
/// password redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_command_passes_client_properties_to_every_client() {
    let bootstrap = cluster().await;
    let dir = std::env::temp_dir().join(unique("chaos-sasl"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("client.properties");
    let mut in_file = sasl("PLAIN", PASSWORD);
    in_file.set("sasl.mechanism", "GSSAPI"); // overridden by -X below
    std::fs::write(&file, kafka_eos_cli::client_config::to_text(&in_file)).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kafka-eos"))
        .args(["chaos", "--bootstrap", &bootstrap, "--scenario", "random-aborts", "--records", "3000"])
        .args(["--partitions", "2", "--replication", "1", "--seed", "7", "--rebalancing", "eager"])
        // Accepted; no local cluster here, so nothing to copy (and the scenario passes).
        .arg("--keep-data-on-failure")
        .arg("--client-config")
        .arg(&file)
        .args(["-X", "sasl.mechanism=SCRAM-SHA-256", "--property", "client.id=kafka-eos-chaos-test"])
        .output()
        .await
        .expect("run kafka-eos chaos");
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{stdout}");
    assert!(out.status.success(), "kafka-eos chaos failed: {}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("0 duplicates, 0 missing, 0 order violations"), "{stdout}");
    assert!(stdout.contains("rebalancing eager"), "the instances run the protocol asked for: {stdout}");
    assert!(stdout.contains("client properties:") && stdout.contains("SCRAM-SHA-256"), "{stdout}");
    assert!(stdout.contains("[redacted]") && !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD), "{stdout}");
}
