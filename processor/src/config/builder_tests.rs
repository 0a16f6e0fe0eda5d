//! The builder's validation: what it refuses, and the ids it derives.
use super::*;
use crate::state::StoreSpec;
use crate::Pipeline;

fn base() -> PipelineBuilder {
    Pipeline::builder()
        .bootstrap_servers("127.0.0.1:1")
        .application_id("app")
        .input_topic("in")
        .processor(|_, _| Ok(()))
}

fn err(b: PipelineBuilder) -> String {
    match b.build() {
        Err(Error::Config(m)) => m,
        Err(e) => panic!("expected a config error, got {e}"),
        Ok(_) => panic!("expected a config error, got a pipeline"),
    }
}

#[test]
fn rejects_what_would_break_the_guarantee() {
    for k in ["enable.auto.commit", "enable.auto.offset.store", "auto.commit.interval.ms"] {
        assert!(err(base().consumer_property(k, "false")).contains(k), "{k}");
        assert!(err(base().guarantee(Guarantee::AtLeastOnce).consumer_property(k, "1")).contains(k), "{k}");
    }
    assert!(err(base().consumer_property("isolation.level", "read_uncommitted")).contains("read_committed"));
    assert!(err(base().transaction_timeout(Duration::from_millis(50))).contains("must exceed the commit interval"));
    assert!(err(base().producer_property("transaction.timeout.ms", "100")).contains("must exceed"));
    assert!(err(base().producer_property("transactional.id", "x")).contains("transactional.id"));
    assert!(err(base().application_id("bad id!")).contains("application_id"));
    assert!(err(base().consumer_property("partition.assignment.strategy", "cooperative-sticky"))
        .contains("PipelineBuilder::rebalancing"));
    assert!(err(base().client_property("group.protocol", "CONSUMER")).contains("PipelineBuilder::rebalancing"));
    assert!(err(base().static_membership(true)).contains("instance_id"));
    let per_consumer = || base().guarantee(Guarantee::ExactlyOncePerConsumer);
    let cooperative = per_consumer().rebalancing(Rebalancing::Cooperative).build().unwrap();
    assert_eq!(cooperative.config().rebalancing(), Rebalancing::Cooperative);
    assert_eq!(per_consumer().build().unwrap().config().rebalancing(), Rebalancing::Eager);
    assert_eq!(base().build().unwrap().config().rebalancing(), Rebalancing::Cooperative);
    let static_member = base().static_membership(true).instance_id("pod-1").build().unwrap();
    assert_eq!(static_member.config().consumer_config().get("group.instance.id"), Some("pod-1"));
    assert!(err(Pipeline::builder().bootstrap_servers("x").application_id("a").input_topic("t")).contains("processor"));
    assert!(err(base().on_processor_error(ProcessorErrorPolicy::stop().then_dead_letter("in"))).contains("dead-letter"));
    let mut twice = base();
    let _ = (twice.store::<u8, u8>("s"), twice.store::<u8, u8>("s"));
    assert!(err(twice).contains("declared twice"));
    let mut v0 = base();
    v0.store_spec(StoreSpec::<u8, u8>::new("s").version(0));
    assert!(err(v0).contains("schema version 0"));
    // Co-partitioned inputs share partition n's state: only a range assignor keeps them on
    // one instance.
    let mut two_inputs = base().input_topic("in2");
    two_inputs.store::<u8, u8>("s");
    assert!(err(two_inputs).contains("Rebalancing::Eager"));
    let mut eager = base().input_topic("in2").rebalancing(crate::Rebalancing::Eager);
    eager.store::<u8, u8>("s");
    assert!(eager.build().unwrap().config().co_partitioned());
    let mut range = base().input_topic("in2").rebalancing(crate::Rebalancing::Consumer);
    range = range.consumer_property("group.remote.assignor", "range");
    range.store::<u8, u8>("s");
    assert!(range.build().is_ok());
    assert!(!base().input_topic("in2").build().unwrap().config().co_partitioned(), "stateless: per partition");
    // at-least-once does not care about the transaction timeout
    assert!(base().guarantee(Guarantee::AtLeastOnce).transaction_timeout(Duration::from_millis(50)).build().is_ok());
}

/// `a-b` + topic `c` and `a` + topic `b-c` must not share a transactional.id, or two
/// pipelines fence each other forever.
#[test]
fn transactional_ids_are_unambiguous() {
    let cfg = |app: &str| base().application_id(app).instance_id("c-0").build().unwrap().config().clone();
    let (ab, a) = (cfg("a-b"), cfg("a"));
    assert_ne!(ab.partition_transactional_id("c", 0), a.partition_transactional_id("b-c", 0));
    assert_eq!(ab.partition_transactional_id("c", 0), "a-b:c:0", "readable: application, topic, partition");
    assert_eq!(a.partition_transactional_id("b-c", 0), "a:b-c:0");
    // Per-consumer ids: neither across application ids nor against per-partition ids.
    assert_ne!(ab.instance_transactional_id(), a.instance_transactional_id());
    assert_eq!(cfg("a-b").instance_transactional_id(), "a-b:c-0");
    let other = base().application_id("a").instance_id("b-c-0").build().unwrap();
    assert_ne!(other.config().instance_transactional_id(), ab.instance_transactional_id());
    assert_ne!(a.instance_transactional_id(), cfg("a").partition_transactional_id("c", 0));
    // Every id splits back into its parts in one way only.
    for (id, parts) in [(ab.partition_transactional_id("c", 0), 3), (a.instance_transactional_id(), 2)] {
        assert_eq!(id.split(':').count(), parts, "{id}");
    }
    assert!(err(base().instance_id("host:8080")).contains("instance_id"));
    assert!(err(base().instance_id("")).contains("instance_id"));
}

#[test]
fn debug_redacts_secrets() {
    let mut p = Properties::default();
    p.set("sasl.password", "hunter2");
    p.set("sasl.username", "alice");
    p.set("ssl.keystore.password", "ks-pass");
    p.set("sasl.oauthbearer.client.secret", "oauth-secret");
    p.set("some.future.secret", "future-secret");
    let s = format!("{p:?}");
    assert!(!s.contains("hunter2") && s.contains("alice") && s.contains("[redacted]"), "{s}");
    assert!(!s.contains("ks-pass") && !s.contains("oauth-secret") && !s.contains("future-secret"), "{s}");
    let cfg = base().client_property("sasl.password", "hunter2").build().unwrap();
    let s = format!("{:?}", cfg.config());
    assert!(!s.contains("hunter2") && s.contains("sasl.password"), "{s}");
    assert_eq!(p.redact("user alice, password hunter2"), "user alice, password [redacted]");
}

/// `base()` with a store: what advertising an endpoint needs.
fn stateful(b: PipelineBuilder) -> PipelineBuilder {
    let mut b = b;
    b.store::<String, u64>("s");
    b
}

#[test]
fn an_advertised_endpoint_is_host_and_port_of_a_stateful_pipeline() {
    assert!(err(base().advertised_endpoint("host:9100")).contains("no store to query"));
    for bad in ["host", "host:0", "host:http", ":9100", "http://host:9100", "my host:9100"] {
        assert!(err(stateful(base().advertised_endpoint(bad))).contains("must be host:port"), "{bad}");
    }
    for good in ["host:9100", "10.0.0.7:1", "[::1]:9100"] {
        let cfg = stateful(base().advertised_endpoint(good)).build().unwrap().config().clone();
        assert_eq!(cfg.advertise, Some(crate::config::pipeline::Advertise::Endpoint(good.into())), "{good}");
    }
    assert_eq!(format!("{:?}", base().build().unwrap().config().partitioner), "Partitioner::murmur2");
}

#[cfg(feature = "ops-server")]
#[test]
fn the_ops_server_advertises_and_serves_only_with_an_address_others_reach() {
    let anywhere: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    let local: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    assert!(err(stateful(base().advertise_ops_address())).contains("needs an ops_address"));
    assert!(err(stateful(base().ops_address(anywhere).advertise_ops_address())).contains("instances can reach"));
    assert!(stateful(base().ops_address(local).advertise_ops_address()).build().is_ok());
    let mut served = base();
    let s = served.store::<String, u64>("s");
    served.serve_store(&s);
    assert!(err(served).contains("needs an ops_address"));
    let mut served = base().ops_address(local);
    let s = served.store::<String, u64>("s");
    served.serve_store(&s);
    assert!(served.build().unwrap().config().stores[0].is_served());
}

#[test]
fn standby_replicas_need_a_store_and_a_classic_protocol() {
    assert!(err(base().standby_replicas(1)).contains("declares none"));
    let stateful = |b: PipelineBuilder| {
        let mut b = b;
        let _ = b.store::<String, u64>("s");
        b
    };
    let consumer = stateful(base().standby_replicas(1).rebalancing(Rebalancing::Consumer));
    assert!(err(consumer).contains("KIP-848"));
    let ok = stateful(base().standby_replicas(2)).build().expect("cooperative with a store");
    assert_eq!(ok.config().standby_replicas, 2);
    assert_eq!(stateful(base()).build().unwrap().config().standby_replicas, 0, "off by default");
}

#[test]
fn a_repartition_topic_is_named_after_the_application_and_read_and_written() {
    let mut b = base();
    let t = b.repartition("by-merchant");
    assert_eq!(b.repartition("by-merchant"), t, "declared twice: the same topic");
    let pipeline = b.build().unwrap();
    let cfg = pipeline.config();
    assert_eq!(t.as_str(), "app-by-merchant-repartition");
    assert_eq!(cfg.input_topics.last().map(String::as_str), Some(t.as_str()), "read after the inputs");
    assert_eq!(cfg.repartition_topics, [t.to_string()]);
    assert!(cfg.output_topics.contains(&t.to_string()), "checked at start-up like an output");

    let mut early = Pipeline::builder().bootstrap_servers("b:9092").input_topic("in").processor(|_, _| Ok(()));
    early.repartition("r");
    assert!(err(early.application_id("app")).contains("call application_id first"));
    let mut bad = base();
    bad.repartition("no spaces");
    assert!(err(bad).contains("repartition name"));
    let mut stateful = base();
    stateful.repartition("r");
    stateful.store::<u8, u8>("s");
    assert!(err(stateful).contains("Rebalancing::Eager"), "state per partition n of both topics: a range assignor");
}

#[test]
fn an_outbox_sink_needs_an_exactly_once_guarantee_and_is_the_only_sink() {
    use crate::sink::test_sinks::{Never, Stored};
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Row;
    let connect = || async { Ok::<_, Never>(Stored) };
    let mut ok = base();
    ok.outbox_sink("ledger", connect, |_: Row| 0);
    let pipeline = ok.build().unwrap();
    assert!(pipeline.config().output_topics.contains(&"app-ledger-outbox".to_string()), "checked at start-up");
    let mut alo = base().guarantee(Guarantee::AtLeastOnce);
    alo.outbox_sink("ledger", connect, |_: Row| 0);
    assert!(err(alo).contains("exactly-once guarantee"));
    let mut two = base();
    two.outbox_sink("ledger", connect, |_: Row| 0);
    two.sink(connect);
    assert!(err(two).contains("at most one"));
    let mut bad = base();
    bad.outbox_sink("led ger", connect, |_: Row| 0);
    assert!(err(bad).contains("outbox name"));
}

#[test]
fn auto_offset_reset_is_earliest_under_exactly_once_and_earliest_or_latest_under_at_least_once() {
    let reset = |p: &crate::Pipeline| p.config().consumer_config().get("auto.offset.reset").map(str::to_string);
    for g in [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        for v in ["latest", "none", "error", "smallest", "erliest"] {
            let m = err(base().guarantee(g).consumer_property("auto.offset.reset", v));
            assert!(m.contains(&format!("auto.offset.reset={v:?}")) && m.contains("earliest"), "{g:?} {v}: {m}");
        }
        let m = err(base().guarantee(g).client_property("auto.offset.reset", "latest"));
        assert!(m.contains("never processed"), "a latest reset loses input: {m}");
        let explicit = base().guarantee(g).consumer_property("auto.offset.reset", "earliest").build().unwrap();
        assert_eq!(reset(&explicit).as_deref(), Some("earliest"));
        assert_eq!(reset(&base().guarantee(g).build().unwrap()).as_deref(), Some("earliest"), "the default");
    }
    let alo = || base().guarantee(Guarantee::AtLeastOnce);
    for v in ["earliest", "latest"] {
        let p = alo().consumer_property("auto.offset.reset", v).build().unwrap();
        assert_eq!(reset(&p).as_deref(), Some(v), "the user's choice under at-least-once");
    }
    for v in ["none", "error", "largest", "Latest", ""] {
        let m = err(alo().client_property("auto.offset.reset", v));
        assert!(m.contains(&format!("auto.offset.reset={v:?}")) && m.contains("earliest or latest"), "{v}: {m}");
    }
}

/// The outbox's applier reads the outbox at-least-once and relies on the sink to store the
/// outbox offsets with its rows. A sink's guarantee is its instance's (`Sink::guarantee`),
/// known once it is connected: the refusal comes from the declared sink's connect.
#[test]
fn an_outbox_sink_that_is_not_exactly_once_is_refused_when_it_connects() {
    use crate::sink::test_sinks::{Ledger, Never, Stored};
    use crate::sink::SinkErrorClass;
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Row;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let connect = |b: &crate::Pipeline| {
        let factory = &b.config().outbox.as_ref().expect("an outbox").spec().sink;
        factory.connect(rt.handle(), Duration::from_secs(5)).map(|_| ())
    };
    let mut alo = base();
    alo.outbox_sink("ledger", || async { Ok::<_, Never>(Ledger) }, |_: Row| 0);
    let alo = alo.build().expect("the sink's guarantee is known once it is connected");
    let refused = connect(&alo).expect_err("an at-least-once outbox sink");
    assert_eq!(refused.class, SinkErrorClass::Fatal);
    let m = refused.error.to_string();
    for part in
        ["outbox_sink(\"ledger\")", "test_sinks::Ledger", "AtLeastOnce", "exactly-once", "PipelineBuilder::sink"]
    {
        assert!(m.contains(part), "{part}: {m}");
    }
    let mut eo = base();
    eo.outbox_sink("ledger", || async { Ok::<_, Never>(Stored) }, |_: Row| 0);
    connect(&eo.build().unwrap()).expect("an exactly-once outbox sink connects");
}
