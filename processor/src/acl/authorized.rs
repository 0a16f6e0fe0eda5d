//! What the brokers say this principal may do with each topic: the authorized operations
//! that a `DescribeTopics` request returns when asked for them (KIP-430). The start-up check
//! compares them with [`Pipeline::acls`](crate::Pipeline::acls), so that a missing topic ACL
//! stops the pipeline before the first use that needs it (a changelog's `Read` is first used
//! at a restore, perhaps days later); and a refusal that does not say which topic it was
//! about (a consumer's fetch) is traced to one.
//!
//! rust-rdkafka has no `DescribeTopics`, so this goes through librdkafka's C API: the call
//! makes its own result queue, waits on it, and frees everything it made before returning.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, CStr, CString};
use std::time::{Duration, Instant};

use rdkafka::bindings as sys;
use rdkafka::client::{Client, ClientContext};
use rdkafka::types::RDKafkaErrorCode;

use super::Operation;

/// What the brokers answered for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Held {
    /// The operations this principal may do on it.
    Operations(BTreeSet<Operation>),
    /// Described without its operations (brokers older than Kafka 2.3 leave them out):
    /// nothing to compare.
    Unknown,
    /// Not described: `TOPIC_AUTHORIZATION_FAILED` (this principal may not even describe
    /// it), `UNKNOWN_TOPIC_OR_PART`, or another per-topic error.
    Refused(RDKafkaErrorCode),
}

/// The operations this principal may do on each of `topics`, asked through `client` with one
/// request. `Err` (a text for the logs) when the request failed as a whole: the caller then
/// checks nothing.
pub(crate) fn topic_operations<C: ClientContext>(
    client: &Client<C>,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, Held>, String> {
    let names = topics
        .iter()
        .map(|t| CString::new(t.as_str()).map_err(|_| format!("topic name {t:?} holds a NUL byte")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let rk = client.native_ptr();
    // SAFETY: `rk` is the live handle `client` owns; the names outlive the collection, which
    // copies them; every object made here is destroyed below on every path, after the last
    // use of anything that points into it.
    unsafe {
        let opts = sys::rd_kafka_AdminOptions_new(rk, sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS);
        let mut errstr = [0 as c_char; 512];
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        sys::rd_kafka_AdminOptions_set_request_timeout(opts, ms, errstr.as_mut_ptr(), errstr.len());
        let refused = sys::rd_kafka_AdminOptions_set_include_authorized_operations(opts, 1);
        if !refused.is_null() {
            sys::rd_kafka_error_destroy(refused);
        }
        let collection = sys::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len());
        let queue = sys::rd_kafka_queue_new(rk);
        sys::rd_kafka_DescribeTopics(rk, collection, opts, queue);
        let deadline = Instant::now() + timeout + Duration::from_secs(1);
        let mut event: *mut sys::rd_kafka_event_t = std::ptr::null_mut();
        while event.is_null() && Instant::now() < deadline {
            event = sys::rd_kafka_queue_poll(queue, 200);
        }
        let outcome = if event.is_null() {
            Err(format!("no answer within {timeout:?}"))
        } else if sys::rd_kafka_event_error(event) != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            Err(CStr::from_ptr(sys::rd_kafka_event_error_string(event)).to_string_lossy().into_owned())
        } else {
            read(event)
        };
        if !event.is_null() {
            sys::rd_kafka_event_destroy(event);
        }
        sys::rd_kafka_queue_destroy(queue);
        sys::rd_kafka_TopicCollection_destroy(collection);
        sys::rd_kafka_AdminOptions_destroy(opts);
        outcome
    }
}

/// Each topic's answer in a `DescribeTopics` result event.
///
/// # Safety
/// `event` is a live `DescribeTopics` result event; what it points to lives as long as it.
unsafe fn read(event: *mut sys::rd_kafka_event_t) -> Result<BTreeMap<String, Held>, String> {
    let result = sys::rd_kafka_event_DescribeTopics_result(event);
    if result.is_null() {
        return Err("the answer is not a DescribeTopics result".into());
    }
    let mut n = 0;
    let descriptions = sys::rd_kafka_DescribeTopics_result_topics(result, &mut n);
    let mut out = BTreeMap::new();
    for i in 0..n {
        let d = *descriptions.add(i);
        let name = CStr::from_ptr(sys::rd_kafka_TopicDescription_name(d)).to_string_lossy().into_owned();
        let error = sys::rd_kafka_TopicDescription_error(d);
        let code = match error.is_null() {
            true => RDKafkaErrorCode::NoError,
            false => RDKafkaErrorCode::from(sys::rd_kafka_error_code(error)),
        };
        let held = if code != RDKafkaErrorCode::NoError {
            Held::Refused(code)
        } else {
            let mut m = 0;
            let ops = sys::rd_kafka_TopicDescription_authorized_operations(d, &mut m);
            // A described topic allows at least `Describe`: none at all means none were sent.
            match ops.is_null() || m == 0 {
                true => Held::Unknown,
                false => Held::Operations((0..m).filter_map(|j| operation(*ops.add(j))).collect()),
            }
        };
        out.insert(name, held);
    }
    Ok(out)
}

/// The crate's [`Operation`] of one of librdkafka's; `None` for those a pipeline never needs.
fn operation(op: sys::rd_kafka_AclOperation_t) -> Option<Operation> {
    use sys::rd_kafka_AclOperation_t as O;
    Some(match op {
        O::RD_KAFKA_ACL_OPERATION_READ => Operation::Read,
        O::RD_KAFKA_ACL_OPERATION_WRITE => Operation::Write,
        O::RD_KAFKA_ACL_OPERATION_CREATE => Operation::Create,
        O::RD_KAFKA_ACL_OPERATION_DELETE => Operation::Delete,
        O::RD_KAFKA_ACL_OPERATION_DESCRIBE => Operation::Describe,
        O::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS => Operation::DescribeConfigs,
        O::RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE => Operation::IdempotentWrite,
        _ => return None,
    })
}

/// The first of `uses` (a topic and the operation the pipeline needs on it) that `held`
/// shows this principal cannot do: a topic it may not describe, or one described without
/// the operation. Topics that do not exist, or whose operations are unknown, are skipped.
pub(crate) fn first_missing<'a>(
    held: &BTreeMap<String, Held>,
    uses: &'a [(String, Operation)],
) -> Option<&'a (String, Operation)> {
    uses.iter().find(|(topic, op)| match held.get(topic) {
        Some(Held::Operations(ops)) => !ops.contains(op),
        Some(Held::Refused(code)) => *code == RDKafkaErrorCode::TopicAuthorizationFailed,
        Some(Held::Unknown) | None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_use_not_held_is_missing_and_unknown_answers_check_nothing() {
        let ops = |o: &[Operation]| Held::Operations(o.iter().copied().collect());
        let held: BTreeMap<String, Held> = [
            ("in".to_string(), ops(&[Operation::Read, Operation::Describe])),
            ("out".to_string(), ops(&[Operation::Read, Operation::Describe])),
            ("hidden".to_string(), Held::Refused(RDKafkaErrorCode::TopicAuthorizationFailed)),
            ("gone".to_string(), Held::Refused(RDKafkaErrorCode::UnknownTopicOrPartition)),
            ("old".to_string(), Held::Unknown),
        ]
        .into_iter()
        .collect();
        let uses = |u: &[(&str, Operation)]| u.iter().map(|(t, o)| (t.to_string(), *o)).collect::<Vec<_>>();
        let all_held = uses(&[("in", Operation::Read), ("gone", Operation::Read), ("old", Operation::Write)]);
        assert_eq!(first_missing(&held, &all_held), None);
        let write = uses(&[("in", Operation::Read), ("out", Operation::Write), ("hidden", Operation::Read)]);
        assert_eq!(first_missing(&held, &write), Some(&("out".to_string(), Operation::Write)));
        let hidden = uses(&[("hidden", Operation::Read)]);
        assert_eq!(first_missing(&held, &hidden), Some(&hidden[0]));
    }
}
