//! The ACLs a pipeline needs on a cluster with an authorizer
//! ([`Pipeline::acls`](crate::Pipeline::acls)), derived from its validated configuration like
//! its topology description: every topic it reads, writes, creates or purges, its group, and
//! its transactional ids.
//!
//! Kafka implies `Describe` from `Read`, `Write` and `Delete` on the same resource, so none is
//! listed on its own.

use std::collections::BTreeSet;

use super::{Exhausted, Guarantee, PipelineConfig};
use crate::acl::{Acl, Operation, ResourceType};
use crate::state::changelog_topic;

/// Every ACL `cfg` needs, sorted, without repeats.
pub(crate) fn required(cfg: &PipelineConfig) -> Vec<Acl> {
    use Operation::*;
    let mut acls = BTreeSet::new();
    let mut topic = |name: &str, ops: &[Operation]| {
        for op in ops {
            acls.insert(Acl::literal(ResourceType::Topic, name, *op));
        }
    };
    // Inputs (repartition topics among them) are fetched; outputs (repartition, late and
    // outbox topics among them) written.
    for t in &cfg.input_topics {
        topic(t, &[Read]);
    }
    for t in &cfg.output_topics {
        topic(t, &[Write]);
    }
    if let Exhausted::DeadLetter(t) = &cfg.processor_error_policy.then {
        topic(t, &[Write]);
    }
    // Records of the internal topics read to their end are deleted (`runtime::purge`).
    for t in &cfg.purged_topics {
        topic(t, &[Delete]);
    }
    // Changelogs are created when missing, their configuration checked, written in the
    // transaction and read back at a restore.
    for s in &cfg.stores {
        topic(&changelog_topic(&cfg.application_id, s.name()), &[Create, DescribeConfigs, Read, Write]);
    }
    for t in cfg.tables.iter().chain(&cfg.global_tables) {
        topic(&t.topic, &[Read]);
    }
    if let Some(outbox) = &cfg.outbox {
        // The applier reads the outbox as a group of its own and purges what it applied.
        topic(outbox.topic.as_str(), &[Read, Write, Delete]);
        acls.insert(Acl::literal(ResourceType::Group, outbox.topic.as_str(), Read));
    }
    acls.insert(group(cfg));
    match cfg.guarantee {
        Guarantee::ExactlyOncePerPartition | Guarantee::ExactlyOncePerConsumer => {
            acls.insert(transactional_ids(cfg));
        }
        Guarantee::AtLeastOnce => {}
    }
    acls.into_iter().collect()
}

/// `Read` on the pipeline's group: joining it, fetching and committing its offsets.
pub(crate) fn group(cfg: &PipelineConfig) -> Acl {
    Acl::literal(ResourceType::Group, &cfg.application_id, Operation::Read)
}

/// `Write` on the pipeline's transactional ids: every one starts with the application id
/// and a colon.
pub(crate) fn transactional_ids(cfg: &PipelineConfig) -> Acl {
    Acl::prefixed(ResourceType::TransactionalId, format!("{}:", cfg.application_id), Operation::Write)
}
