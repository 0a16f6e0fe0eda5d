//! Error paths of the restore, driven by librdkafka's mock cluster (error injection only:
//! the exactly-once behaviour of state is proven on a real broker by `tests/it/state.rs` and
//! the chaos suite's financial-close scenario).

use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;

use crate::state::{changelog_topic, format, StoreSpec};
use crate::Pipeline;

pub(crate) fn setup(
    mock: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    spec: StoreSpec<u32, u32>,
) -> (crate::state::Store<u32, u32>, crate::PipelineConfig) {
    // Again for a second pipeline on the same cluster: the topics are there.
    for topic in ["in".to_string(), changelog_topic("app", "s")] {
        match mock.create_topic(&topic, 1, 1) {
            Err(e) if !e.to_string().contains("TopicAlreadyExists") => panic!("topic {topic}: {e}"),
            _ => {}
        }
    }
    let mut builder = Pipeline::builder().bootstrap_servers(mock.bootstrap_servers()).application_id("app");
    let store = builder.store_spec(spec);
    let pipeline = builder.input_topic("in").processor(|_, _| Ok(())).build().expect("config");
    (store, pipeline.config().clone())
}

pub(crate) fn write(
    mock: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    records: &[(Vec<u8>, Vec<u8>)],
) {
    let producer: rdkafka::producer::BaseProducer =
        crate::admin::Client::new(mock.bootstrap_servers()).client_config().create().expect("producer");
    let topic = changelog_topic("app", "s");
    for (k, v) in records {
        producer.send(rdkafka::producer::BaseRecord::to(&topic).partition(0).key(k).payload(v)).unwrap();
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).expect("changelog records");
}

/// A broker that goes down while a partition's state is being restored (the chaos
/// suite's financial-close scenario killed instances this way): the restore keeps going
/// once the broker is back and rebuilds every entry.
#[test]
fn restore_rides_out_a_broker_outage() {
    let mock = MockCluster::new(1).expect("mock cluster");
    let (store, cfg) = setup(&mock, StoreSpec::new("s"));
    let records: Vec<_> =
        (0..2_000u32).map(|k| (format::encode_key(&k).unwrap(), format::encode_value(1, &(k * 2)).unwrap())).collect();
    write(&mock, &records);
    mock.broker_down(1).expect("broker down");
    let restoring =
        std::thread::spawn(move || super::restore(&cfg, &[0], Instant::now() + Duration::from_secs(60), None));
    std::thread::sleep(Duration::from_millis(1_500));
    mock.broker_up(1).expect("broker up");
    let restored = restoring.join().unwrap().expect("restored");
    assert_eq!(restored.records, 2_000);
    assert_eq!(restored.without_offsets, [(0, 2_000)], "the mock group has no offsets");
    let s = restored.states[0].store_ref(&store);
    assert_eq!(s.get(&1_999).unwrap(), Some(3_998));
    assert_eq!(s.entries().unwrap().len(), 2_000);
}

/// Records of an older schema version, and unversioned records written before state was
/// versioned, restore through their migrations; without one the restore fails with a
/// typed error naming the store, the record and the fixes.
#[test]
fn restore_checks_versions_and_migrates() {
    let legacy = (bincode::serialize(&1u32).unwrap(), bincode::serialize(&10u32).unwrap());
    let v1 = (format::encode_key(&2u32).unwrap(), format::encode_value(1, &20u16).unwrap());
    let v2 = (format::encode_key(&3u32).unwrap(), format::encode_value(2, &30u32).unwrap());
    let garbage = (format::encode_key(&4u32).unwrap(), vec![format::FORMAT, 2, 1]);
    let restore = |spec: StoreSpec<u32, u32>, records: &[(Vec<u8>, Vec<u8>)]| {
        let mock = MockCluster::new(1).expect("mock cluster");
        let (store, cfg) = setup(&mock, spec);
        write(&mock, records);
        super::restore(&cfg, &[0], Instant::now() + Duration::from_secs(30), None)
            .map(|mut r| (store, r.states.remove(0)))
    };
    let fails = |spec, records: &[_]| match restore(spec, records) {
        Ok(_) => panic!("the restore must fail"),
        Err(e) => e,
    };
    let migrated = || {
        StoreSpec::new("s")
            .version(2)
            .migrate_from::<u32>(0, |old| old + 1)
            .migrate_from::<u16>(1, |old| u32::from(old) + 2)
    };
    let (store, state) = restore(migrated(), &[legacy.clone(), v1.clone(), v2.clone()]).expect("migrated");
    let s = state.store_ref(&store);
    assert_eq!(s.entries().unwrap(), vec![(1, 11), (2, 22), (3, 30)], "keys re-encoded, values migrated");

    let err = fails(StoreSpec::new("s").version(2), &[v2.clone(), legacy]);
    let text = err.to_string();
    assert!(
        matches!(&err, crate::Error::State(e) if matches!(&**e, super::StateError::Incompatible { store, offset: 1, .. } if store == "s")),
        "{err:?}"
    );
    assert!(text.contains("before kafka-eos versioned its state") && text.contains("migrate_from"), "{text}");
    assert!(text.contains("delete the changelog topic app-s-changelog"), "{text}");
    let err = fails(StoreSpec::new("s").version(2), &[v1]).to_string();
    assert!(err.contains("schema version 1, which the store neither is at nor migrates from"), "{err}");
    let err = fails(migrated(), &[garbage]).to_string();
    assert!(err.contains("does not decode as u32"), "{err}");
}
