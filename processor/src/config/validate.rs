//! The builder's validation: every option checked, defaults applied, unsafe combinations
//! refused with the option's name and the fix.

use std::time::Duration;

use super::*;

impl PipelineBuilder {
    pub(super) fn validate(mut self) -> Result<(PipelineConfig, ProcessorFactory, Vec<TransactionHook>)> {
        let cfg_err = |m: String| Err(Error::Config(m));
        let user_inputs = self.input_topics.len();
        let repartition_topics = match self.application_id.clone() {
            Some(app) => match self.take_repartitions(&app) {
                Ok(topics) => topics,
                Err(m) => return cfg_err(m),
            },
            None => Vec::new(),
        };
        let Some(bootstrap_servers) = self.bootstrap_servers.filter(|s| !s.trim().is_empty()) else {
            return cfg_err("bootstrap_servers is required (e.g. \"127.0.0.1:9092\")".into());
        };
        let Some(application_id) = self.application_id else {
            return cfg_err("application_id is required: it is the group.id and the transactional.id prefix".into());
        };
        if application_id.is_empty() || !application_id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return cfg_err(format!(
                "application_id {application_id:?} must be non-empty and use only letters, digits, '.', '_' and '-'"
            ));
        }
        if user_inputs == 0 {
            return cfg_err("at least one input_topic is required".into());
        }
        let Some(processor) = self.processor else {
            return cfg_err(
                "a processor is required: call .processor(|ctx, record| ...), .async_processor(async |ctx, record| ...) \
                 or .processor_impl(..)"
                    .into(),
            );
        };
        let commit_interval = self.commit_interval.unwrap_or(Duration::from_millis(100));
        if commit_interval.is_zero() {
            return cfg_err("commit_interval must be positive".into());
        }
        let max_records = self.max_records.unwrap_or(10_000);
        if max_records == 0 {
            return cfg_err("max_records_per_transaction must be at least 1".into());
        }
        let mut transaction_timeout = self.transaction_timeout.unwrap_or(Duration::from_secs(10));
        if let Some(ms) = self.producer_properties.get("transaction.timeout.ms") {
            let Ok(ms) = ms.parse::<u64>() else {
                return cfg_err(format!(
                    "producer property transaction.timeout.ms={ms:?} is not a number of milliseconds"
                ));
            };
            transaction_timeout = Duration::from_millis(ms);
        }
        if self.guarantee.is_transactional() && transaction_timeout <= commit_interval {
            return cfg_err(format!(
                "transaction.timeout.ms ({}) must exceed the commit interval ({} ms), or every \
                 transaction risks being aborted by the coordinator; raise transaction_timeout \
                 or lower commit_interval",
                transaction_timeout.as_millis(),
                commit_interval.as_millis()
            ));
        }
        let c = &self.consumer_properties;
        if let Some(k) = ["enable.auto.commit", "enable.auto.offset.store", "auto.commit.interval.ms"]
            .into_iter()
            .find(|k| c.get(k).is_some())
        {
            return cfg_err(format!(
                "do not set the consumer property {k}: the runtime commits offsets once the outputs are committed (at-least-once: acknowledged), at the commit interval; set PipelineBuilder::commit_interval"
            ));
        }
        if c.get("group.id").is_some() {
            return cfg_err("do not set group.id: the application_id is the group id".into());
        }
        if self.guarantee.is_transactional() && c.get("isolation.level").is_some_and(|v| v != "read_committed") {
            return cfg_err("consumer property isolation.level must be read_committed under exactly-once: a read_uncommitted consumer would process aborted records and fetch offsets that are not stable".into());
        }
        // The user's properties are set after the runtime's `earliest`, so a value let
        // through here is the one the consumer uses.
        match c.get("auto.offset.reset") {
            None | Some("earliest") => {}
            Some(v) if self.guarantee.is_transactional() => {
                return cfg_err(format!(
                    "consumer property auto.offset.reset={v:?} is refused under exactly-once: a partition without a \
                     committed offset (a new group, an offset out of range) is read from its start, and a reset to \
                     latest would skip records that were never processed, losing input; remove the property or set \
                     it to earliest"
                ));
            }
            Some("latest") => {}
            Some(v) => {
                return cfg_err(format!(
                    "consumer property auto.offset.reset={v:?} must be earliest or latest: where a partition without \
                     a committed offset is read from (latest skips the records already in it)"
                ));
            }
        }
        let rebalancing = match (self.guarantee, self.rebalancing) {
            (Guarantee::ExactlyOncePerConsumer, None) => Rebalancing::Eager,
            (_, r) => r.unwrap_or_default(),
        };
        let group = GroupSettings {
            rebalancing,
            static_member: match (self.static_membership, &self.instance_id) {
                (false, _) => None,
                (true, Some(id)) => Some(id.clone()),
                (true, None) => {
                    return cfg_err(
                        "static_membership needs an instance_id that stays the same across restarts (a pod or host name): set PipelineBuilder::instance_id".into(),
                    )
                }
            },
        };
        group.validate(c)?;
        let workers = self.workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        if workers == 0 || self.max_concurrent_transactions == Some(0) || self.max_partition_tasks == Some(0) {
            return cfg_err("workers, max_concurrent_transactions and max_partition_tasks must be at least 1".into());
        }
        let p = &self.producer_properties;
        if p.get("transactional.id").is_some() {
            return cfg_err("do not set transactional.id: the runtime derives one per partition (or per instance) from the application_id".into());
        }
        if p.get("enable.idempotence").is_some_and(|v| v != "true") {
            return cfg_err("producer property enable.idempotence must stay true: without it retries can duplicate or reorder outputs".into());
        }
        if let Exhausted::DeadLetter(t) = &self.policy.then {
            if self.input_topics.contains(t) {
                return cfg_err(format!("the dead-letter topic {t:?} cannot also be an input topic"));
            }
        }
        let stateful = !self.stores.is_empty() || !self.timers.is_empty();
        if stateful && self.input_topics.len() > 1 {
            // Co-partitioned inputs: input partition n of every topic shares the state of
            // partition n, so one member must own all of them, which only the range
            // assignors guarantee (a sticky or uniform one may split them).
            let range = rebalancing == Rebalancing::Eager
                || (rebalancing == Rebalancing::Consumer && c.get("group.remote.assignor") == Some("range"));
            if !range {
                return cfg_err(format!(
                    "a stateful pipeline over several input topics {:?} needs every input partition n on the same \
                     instance (they share partition n's state): use Rebalancing::Eager (the range assignor), or \
                     Rebalancing::Consumer with consumer property group.remote.assignor=range; Rebalancing::{rebalancing:?} \
                     may assign them apart",
                    self.input_topics
                ));
            }
        }
        if !self.stores.is_empty() {
            let mut names = std::collections::HashSet::new();
            for s in &self.stores {
                if s.name.is_empty() || !s.name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
                    return cfg_err(format!("store name {:?} must be non-empty and use only letters, digits, '.', '_' and '-' (it names a topic)", s.name));
                }
                if !names.insert(&*s.name) {
                    return cfg_err(format!("store {:?} is declared twice", s.name));
                }
                if s.version == crate::state::format::UNVERSIONED {
                    return cfg_err(format!(
                        "store {:?} has schema version 0, which stands for records written before state was versioned: use 1 or more",
                        s.name
                    ));
                }
            }
        }
        if self.standby_replicas > 0 {
            if self.stores.is_empty() {
                return cfg_err(format!(
                    "standby_replicas({}) keeps copies of state stores, and this pipeline declares none",
                    self.standby_replicas
                ));
            }
            if rebalancing == Rebalancing::Consumer {
                return cfg_err("standby replicas are placed from the group's description, which a KIP-848 group (Rebalancing::Consumer) does not give: use Rebalancing::Cooperative or Rebalancing::Eager".into());
            }
        }
        let mut table_topics = std::collections::HashSet::new();
        for t in self.tables.iter().chain(&self.global_tables) {
            if self.input_topics.contains(&t.topic) {
                return cfg_err(format!(
                    "{:?} is both an input topic and a table: a table is read beside the input, not consumed by the group",
                    t.topic
                ));
            }
            if !table_topics.insert(&t.topic) {
                return cfg_err(format!("table {:?} is declared twice: share its handle instead", t.topic));
            }
        }
        if self.timers.len() > 1 {
            return cfg_err(format!("{} Timers are declared: a pipeline has at most one", self.timers.len()));
        }
        if self.sinks.len() + self.outboxes.len() > 1 {
            return cfg_err(format!(
                "{} sinks are declared: a pipeline has at most one (its rows and offsets are written together)",
                self.sinks.len() + self.outboxes.len()
            ));
        }
        let outbox = self.outboxes.pop().map(|spec| crate::sink::outbox::Outbox::new(spec, &application_id));
        if let Some(o) = &outbox {
            let name = &o.spec().name;
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
                return cfg_err(format!(
                    "outbox name {name:?} must be non-empty and use only letters, digits, '.', '_' and '-' (it names a topic)"
                ));
            }
            if !self.guarantee.is_transactional() {
                return cfg_err(format!(
                    "outbox_sink({name:?}) needs an exactly-once guarantee (its rows are written in the batch's transaction); \
                     under at-least-once, declare the sink with sink()"
                ));
            }
            self.output_topics.push(o.topic.clone());
        }
        if let Err(m) = super::queryable::check(self.advertise.as_ref(), &self.stores, self.ops_address) {
            return cfg_err(m);
        }
        let instance_id = self.instance_id.unwrap_or_else(random_instance_id);
        if instance_id.is_empty() || !instance_id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            return cfg_err(format!(
                "instance_id {instance_id:?} must be non-empty and use only letters, digits, '.', '_' and '-' (it is part of the transactional.id)"
            ));
        }
        Ok((
            PipelineConfig {
                bootstrap_servers,
                application_id,
                input_topics: self.input_topics,
                repartition_topics: repartition_topics.clone(),
                guarantee: self.guarantee,
                commit_interval,
                max_records_per_transaction: max_records,
                process_while_collecting: self.process_while_collecting.unwrap_or(true),
                skip_deleted_records: self.skip_deleted_records,
                purged_topics: repartition_topics,
                purge_interval: self.purge_interval.unwrap_or(Duration::from_secs(30)),
                transaction_timeout,
                task_timeout: self.task_timeout.unwrap_or(Duration::from_secs(300)),
                slow_commit_warning: self.slow_commit_warning.unwrap_or(Duration::from_secs(1)),
                startup_timeout: self.startup_timeout.unwrap_or(Duration::from_secs(30)),
                shutdown_timeout: self.shutdown_timeout.unwrap_or(Duration::from_secs(30)),
                processor_error_policy: self.policy,
                origin_header: self.origin_header.unwrap_or(true),
                handle_signals: self.handle_signals.unwrap_or(false),
                instance_id,
                group,
                workers,
                max_concurrent_transactions: self
                    .max_concurrent_transactions
                    .unwrap_or(crate::config::DEFAULT_MAX_CONCURRENT_TRANSACTIONS),
                max_partition_tasks: self.max_partition_tasks,
                standby_replicas: self.standby_replicas,
                statistics_interval: self.statistics_interval.unwrap_or(if self.ops_address.is_some() {
                    Duration::from_secs(5)
                } else {
                    Duration::ZERO
                }),
                ops_address: self.ops_address,
                health_threshold: self.health_threshold.unwrap_or(Duration::from_secs(60)),
                consumer_properties: self.consumer_properties,
                producer_properties: self.producer_properties,
                stores: match &self.state_backend {
                    Some(f) => self.stores.into_iter().map(|s| s.or_backend(f)).collect(),
                    None => self.stores,
                },
                output_topics: self.output_topics.iter().map(|t| t.to_string()).collect(),
                late_topics: self.late_topics,
                changelog_replication: self.changelog_replication.unwrap_or(-1),
                fault: self.fault.build(),
                sink: self.sinks.into_iter().next(),
                outbox,
                timers: self.timers.into_iter().next(),
                tables: self.tables,
                global_tables: self.global_tables,
                advertise: self.advertise,
                partitioner: self.partitioner.unwrap_or_default(),
            },
            processor,
            self.hooks,
        ))
    }
}

fn random_instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}
