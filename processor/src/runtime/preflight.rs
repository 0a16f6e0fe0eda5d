//! The start-up check: the cluster answers, the credentials are accepted, every topic the
//! pipeline reads or writes exists (changelogs are created here), and the principal holds
//! the topic ACLs it needs, as far as the brokers tell.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::acl::authorized::{first_missing, topic_operations};
use crate::acl::denied::not_authorized;
use crate::acl::{Acl, Operation, ResourceType};
use crate::config::acls::required;
use crate::config::{Exhausted, PipelineConfig};
use crate::error::{Error, KafkaError, Result};

/// How long a topic may stay missing from the metadata before the start-up check fails.
const TOPIC_GRACE: Duration = Duration::from_secs(3);

/// The `wanted` topics that `md` does not list with partitions.
fn missing_topics(md: &rdkafka::metadata::Metadata, wanted: &[String]) -> Vec<String> {
    let exists =
        |t: &str| md.topics().iter().any(|mt| mt.name() == t && mt.error().is_none() && !mt.partitions().is_empty());
    wanted.iter().filter(|t| !exists(t)).cloned().collect()
}

/// What the start-up check learnt of the cluster.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cluster {
    /// Brokers in the metadata.
    pub brokers: usize,
    /// Partitions of the first input topic: what a key is placed among for queries.
    pub input_partitions: i32,
}

/// Checks, within the startup timeout, that the cluster answers and the topics exist.
///
/// librdkafka tells the cause of a refused SASL authentication or TLS certificate only in an
/// error event (the metadata request just fails with a transport error, and librdkafka
/// keeps reconnecting), so the probe polls for error events between metadata attempts and
/// fails at once on those, naming the cause; other connection errors are quoted when the
/// startup timeout runs out. Secrets are redacted from whatever is quoted.
pub(crate) fn preflight(cfg: &PipelineConfig) -> Result<Cluster> {
    /// Keeps the reason of librdkafka's last telling error event, `true` once definitive.
    #[derive(Default)]
    struct Probe {
        last: Mutex<Option<(bool, String)>>,
    }
    impl ClientContext for Probe {
        fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
            use rdkafka::types::RDKafkaErrorCode as C;
            tracing::debug!(%error, reason, "preflight probe");
            let code = error.rdkafka_error_code();
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            // "1/1 brokers are down" follows every failure: it must not hide the cause.
            let keep = last.as_ref().is_some_and(|(failed, _)| *failed || code == Some(C::AllBrokersDown));
            if !keep {
                *last = Some((matches!(code, Some(C::Authentication | C::SSL)), reason.to_string()));
            }
        }
    }
    impl ConsumerContext for Probe {}

    let mut cc = cfg.consumer_config();
    cc.set("log_level", "3").set("enable.auto.commit", "false");
    let probe: BaseConsumer<Probe> = cc.create_with_context(Probe::default()).map_err(|e| {
        Error::Config(format!("consumer configuration rejected by librdkafka: {}", crate::config::client_error(&e)))
    })?;
    let unreachable = |detail: String| Error::Unreachable {
        servers: cfg.bootstrap_servers.clone(),
        timeout: cfg.startup_timeout,
        detail: cfg.consumer_properties.redact(&detail),
    };
    let deadline = Instant::now() + cfg.startup_timeout;
    let mut attempt = Duration::from_millis(500);
    let md = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let e = match probe.fetch_metadata(None, attempt.min(remaining)) {
            Ok(md) => break md,
            Err(e) => e,
        };
        // Error events (queued behind log events, possibly just after the failure) reach
        // Probe::error while the consumer is polled; it has no subscription, so no records.
        let drained = Instant::now() + Duration::from_millis(100);
        while Instant::now() < drained {
            probe.poll(Duration::from_millis(20));
        }
        let last = probe.context().last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match last {
            Some((true, reason)) => return Err(unreachable(format!("authentication failed: {reason}"))),
            _ if Instant::now() >= deadline => {
                return Err(unreachable(match last {
                    Some((_, reason)) => format!("{e}; last error: {reason}"),
                    None => e.to_string(),
                }))
            }
            _ => attempt = (attempt * 2).min(Duration::from_secs(5)),
        }
    };
    ensure_internal_topics(cfg, &md)?;
    // Inputs, declared outputs and the dead-letter topic must exist before anything runs: a
    // missing output would otherwise surface only as produce timeouts in the first batch.
    let mut wanted = cfg.input_topics.clone();
    wanted.extend(cfg.output_topics.iter().cloned());
    wanted.extend(cfg.tables.iter().chain(&cfg.global_tables).map(|t| t.topic.clone()));
    if let Exhausted::DeadLetter(t) = &cfg.processor_error_policy.then {
        wanted.push(t.clone());
    }
    wanted.dedup();
    // Brokers learn of a new topic asynchronously: one created moments ago (a deployment
    // script, a test harness) can be missing from the answering broker's metadata for a
    // while — seen on a loaded 3-broker cluster. Look again for up to TOPIC_GRACE before
    // calling a topic missing.
    let mut md = md;
    let grace = (Instant::now() + TOPIC_GRACE).min(deadline);
    loop {
        let missing = missing_topics(&md, &wanted);
        if missing.is_empty() {
            break;
        }
        if let Some(refused) = refused_topic(&probe, cfg, &missing, deadline) {
            return Err(refused);
        }
        if Instant::now() >= grace {
            return Err(Error::UnknownTopics { topics: missing, servers: cfg.bootstrap_servers.clone() });
        }
        std::thread::sleep(Duration::from_millis(250));
        if let Ok(again) = probe.fetch_metadata(None, grace.saturating_duration_since(Instant::now())) {
            md = again;
        }
    }
    let partitions = |t: &str| md.topics().iter().find(|mt| mt.name() == t).map_or(0, |mt| mt.partitions().len());
    if cfg.co_partitioned() {
        let counts: Vec<(&str, usize)> = cfg.input_topics.iter().map(|t| (t.as_str(), partitions(t))).collect();
        if counts.iter().any(|(_, n)| *n != counts[0].1) {
            return Err(Error::Config(format!(
                "the input topics of a stateful pipeline must be co-partitioned (the same partition count, keyed \
                 alike): input partition n of each shares partition n's state, but they have {counts:?} partitions"
            )));
        }
    }
    for table in &cfg.tables {
        for input in &cfg.input_topics {
            if partitions(&table.topic) != partitions(input) {
                return Err(Error::Config(format!(
                    "table topic {} has {} partitions and input topic {input} has {}: a table must be co-partitioned \
                     with the input (same partition count, same keys), because input partition n looks up table \
                     partition n only. Recreate the table topic with {2} partitions (and the same keys)",
                    table.topic,
                    partitions(&table.topic),
                    partitions(input)
                )));
            }
        }
    }
    let input = partitions(&cfg.input_topics[0]) as i32;
    crate::state::changelog::create_topics(cfg, input)?;
    check_topic_acls(&probe, cfg)?;
    crate::state::changelog::check_topics(cfg, input)?;
    if cfg.advertise.is_some() {
        crate::query::endpoints::ensure_topic(cfg)?;
    }
    let brokers = md.brokers().len();
    let tasks = if cfg.co_partitioned() {
        partitions(&cfg.input_topics[0])
    } else {
        cfg.input_topics.iter().map(|t| partitions(t)).sum()
    };
    super::limits::warn_at_start(cfg, tasks, brokers);
    Ok(Cluster { brokers, input_partitions: partitions(&cfg.input_topics[0]) as i32 })
}

/// Creates the [repartition topics](crate::PipelineBuilder::repartition) and the
/// [outbox](crate::PipelineBuilder::outbox_sink) topic that do not exist, with the first
/// input topic's partition count (a repartition topic is co-partitioned with it, an outbox
/// record goes to its input's partition) and the changelogs' replication; refuses one that
/// exists with another count. Nothing to do while the input is missing: the topic check
/// reports it.
fn ensure_internal_topics(cfg: &PipelineConfig, md: &rdkafka::metadata::Metadata) -> Result<()> {
    let Some(input) = md.topics().iter().find(|t| t.name() == cfg.input_topics[0]).map(|t| t.partitions().len()) else {
        return Ok(());
    };
    let outbox = cfg.outbox.iter().map(|o| o.topic.to_string());
    let internal: Vec<String> = cfg.repartition_topics.iter().cloned().chain(outbox).collect();
    if internal.is_empty() || input == 0 {
        return Ok(());
    }
    let admin = crate::admin::Client::new(&cfg.bootstrap_servers).properties(cfg.consumer_properties.clone());
    for topic in &internal {
        // No retention of their own: the runtime deletes their records once read and
        // committed (`purge`), never before.
        let configs = [("cleanup.policy", "delete"), ("retention.ms", "-1")];
        match admin.create_topic_with(topic, input as i32, cfg.changelog_replication, &configs) {
            Ok(()) => {}
            Err(Error::Config(m)) if m.contains("exists with") => {
                return Err(Error::Config(format!(
                    "the pipeline's {m}; it must have the partition count of input topic {} ({input}), \
                     whose partition n it goes with. Delete it once the pipeline is stopped and every record \
                     in it processed (it is recreated at start-up)",
                    cfg.input_topics[0]
                )))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The first of `missing` (topics the metadata does not list) that the brokers refuse to
/// describe to this principal, as the error naming the ACL the pipeline needs on it. A
/// listing of every topic leaves out those the principal may not describe; asked for by
/// name, they are `TOPIC_AUTHORIZATION_FAILED`, whether they exist or not.
fn refused_topic<C: ConsumerContext>(
    probe: &BaseConsumer<C>,
    cfg: &PipelineConfig,
    missing: &[String],
    deadline: Instant,
) -> Option<Error> {
    let refused = missing.iter().find_map(|topic| {
        let timeout = deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(5));
        let md = probe.fetch_metadata(Some(topic), timeout).ok()?;
        let code = md.topics().first()?.error().map(RDKafkaErrorCode::from)?;
        (code == RDKafkaErrorCode::TopicAuthorizationFailed).then_some((topic, code))
    });
    let (topic, code) = refused?;
    // Its first use in the list: an input's `Read`, an output's `Write`.
    let needed = required(cfg).into_iter().find(|a| a.resource_type == ResourceType::Topic && a.name == *topic);
    let acl = needed.unwrap_or_else(|| Acl::literal(ResourceType::Topic, topic, Operation::Describe));
    let source = KafkaError::new(rdkafka::error::KafkaError::MetadataFetch(code));
    let during = format!("checking at start-up that topic {topic} exists");
    Some(not_authorized(&cfg.consumer_properties, &cfg.bootstrap_servers, acl, during, Some(source)))
}

/// Stops at start-up on the first topic ACL of [`Pipeline::acls`](crate::Pipeline::acls)
/// that the brokers say this principal lacks ([`crate::acl::authorized`]): a missing ACL is
/// named now rather than at its first use, which can come much later (a changelog's `Read`,
/// at the first restore). `Create` is left to the creation that needs it: a topic that
/// exists needs none. Brokers that do not tell leave this unchecked.
fn check_topic_acls<C: ConsumerContext>(probe: &BaseConsumer<C>, cfg: &PipelineConfig) -> Result<()> {
    let uses: Vec<(String, Operation)> = required(cfg)
        .into_iter()
        .filter(|a| a.resource_type == ResourceType::Topic && a.operation != Operation::Create)
        .map(|a| (a.name, a.operation))
        .collect();
    let mut topics: Vec<String> = uses.iter().map(|(t, _)| t.clone()).collect();
    topics.dedup();
    let held = match topic_operations(probe.client(), &topics, Duration::from_secs(10)) {
        Ok(held) => held,
        Err(why) => {
            tracing::debug!(%why, "the principal's operations on its topics are unknown: not checked at start-up");
            return Ok(());
        }
    };
    match first_missing(&held, &uses) {
        Some((topic, operation)) => {
            let acl = Acl::literal(ResourceType::Topic, topic, *operation);
            let during = "checking at start-up what the principal may do with the pipeline's topics".to_string();
            Err(not_authorized(&cfg.consumer_properties, &cfg.bootstrap_servers, acl, during, None))
        }
        None => Ok(()),
    }
}
