//! The headers the runtime writes on output records and reads back.

/// The header every output record carries, by default, naming the input record it came
/// from as `topic/partition/offset`. The verifier (`kafka_eos_testkit::verify`) joins on it to prove
/// exactly-once 1:1; turn it off with
/// [`PipelineBuilder::origin_header`](crate::PipelineBuilder::origin_header).
pub const ORIGIN_HEADER: &str = "kafka-eos.origin";

/// The header of a dead-letter copy (the failed input record, headers and all, routed by
/// [`ProcessorErrorPolicy::then_dead_letter`](crate::ProcessorErrorPolicy::then_dead_letter))
/// naming the processor's last error.
pub const DEAD_LETTER_ERROR_HEADER: &str = "kafka-eos.error";

/// The header of a dead-letter copy counting the failed attempts (decimal).
pub const DEAD_LETTER_ATTEMPTS_HEADER: &str = "kafka-eos.attempts";

/// A Kafka record header: a name and an optional value.
pub type Header = (String, Option<Vec<u8>>);

/// Parses an [`ORIGIN_HEADER`] value back into `(topic, partition, offset)`.
pub fn parse_origin(value: &[u8]) -> Option<(String, i32, i64)> {
    let s = std::str::from_utf8(value).ok()?;
    let mut it = s.rsplitn(3, '/');
    let offset = it.next()?.parse().ok()?;
    let partition = it.next()?.parse().ok()?;
    let topic = it.next()?.to_string();
    Some((topic, partition, offset))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::record::input::InputRecord;
    use crate::record::output::OutputRecord;
    use crate::record::topic::Topic;

    #[test]
    fn origin_round_trips_with_dashes_and_dots() {
        let r = InputRecord::test("orders.v1-eu", 3, 12345);
        assert_eq!(parse_origin(r.origin().as_bytes()), Some(("orders.v1-eu".into(), 3, 12345)));
        assert_eq!(parse_origin(b"garbage"), None);
        assert_eq!(parse_origin(b"t/x/1"), None);
    }

    #[test]
    fn copies_keep_everything_but_the_old_origin() {
        let input = InputRecord {
            key: Some(b"k".to_vec()),
            value: Some(b"v".to_vec()),
            timestamp: Some(7),
            headers: vec![("h".into(), Some(b"1".to_vec())), (ORIGIN_HEADER.into(), Some(b"x/0/1".to_vec()))],
            ..InputRecord::test("in", 0, 1)
        };
        let topic = Topic::new("out");
        let out = OutputRecord::copy_of(&input, &topic);
        assert_eq!((out.key, out.value, out.timestamp), (input.key.clone(), input.value.clone(), Some(7)));
        assert_eq!(out.headers, vec![("h".to_string(), Some(b"1".to_vec()))]);
        assert!(Arc::ptr_eq(&out.topic.0, &topic.0), "no new topic name per record");
    }

    #[test]
    fn topics_hash_compare_and_order_like_their_str() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let t = Topic::new("orders.v1");
        assert_eq!(hasher.hash_one(&t), hasher.hash_one("orders.v1"));
        assert_eq!(hasher.hash_one((t.clone(), 3)), hasher.hash_one(("orders.v1", 3)));
        let name = String::from("orders.v1");
        assert_eq!(t, "orders.v1");
        assert_eq!("orders.v1", t);
        assert_eq!(t, name);
        assert_eq!(name, t);
        assert_eq!(*"orders.v1", t);
        assert!(Topic::new("a") < Topic::new("b") && Topic::new("a").cmp(&Topic::new("ab")) == "a".cmp("ab"));
        let set: std::collections::HashSet<Topic> = [t.clone()].into();
        assert!(set.contains("orders.v1") && !set.contains("orders"));
        assert_eq!(String::from(t), "orders.v1");
    }
}
