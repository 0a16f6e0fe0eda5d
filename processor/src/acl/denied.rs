//! A request the brokers refused for want of an ACL, as the error that stops the pipeline
//! ([`Error::NotAuthorized`]): which Kafka error codes are refusals, which ACL a refusal at a
//! given use asks for, and whom to grant it to.
//!
//! A refusal is never retried or replayed: the brokers refuse before acting, so nothing
//! needs reconciling, and nothing but an operator's grant lets the same request through.

use rdkafka::client::{Client, ClientContext};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::types::RDKafkaErrorCode as C;

use super::authorized::{first_missing, topic_operations};
use super::{Acl, Operation, ResourceType};
use crate::config::{acls, PipelineConfig, Properties};
use crate::error::{refusal_code, Error, KafkaError, NotAuthorized};

/// The ACL a refusal with `code` asks for, the client having used `topic` for `operation`:
/// a topic refusal is about that topic; the others about the pipeline's group, its
/// transactional ids, or the cluster (an idempotent producer's id).
pub(crate) fn wanted(cfg: &PipelineConfig, code: C, topic: &str, operation: Operation) -> Acl {
    match code {
        C::GroupAuthorizationFailed => acls::group(cfg),
        C::TransactionalIdAuthorizationFailed => acls::transactional_ids(cfg),
        C::ClusterAuthorizationFailed => Acl::cluster(Operation::IdempotentWrite),
        C::DelegationTokenAuthorizationFailed => Acl::literal(ResourceType::DelegationToken, "*", Operation::Describe),
        _ => Acl::literal(ResourceType::Topic, topic, operation),
    }
}

/// `e` as [`Error::NotAuthorized`] if it is a refusal, the client (with `props`) having used
/// `topic` for `operation` while doing what `during` says; `None` for any other error.
pub(crate) fn refusal(
    cfg: &PipelineConfig,
    props: &Properties,
    e: &RdKafkaError,
    (topic, operation): (&str, Operation),
    during: impl FnOnce() -> String,
) -> Option<Error> {
    let code = refusal_code(e)?;
    let acl = wanted(cfg, code, topic, operation);
    Some(not_authorized(props, &cfg.bootstrap_servers, acl, during(), Some(KafkaError::new(e.clone()))))
}

/// The error naming `acl`, which the principal of a client with `props` lacks on the
/// cluster at `bootstrap`.
pub(crate) fn not_authorized(
    props: &Properties,
    bootstrap: &str,
    acl: Acl,
    during: String,
    source: Option<KafkaError>,
) -> Error {
    let principal = Principal::of(props);
    let command = acl.kafka_acls_command(principal.name.as_deref().unwrap_or("User:<principal>"), bootstrap);
    Error::NotAuthorized(Box::new(NotAuthorized { principal: principal.shown, acl, during, command, source }))
}

/// The topic a refusal that names none was about: the first of `uses` (a topic and the
/// operation needed on it) this principal does not hold, by the brokers' authorized
/// operations ([`topic_operations`]); the first of `uses` when they cannot tell.
pub(crate) fn locate<Ctx: ClientContext>(
    client: &Client<Ctx>,
    uses: &[(String, Operation)],
    timeout: std::time::Duration,
) -> Option<(String, Operation)> {
    let topics: Vec<String> = uses.iter().map(|(t, _)| t.clone()).collect();
    let found = match topic_operations(client, &topics, timeout) {
        Ok(held) => first_missing(&held, uses).cloned(),
        Err(why) => {
            tracing::debug!(%why, "the principal's operations on its topics are unknown");
            None
        }
    };
    found.or_else(|| uses.first().cloned())
}

/// Whom the brokers see a client as, as far as its own settings tell (the principal of a
/// certificate or a token is the brokers' to derive). Only names are read: never a secret.
struct Principal {
    /// `User:<name>`, when the settings name it.
    name: Option<String>,
    /// How a message names it.
    shown: String,
}

impl Principal {
    fn of(props: &Properties) -> Principal {
        let named = |name: String| Principal { shown: name.clone(), name: Some(name) };
        let described = |shown: &str| Principal { name: None, shown: shown.to_string() };
        let setting = |key: &str| props.get(key).map(str::to_ascii_uppercase);
        match setting("security.protocol").as_deref().unwrap_or("PLAINTEXT") {
            "SASL_PLAINTEXT" | "SASL_SSL" => match (setting("sasl.mechanism").as_deref(), props.get("sasl.username")) {
                (Some("PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"), Some(user)) => named(format!("User:{user}")),
                (Some("OAUTHBEARER"), _) => described("the OAuth token's principal (User:<its subject>)"),
                // librdkafka's default mechanism.
                (None | Some("GSSAPI"), _) => described(
                    "the Kerberos principal's short name (User:<name>, as the brokers' \
                     sasl.kerberos.principal.to.local.rules map sasl.kerberos.principal)",
                ),
                _ => described("the SASL user's principal (User:<sasl.username>)"),
            },
            "SSL"
                if ["ssl.certificate.location", "ssl.certificate.pem", "ssl.keystore.location"]
                    .iter()
                    .any(|k| props.get(k).is_some()) =>
            {
                described(
                    "the TLS certificate's principal (User:<its distinguished name>, as the brokers' \
                     ssl.principal.mapping.rules map it)",
                )
            }
            // No authentication (or TLS without a client certificate).
            _ => named("User:ANONYMOUS".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{classify, is_refusal, ErrorClass};
    use crate::runtime::reconcile::{verdict, Verdict};
    use crate::txn::{Step, StepError};

    /// Every authorization code librdkafka can report.
    const REFUSALS: [C; 5] = [
        C::TopicAuthorizationFailed,
        C::GroupAuthorizationFailed,
        C::ClusterAuthorizationFailed,
        C::TransactionalIdAuthorizationFailed,
        C::DelegationTokenAuthorizationFailed,
    ];

    fn cfg() -> PipelineConfig {
        crate::Pipeline::builder()
            .bootstrap_servers("b:9092")
            .application_id("app")
            .input_topic("in")
            .processor(|_, _| Ok(()))
            .build()
            .expect("valid")
            .config()
            .clone()
    }

    /// Wherever a refusal surfaces — a delivery report, a transactional call, a consumer's
    /// fetch or group request, an offset fetch, an admin call — it is classed not
    /// authorized, and no step of the cycle retries, replays or reconciles it.
    #[test]
    fn every_authorization_code_is_never_retried_anywhere() {
        let steps = [
            Step::Create,
            Step::Init,
            Step::Begin,
            Step::Produce,
            Step::AwaitAcks,
            Step::SendOffsets,
            Step::Commit,
            Step::Abort,
        ];
        for code in REFUSALS {
            assert!(is_refusal(code));
            // (A transactional call's refusal, which tests cannot build, is in
            // `txn/mock_cluster_tests.rs`.)
            let errors = [
                RdKafkaError::MessageProduction(code),
                RdKafkaError::MessageConsumption(code),
                RdKafkaError::MetadataFetch(code),
                RdKafkaError::OffsetFetch(code),
                RdKafkaError::AdminOp(code),
                RdKafkaError::Global(code),
            ];
            for e in errors {
                assert_eq!(classify(&e), ErrorClass::NotAuthorized, "{e:?}");
                assert!(crate::state::changelog::is_definite(&e), "a restore does not retry {e:?}");
                for step in steps {
                    for transactional in [true, false] {
                        let v = verdict(&StepError::new(step, e.clone()), transactional);
                        assert_eq!(v, Verdict::Stop, "{step:?} {e:?} transactional={transactional}");
                    }
                }
                let stopped = refusal(&cfg(), &Properties::default(), &e, ("in", Operation::Read), || "x".into());
                assert!(matches!(stopped, Some(Error::NotAuthorized(_))), "{e:?}");
            }
        }
        for other in [C::UnknownTopicOrPartition, C::SaslAuthenticationFailed, C::ProducerFenced, C::RequestTimedOut] {
            assert!(!is_refusal(other), "{other:?}");
            let e = RdKafkaError::MessageProduction(other);
            assert!(refusal(&cfg(), &Properties::default(), &e, ("in", Operation::Read), || "x".into()).is_none());
        }
    }

    #[test]
    fn a_refusal_names_the_acl_of_its_resource() {
        let cfg = cfg();
        let topic = |op| Acl::literal(ResourceType::Topic, "out", op);
        assert_eq!(wanted(&cfg, C::TopicAuthorizationFailed, "out", Operation::Write), topic(Operation::Write));
        assert_eq!(
            wanted(&cfg, C::GroupAuthorizationFailed, "out", Operation::Write),
            Acl::literal(ResourceType::Group, "app", Operation::Read)
        );
        assert_eq!(
            wanted(&cfg, C::TransactionalIdAuthorizationFailed, "out", Operation::Write),
            Acl::prefixed(ResourceType::TransactionalId, "app:", Operation::Write)
        );
        assert_eq!(
            wanted(&cfg, C::ClusterAuthorizationFailed, "out", Operation::Write),
            Acl::cluster(Operation::IdempotentWrite)
        );
        // What the pipeline asks for is what it lists.
        let listed = crate::config::acls::required(&cfg);
        assert!(listed.contains(&wanted(&cfg, C::GroupAuthorizationFailed, "in", Operation::Read)));
        assert!(listed.contains(&wanted(&cfg, C::TransactionalIdAuthorizationFailed, "in", Operation::Read)));
    }

    #[test]
    fn the_message_names_the_principal_the_acl_and_its_command_and_no_secret() {
        let mut props = Properties::default();
        props.set("security.protocol", "sasl_ssl");
        props.set("sasl.mechanism", "SCRAM-SHA-512");
        props.set("sasl.username", "fees");
        props.set("sasl.password", "hunter2-secret");
        let acl = Acl::literal(ResourceType::Topic, "fees-counts-changelog", Operation::Read);
        let source = KafkaError::new(RdKafkaError::MessageConsumption(C::TopicAuthorizationFailed));
        let e = not_authorized(&props, "b1:9094", acl, "restoring store \"counts\"".into(), Some(source));
        let text = e.to_string();
        for part in [
            "User:fees is not authorized to Read Topic \"fees-counts-changelog\" (restoring store \"counts\")",
            "literal pattern",
            "kafka-acls --bootstrap-server b1:9094 --add --allow-principal User:fees --operation Read \
             --topic fees-counts-changelog --resource-pattern-type literal",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
        assert!(!text.contains("hunter2"), "{text}");
        let source = std::error::Error::source(&e).expect("librdkafka's refusal");
        assert!(source.to_string().contains("authorization"), "{source}");

        let principal = |pairs: &[(&str, &str)]| {
            let mut p = Properties::default();
            for (k, v) in pairs {
                p.set(*k, *v);
            }
            Principal::of(&p)
        };
        let plain = principal(&[]);
        assert_eq!((plain.name.as_deref(), plain.shown.as_str()), (Some("User:ANONYMOUS"), "User:ANONYMOUS"));
        let tls = principal(&[("security.protocol", "SSL"), ("ssl.certificate.location", "/c.pem")]);
        assert!(tls.name.is_none() && tls.shown.contains("TLS certificate"), "{}", tls.shown);
        let one_way_tls = principal(&[("security.protocol", "SSL")]);
        assert_eq!(one_way_tls.name.as_deref(), Some("User:ANONYMOUS"));
        let kerberos = principal(&[("security.protocol", "SASL_PLAINTEXT")]);
        assert!(kerberos.name.is_none() && kerberos.shown.contains("Kerberos"), "{}", kerberos.shown);
        let unnamed =
            not_authorized(&Properties::default(), "b:1", Acl::cluster(Operation::IdempotentWrite), "x".into(), None);
        assert!(matches!(&unnamed, Error::NotAuthorized(n) if n.command.contains("User:ANONYMOUS")));
        let tls_props = {
            let mut p = Properties::default();
            p.set("security.protocol", "SSL");
            p.set("ssl.keystore.location", "/k.p12");
            p
        };
        let placeholder = not_authorized(&tls_props, "b:1", Acl::cluster(Operation::IdempotentWrite), "x".into(), None);
        assert!(matches!(&placeholder, Error::NotAuthorized(n) if n.command.contains("'User:<principal>'")));
    }
}
