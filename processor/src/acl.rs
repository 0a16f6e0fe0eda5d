//! Access control: the ACLs a pipeline needs on a cluster that runs an authorizer.
//!
//! An [`Acl`] is one permission — an operation on a resource, the resource named literally
//! or by a prefix — granted to the pipeline's principal from any host. The vocabulary is
//! Kafka's own (`kafka-acls --operation`, `--resource-pattern-type`), so that an ACL prints
//! as the option of the `kafka-acls` command that grants it.
//!
//! A request the brokers refuse for want of an ACL stops the pipeline with
//! [`Error::NotAuthorized`](crate::Error::NotAuthorized), which names the ACL and prints its
//! command: no retry can succeed until an operator grants it.

use std::fmt;

pub(crate) mod authorized;
pub(crate) mod denied;

/// The kind of resource an ACL is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ResourceType {
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// A producer's `transactional.id`.
    TransactionalId,
    /// The cluster itself (its one resource is named `kafka-cluster`).
    Cluster,
    /// A delegation token (a pipeline uses none; named when a broker refuses one).
    DelegationToken,
}

impl ResourceType {
    /// The option of `kafka-acls` that names a resource of this kind.
    pub fn kafka_acls_option(self) -> &'static str {
        match self {
            ResourceType::Topic => "--topic",
            ResourceType::Group => "--group",
            ResourceType::TransactionalId => "--transactional-id",
            ResourceType::Cluster => "--cluster",
            ResourceType::DelegationToken => "--delegation-token",
        }
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResourceType::Topic => "Topic",
            ResourceType::Group => "Group",
            ResourceType::TransactionalId => "TransactionalId",
            ResourceType::Cluster => "Cluster",
            ResourceType::DelegationToken => "DelegationToken",
        })
    }
}

/// How an ACL's name matches resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// The resource of exactly this name.
    Literal,
    /// Every resource whose name starts with it.
    Prefixed,
}

impl fmt::Display for PatternType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PatternType::Literal => "literal",
            PatternType::Prefixed => "prefixed",
        })
    }
}

/// An operation an ACL allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Operation {
    /// Fetch from a topic; join a group and commit its offsets.
    Read,
    /// Produce to a topic; use a transactional id.
    Write,
    /// Create a topic.
    Create,
    /// Delete a topic's records (`DeleteRecords`).
    Delete,
    /// A topic's metadata and offsets; a group's offsets; a transactional id's state.
    Describe,
    /// Read a topic's configuration.
    DescribeConfigs,
    /// An idempotent producer's id, on the cluster.
    IdempotentWrite,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Read => "Read",
            Operation::Write => "Write",
            Operation::Create => "Create",
            Operation::Delete => "Delete",
            Operation::Describe => "Describe",
            Operation::DescribeConfigs => "DescribeConfigs",
            Operation::IdempotentWrite => "IdempotentWrite",
        })
    }
}

/// One permission: `operation` on the resources of `resource_type` that `name` matches
/// under `pattern_type`, allowed from any host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    /// What kind of resource.
    pub resource_type: ResourceType,
    /// How [`name`](Self::name) matches.
    pub pattern_type: PatternType,
    /// The resource's name, or its prefix (`kafka-cluster` for the cluster).
    pub name: String,
    /// What it allows.
    pub operation: Operation,
}

impl Acl {
    /// `operation` on the resource `name` of type `resource_type`.
    pub fn literal(resource_type: ResourceType, name: impl Into<String>, operation: Operation) -> Acl {
        Acl { resource_type, pattern_type: PatternType::Literal, name: name.into(), operation }
    }

    /// `operation` on every resource of type `resource_type` whose name starts with `prefix`.
    pub fn prefixed(resource_type: ResourceType, prefix: impl Into<String>, operation: Operation) -> Acl {
        Acl { resource_type, pattern_type: PatternType::Prefixed, name: prefix.into(), operation }
    }

    /// `operation` on the cluster.
    pub fn cluster(operation: Operation) -> Acl {
        Acl::literal(ResourceType::Cluster, "kafka-cluster", operation)
    }

    /// The `kafka-acls` command that grants it to `principal` (e.g. `User:alice`) on the
    /// cluster at `bootstrap` (the tool's own connection settings are the caller's to add,
    /// with `--command-config`).
    pub fn kafka_acls_command(&self, principal: &str, bootstrap: &str) -> String {
        let resource = match self.resource_type {
            ResourceType::Cluster => "--cluster".to_string(),
            t => format!("{} {}", t.kafka_acls_option(), shell_word(&self.name)),
        };
        format!(
            "kafka-acls --bootstrap-server {} --add --allow-principal {} --operation {} {resource} \
             --resource-pattern-type {}",
            shell_word(bootstrap),
            shell_word(principal),
            self.operation,
            self.pattern_type
        )
    }
}

impl fmt::Display for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {} {} {:?}", self.operation, self.resource_type, self.pattern_type, self.name)
    }
}

/// `s` as one word of a POSIX shell command: as is when it has no special character, else
/// in single quotes.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.,:/@=+%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acl_prints_as_the_kafka_acls_command_that_grants_it() {
        let acl = Acl::prefixed(ResourceType::TransactionalId, "app:", Operation::Write);
        assert_eq!(
            acl.kafka_acls_command("User:alice", "b1:9092,b2:9092"),
            "kafka-acls --bootstrap-server b1:9092,b2:9092 --add --allow-principal User:alice --operation Write \
             --transactional-id app: --resource-pattern-type prefixed"
        );
        let cluster = Acl::cluster(Operation::IdempotentWrite);
        assert!(cluster
            .kafka_acls_command("User:a", "b:1")
            .ends_with("--operation IdempotentWrite --cluster --resource-pattern-type literal"));
        let odd = Acl::literal(ResourceType::Topic, "it's here", Operation::Read);
        assert!(odd.kafka_acls_command("User:a", "b:1").contains(r"--topic 'it'\''s here'"));
        assert_eq!(acl.to_string(), "Write on TransactionalId prefixed \"app:\"");
    }
}
