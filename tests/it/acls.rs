//! Least privilege: pipelines on a broker with Kafka's authorizer, run by a principal that
//! holds only the ACLs granted to it.
//!
//! The module's own 1-node cluster has a SASL listener with the authorizer on; the test kit's
//! admin calls go through the plaintext listener, whose principal is a super user. The
//! broker's authorizer logs every decision (`kafka.authorizer.logger` at DEBUG): what the
//! pipeline's principal was allowed or denied, read back from the broker's log, is what the
//! tests compare with what they granted.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use kafka_eos::acl::{Acl, Operation, PatternType};
use kafka_eos::config::Properties;
use kafka_eos::state::Store;
use kafka_eos::{Guarantee, Pipeline};
use kafka_eos_testkit::admin::{self, ClientExt};
use kafka_eos_testkit::broker::acls::AclAdmin;
use kafka_eos_testkit::broker::{ClusterConfig, LocalCluster, SaslConfig, BOOTSTRAP_ENV};
use kafka_eos_testkit::verify::{verify, VerifyConfig};

use crate::common::{emit_reversed, unique};

const PASSWORD: &str = "acl-test-pw-7Qz";

/// This module's cluster (started on first use).
fn cluster() -> &'static LocalCluster {
    assert!(
        !std::env::var(BOOTSTRAP_ENV).is_ok_and(|b| !b.trim().is_empty()),
        "the ACL tests start their own broker with an authorizer; unset {BOOTSTRAP_ENV} or skip them \
         with `cargo test -- --skip acls`"
    );
    static CLUSTER: OnceLock<LocalCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let users = (0..9).fold(SaslConfig::default(), |s, i| s.user(format!("app{i}"), PASSWORD));
        let cfg = ClusterConfig {
            sasl: Some(users.with_authorizer()),
            log_levels: vec![("kafka.authorizer.logger".into(), "DEBUG".into())],
            ..Default::default()
        };
        LocalCluster::start(cfg).unwrap_or_else(|e| panic!("cannot start the authorizing test broker: {e}"))
    })
}

/// A principal of its own for each test (ACLs are per principal).
fn principal(n: usize) -> (String, Properties) {
    let user = format!("app{n}");
    let mut p = Properties::default();
    p.set("security.protocol", "SASL_PLAINTEXT");
    p.set("sasl.mechanism", "SCRAM-SHA-256");
    p.set("sasl.username", &user);
    p.set("sasl.password", PASSWORD);
    (format!("User:{user}"), p)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Every authorization decision the broker logged for `principal`, as `(verdict, operation,
/// resource)` lines, e.g. `("Allowed", "READ", "Topic:LITERAL:in")`.
fn decisions(cluster: &LocalCluster, principal: &str) -> BTreeSet<(String, String, String)> {
    let needle = format!("Principal = {principal} is ");
    let mut out = BTreeSet::new();
    for node in cluster.node_ids() {
        let Some(log) = cluster.log_path(node) else { continue };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            let Some(rest) = line.split_once(&needle).map(|(_, r)| r) else { continue };
            let verdict = rest.split_whitespace().next().unwrap_or_default().to_string();
            let field = |name: &str| {
                rest.split_once(&format!("{name} = "))
                    .map(|(_, r)| r.split_whitespace().next().unwrap_or_default().to_string())
            };
            if let (Some(op), Some(res)) = (field("operation"), field("resource")) {
                out.insert((verdict, op, res));
            }
        }
    }
    out
}

/// The pipeline under test: outputs reversed into `output`; `stateful`, it also counts
/// records per key in a store (whose changelog it creates).
fn pipeline(
    app: &str,
    input: &str,
    output: &str,
    guarantee: Guarantee,
    stateful: bool,
    props: &Properties,
) -> Pipeline {
    let mut builder = Pipeline::builder()
        .bootstrap_servers(cluster().sasl_bootstrap_servers().expect("SASL listener"))
        .application_id(app)
        .input_topic(input)
        .guarantee(guarantee)
        .handle_signals(false)
        .startup_timeout(Duration::from_secs(20))
        .task_timeout(Duration::from_secs(20))
        .client_properties(props);
    // Declared: the ACLs list only the output topics the builder knows.
    let out = builder.output_topic(output);
    let counts: Option<Store<String, u64>> = stateful.then(|| builder.store("counts"));
    builder
        .processor(move |ctx, r| {
            if let Some(counts) = &counts {
                let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
                let n = ctx.store(counts).get(&key)?.unwrap_or(0) + 1;
                ctx.store(counts).put(&key, &n)?;
            }
            emit_reversed(ctx, &out, r)
        })
        .build()
        .expect("valid pipeline")
}

/// Whether the authorizer's `decisions` show `acl` used: an operation it allows, on a
/// resource it matches, was allowed.
fn used(acl: &Acl, decisions: &BTreeSet<(String, String, String)>) -> bool {
    let op = match acl.operation {
        Operation::IdempotentWrite => "IDEMPOTENT_WRITE".to_string(),
        Operation::DescribeConfigs => "DESCRIBE_CONFIGS".to_string(),
        o => o.to_string().to_uppercase(),
    };
    let kind = acl.resource_type.to_string();
    decisions.iter().any(|(verdict, o, resource)| {
        let Some(name) = resource.strip_prefix(&format!("{kind}:LITERAL:")) else { return false };
        let matches = match acl.pattern_type {
            PatternType::Literal => name == acl.name,
            PatternType::Prefixed => name.starts_with(&acl.name),
        };
        verdict == "Allowed" && *o == op && matches
    })
}

/// Topics `<base>-in` and `<base>-out` (2 partitions) with 400 records in, made by the super user.
async fn topics(base: &str) -> (String, String) {
    let (input, output) = (format!("{base}-in"), format!("{base}-out"));
    let super_user = admin::Client::new(cluster().direct_bootstrap_servers());
    let (i, o) = (input.clone(), output.clone());
    blocking(move || {
        super_user.create_topic(&i, 2, 1)?;
        super_user.create_topic(&o, 2, 1)?;
        super_user.produce_sequence(&i, 2, RECORDS, 50)
    })
    .await
    .expect("topics and input");
    (input, output)
}

const RECORDS: u64 = 400;

/// Runs `p` until it has taken `records` records, then stops it.
async fn run_until(p: Pipeline, records: u64) {
    let handle = p.shutdown_handle();
    let run = tokio::spawn(p.run());
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while handle.summary().records_in < records {
        assert!(!run.is_finished(), "the pipeline stopped: {:?}", run.await);
        assert!(std::time::Instant::now() < deadline, "only {} of {records} records in", handle.summary().records_in);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handle.shutdown();
    run.await.expect("pipeline task").expect("pipeline");
}

/// Granted exactly [`Pipeline::acls`], a pipeline under `guarantee` runs and restarts (its
/// state read back), exactly once (at least once for at-least-once); the authorizer denied
/// it nothing and every ACL was used.
async fn exactly_its_acls(n: usize, guarantee: Guarantee, stateful: bool) {
    let c = cluster();
    let (principal, props) = principal(n);
    let (input, output) = topics(&unique("acl-t")).await;
    let app = unique("acl-app");
    let p = pipeline(&app, &input, &output, guarantee, stateful, &props);
    let acls = p.acls();
    for acl in &acls {
        eprintln!("{guarantee:?} stateful={stateful}: {}", acl.kafka_acls_command(&principal, "<bootstrap>"));
    }
    AclAdmin::new(&c.direct_bootstrap_servers()).expect("ACL admin").grant(&principal, &acls).expect("grant");
    run_until(p, RECORDS).await;
    // The restart restores the state from its changelog before its first record.
    let super_user = admin::Client::new(c.direct_bootstrap_servers());
    let i = input.clone();
    blocking(move || super_user.produce_sequence(&i, 2, RECORDS, 50)).await.expect("more input");
    run_until(pipeline(&app, &input, &output, guarantee, stateful, &props), RECORDS).await;

    let report = blocking(move || verify(&VerifyConfig::new(c.direct_bootstrap_servers(), &input, &output)))
        .await
        .expect("verify");
    assert_eq!((report.input_records, report.missing), (2 * RECORDS, 0), "{report}");
    if guarantee != Guarantee::AtLeastOnce {
        assert!(report.is_exactly_once(), "{report}");
    }
    let decisions = decisions(c, &principal);
    let denied: Vec<_> = decisions.iter().filter(|d| d.0 != "Allowed").collect();
    assert!(denied.is_empty(), "denied with exactly its ACLs: {denied:?}");
    let unused: Vec<String> = acls.iter().filter(|a| !used(a, &decisions)).map(|a| a.to_string()).collect();
    assert!(unused.is_empty(), "listed but never used: {unused:?}; decisions: {decisions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_partition_runs_with_exactly_its_acls() {
    exactly_its_acls(0, Guarantee::ExactlyOncePerPartition, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_consumer_runs_with_exactly_its_acls() {
    exactly_its_acls(1, Guarantee::ExactlyOncePerConsumer, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_runs_with_exactly_its_acls() {
    exactly_its_acls(2, Guarantee::AtLeastOnce, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_pipeline_runs_with_exactly_its_acls() {
    exactly_its_acls(3, Guarantee::ExactlyOncePerPartition, true).await;
}

/// How long a pipeline missing an ACL may take to stop: well below its task timeout (20 s),
/// so a refusal is never retried or replayed until that timeout.
const STOPS_WITHIN: Duration = Duration::from_secs(10);

/// Without each one of its ACLs in turn, a pipeline stops within [`STOPS_WITHIN`] with an
/// error that names the missing operation and the principal. Exactly-once, what it committed
/// before stopping holds nothing twice; granted the ACL, it runs on to exactly once (at least
/// once for at-least-once): stopping lost nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_one_of_its_acls_the_pipeline_stops_naming_it() {
    let c = cluster();
    let admin = AclAdmin::new(&c.direct_bootstrap_servers()).expect("ACL admin");
    let mut wrong = Vec::new();
    for guarantee in [Guarantee::ExactlyOncePerPartition, Guarantee::AtLeastOnce] {
        let count = pipeline("a-app", "a-in", "a-out", guarantee, true, &Properties::default()).acls().len();
        for i in 0..count {
            // Every name starts with `base`, so the ACLs sort the same way in every round.
            let (principal, props) = principal(4 + i % 4);
            let base = unique("acl-m");
            let (input, output) = topics(&base).await;
            let app = format!("{base}-app");
            let p = pipeline(&app, &input, &output, guarantee, true, &props);
            let mut granted = p.acls();
            let missing = granted.remove(i);
            admin.grant(&principal, &granted).expect("grant");
            let started = std::time::Instant::now();
            let outcome = tokio::time::timeout(Duration::from_secs(60), p.run()).await;
            let took = started.elapsed();
            eprintln!("{guarantee:?} without {missing}: after {took:?}: {outcome:?}");
            match outcome {
                Ok(Err(e))
                    if e.to_string().contains(&missing.operation.to_string())
                        && e.to_string().contains(&principal)
                        && took < STOPS_WITHIN => {}
                other => wrong.push(format!(
                    "{guarantee:?} without {missing}: after {took:?} (at most {STOPS_WITHIN:?}): {other:?}"
                )),
            }
            let exactly_once = guarantee != Guarantee::AtLeastOnce;
            let check = VerifyConfig::new(c.direct_bootstrap_servers(), &input, &output);
            let report = blocking(move || verify(&check)).await.expect("verify");
            if exactly_once && (report.duplicates, report.unexpected, report.order_violations) != (0, 0, 0) {
                wrong.push(format!("{guarantee:?} without {missing}: committed before it stopped: {report}"));
            }
            // Granted the missing ACL too, it goes on from where it stopped.
            admin.grant(&principal, std::slice::from_ref(&missing)).expect("grant the missing ACL");
            let report =
                run_until_complete(pipeline(&app, &input, &output, guarantee, true, &props), &input, &output).await;
            let complete = if exactly_once { report.is_exactly_once() } else { report.is_at_least_once() };
            if !complete {
                wrong.push(format!("{guarantee:?} without {missing}, then with it: {report}"));
            }
            granted.push(missing);
            admin.revoke(&principal, &granted).expect("revoke");
        }
    }
    assert!(
        wrong.is_empty(),
        "a missing ACL must stop the pipeline within {STOPS_WITHIN:?} with an error naming it, committing nothing \
         twice and losing nothing:\n{}",
        wrong.join("\n")
    );
}

/// An ACL revoked while the pipeline runs stops it at the first request that needs it (a
/// fetch, a partition added to the transaction, the offsets, a transactional call) within
/// [`STOPS_WITHIN`] of the next input, naming the ACL; the refused transaction is not
/// committed, so nothing is committed twice, and granted the ACL again the pipeline runs
/// on to exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_revoked_while_it_runs_stops_the_pipeline_naming_it() {
    let c = cluster();
    let admin = AclAdmin::new(&c.direct_bootstrap_servers()).expect("ACL admin");
    let mut wrong = Vec::new();
    let (principal, props) = principal(8);
    let guarantee = Guarantee::ExactlyOncePerPartition;
    // Every ACL a running pipeline uses again; a changelog's `Create`, `DescribeConfigs` and
    // `Read` are used at start-up and at a restore only.
    let rounds: Vec<usize> = pipeline("r-app", "r-in", "r-out", guarantee, true, &Properties::default())
        .acls()
        .iter()
        .enumerate()
        .filter(|(_, a)| !(a.name.ends_with("-changelog") && a.operation != Operation::Write))
        .map(|(i, _)| i)
        .collect();
    for i in rounds {
        let base = unique("acl-r");
        let (input, output) = topics(&base).await;
        let app = format!("{base}-app");
        let p = pipeline(&app, &input, &output, guarantee, true, &props);
        let granted = p.acls();
        let revoked = granted[i].clone();
        admin.grant(&principal, &granted).expect("grant");
        let handle = p.shutdown_handle();
        let run = tokio::spawn(p.run());
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        while handle.summary().records_in < RECORDS && !run.is_finished() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        admin.revoke(&principal, std::slice::from_ref(&revoked)).expect("revoke");
        let super_user = admin::Client::new(c.direct_bootstrap_servers());
        let i2 = input.clone();
        let more = std::time::Instant::now();
        blocking(move || super_user.produce_sequence(&i2, 2, RECORDS, 50)).await.expect("more input");
        let outcome = tokio::time::timeout(Duration::from_secs(60), run).await;
        let took = more.elapsed();
        eprintln!("revoked {revoked}: stopped {took:?} after more input began: {outcome:?}");
        match outcome {
            Ok(Ok(Err(e)))
                if e.to_string().contains(&revoked.operation.to_string())
                    && e.to_string().contains(&principal)
                    && e.to_string().contains(&revoked.name)
                    && took < STOPS_WITHIN => {}
            other => wrong.push(format!("revoked {revoked}: after {took:?} (at most {STOPS_WITHIN:?}): {other:?}")),
        }
        let check = VerifyConfig::new(c.direct_bootstrap_servers(), &input, &output);
        let report = blocking(move || verify(&check)).await.expect("verify");
        if (report.duplicates, report.unexpected, report.order_violations) != (0, 0, 0) {
            wrong.push(format!("revoked {revoked}: committed before it stopped: {report}"));
        }
        admin.grant(&principal, std::slice::from_ref(&revoked)).expect("grant again");
        let report =
            run_until_complete(pipeline(&app, &input, &output, guarantee, true, &props), &input, &output).await;
        if !report.is_exactly_once() || report.input_records != 2 * RECORDS {
            wrong.push(format!("revoked {revoked}, then granted again: {report}"));
        }
        admin.revoke(&principal, &granted).expect("revoke");
    }
    assert!(
        wrong.is_empty(),
        "a revoked ACL must stop the running pipeline within {STOPS_WITHIN:?} naming it, committing nothing \
         twice and losing nothing:\n{}",
        wrong.join("\n")
    );
}

/// Runs `p` until the verifier finds every input record of `input` in `output` (or 90 s
/// pass), stops it, and returns the verifier's last report.
async fn run_until_complete(p: Pipeline, input: &str, output: &str) -> kafka_eos_testkit::verify::Report {
    let handle = p.shutdown_handle();
    let run = tokio::spawn(p.run());
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let check = VerifyConfig::new(cluster().direct_bootstrap_servers(), input, output);
    let report = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let c = check.clone();
        let report = blocking(move || verify(&c)).await.expect("verify");
        if report.missing == 0 || run.is_finished() || std::time::Instant::now() >= deadline {
            break report;
        }
    };
    handle.shutdown();
    run.await.expect("pipeline task").expect("pipeline");
    report
}
