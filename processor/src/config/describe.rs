//! The topology description of a built pipeline ([`Pipeline::describe`](crate::Pipeline::describe)):
//! its topics, processor, stores and changelogs, tables, sink, guarantee and
//! transactional ids, as text and as a Mermaid flowchart.
//!
//! Everything is read from the validated [`PipelineConfig`] and the runtime's own
//! derivations (the changelog topic's name, the transactional ids), never restated, so the
//! description cannot disagree with what the pipeline runs.

use std::fmt;

use super::{Exhausted, Guarantee, PipelineConfig, Rebalancing};
use crate::state::changelog_topic;

/// What [`Pipeline::describe`](crate::Pipeline::describe) returns: the pipeline's topology,
/// for people to review and tools to draw. `Display` prints it as text, one line per
/// element; [`mermaid`](Self::mermaid) as a Mermaid flowchart.
///
/// ```
/// use kafka_eos::{OutputRecord, Pipeline};
/// let mut builder = Pipeline::builder().bootstrap_servers("127.0.0.1:9092").application_id("upper").input_topic("words");
/// let out = builder.output_topic("words-upper");
/// let pipeline = builder
///     .processor(move |ctx, rec| {
///         ctx.emit(OutputRecord::to(&out).value(rec.value.as_deref().unwrap_or_default().to_ascii_uppercase()));
///         Ok(())
///     })
///     .build()?;
/// let topology = pipeline.describe();
/// assert!(topology.to_string().contains("transactional.id per input partition: upper:words:<partition>"));
/// assert!(topology.mermaid().starts_with("flowchart LR\n"));
/// # Ok::<(), kafka_eos::Error>(())
/// ```
///
/// Only the topics the builder declared are listed: output topics a processor names per
/// record, without declaring them, are not.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopologyDescription {
    application_id: String,
    guarantee: Guarantee,
    rebalancing: Rebalancing,
    /// The transactional.id patterns (`<partition>`, `<instance-id>`, `<k>` placeholders).
    transactional_ids: Vec<String>,
    inputs: Vec<String>,
    /// The repartition topics: written by the processor, read back by it.
    repartitions: Vec<String>,
    /// Partition n of every input topic is one task (a stateful pipeline over several inputs).
    co_partitioned: bool,
    processor: String,
    stores: Vec<StoreNode>,
    /// (topic, whether global).
    tables: Vec<(String, bool)>,
    outputs: Vec<String>,
    /// (topic, the stores of the window operators that route late records to it).
    late: Vec<(String, Vec<String>)>,
    dead_letter: Option<String>,
    sink: Option<String>,
}

/// One store: its name, what declared it, its backend and its changelog topic.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StoreNode {
    name: String,
    role: &'static str,
    backend: String,
    changelog: String,
}

impl TopologyDescription {
    /// The description of `cfg`, its processor called `processor`.
    pub(crate) fn of(cfg: &PipelineConfig, processor: &str) -> TopologyDescription {
        let stores = cfg
            .stores
            .iter()
            .map(|s| StoreNode {
                name: s.name().to_string(),
                role: s.role,
                // A backend made for the description and never opened (a factory leaves
                // the storage to `open`: see `BackendFactory`).
                backend: short_type_name(&(s.backend)(s.name(), 0).kind()),
                changelog: changelog_topic(&cfg.application_id, s.name()),
            })
            .collect();
        let mut late: Vec<(String, Vec<String>)> = Vec::new();
        for (topic, store) in &cfg.late_topics {
            match late.iter_mut().find(|(t, _)| t == topic) {
                Some((_, stores)) => stores.push(store.clone()),
                None => late.push((topic.clone(), vec![store.clone()])),
            }
        }
        TopologyDescription {
            application_id: cfg.application_id.clone(),
            guarantee: cfg.guarantee,
            rebalancing: cfg.rebalancing(),
            transactional_ids: transactional_ids(cfg),
            inputs: cfg.input_topics.iter().filter(|t| !cfg.repartition_topics.contains(t)).cloned().collect(),
            repartitions: cfg.repartition_topics.clone(),
            co_partitioned: cfg.co_partitioned(),
            processor: short_type_name(processor),
            stores,
            tables: (cfg.tables.iter().map(|t| (t.topic.clone(), false)))
                .chain(cfg.global_tables.iter().map(|t| (t.topic.clone(), true)))
                .collect(),
            outputs: (cfg.output_topics.iter())
                .filter(|t| !late.iter().any(|(l, _)| l == *t) && !cfg.repartition_topics.contains(t))
                .filter(|t| cfg.outbox.as_ref().is_none_or(|o| o.topic.as_str() != t.as_str()))
                .cloned()
                .collect(),
            late,
            dead_letter: match &cfg.processor_error_policy.then {
                Exhausted::DeadLetter(t) => Some(t.clone()),
                Exhausted::Stop => None,
            },
            sink: cfg.sink.as_ref().map(|s| short_type_name(s.type_name())).or_else(|| {
                let o = cfg.outbox.as_ref()?;
                Some(format!("{} (behind the outbox {})", short_type_name(o.spec().sink.type_name()), o.topic))
            }),
        }
    }

    /// The topology as a Mermaid flowchart (`flowchart LR`): topics as parallelograms,
    /// the processor and its stores inside the application's box, changelogs and tables as
    /// dotted edges, the sink as a subroutine. Paste it into a ```` ```mermaid ```` block.
    pub fn mermaid(&self) -> String {
        let mut m = String::from("flowchart LR\n");
        let mut line = |s: String| {
            m.push_str("    ");
            m.push_str(&s);
            m.push('\n');
        };
        let topic = |id: &str, name: &str| format!("{id}[/\"{}\"/]", label(name));
        // The application's box first: a node is in the subgraph where it is first named.
        line(format!(
            "subgraph application [\"{}\"]",
            label(&format!("{} ({})", self.application_id, self.guarantee.as_str()))
        ));
        let mut processor = format!("processor: {}", self.processor);
        for id in &self.transactional_ids {
            processor.push_str(&format!("<br/>transactional.id {}", label(id)));
        }
        line(format!("    processor[\"{processor}\"]"));
        for (i, s) in self.stores.iter().enumerate() {
            line(format!("    store{i}[(\"{}<br/>{}, {}\")]", label(&s.name), s.role, label(&s.backend)));
            line(format!("    processor <--> store{i}"));
        }
        line("end".into());
        for (i, t) in self.inputs.iter().enumerate() {
            line(format!("{} --> processor", topic(&format!("input{i}"), t)));
        }
        for (i, t) in self.repartitions.iter().enumerate() {
            line(format!("processor -- by new key --> {} --> processor", topic(&format!("repartition{i}"), t)));
        }
        for (i, (t, global)) in self.tables.iter().enumerate() {
            let edge = if *global { "global table" } else { "table" };
            line(format!("{} -. {edge} .-> processor", topic(&format!("table{i}"), t)));
        }
        for (i, s) in self.stores.iter().enumerate() {
            line(format!("store{i} -. changelog .-> {}", topic(&format!("changelog{i}"), &s.changelog)));
        }
        for (i, t) in self.outputs.iter().enumerate() {
            line(format!("processor --> {}", topic(&format!("output{i}"), t)));
        }
        for (i, (t, _)) in self.late.iter().enumerate() {
            line(format!("processor -- late records --> {}", topic(&format!("late{i}"), t)));
        }
        if let Some(t) = &self.dead_letter {
            line(format!("processor -- dead letters --> {}", topic("deadletter", t)));
        }
        if let Some(s) = &self.sink {
            line(format!("processor --> sink[[\"sink: {}\"]]", label(s)));
        }
        m
    }
}

impl fmt::Display for TopologyDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "application {} (group.id, transactional.id prefix)", self.application_id)?;
        let row = |f: &mut fmt::Formatter<'_>, what: &str, value: &str| writeln!(f, "  {what:<12}{value}");
        let ids = self.transactional_ids.join(", ");
        let guarantee = match self.guarantee {
            Guarantee::ExactlyOncePerPartition if self.co_partitioned => {
                format!("exactly-once-per-partition; transactional.id per input partition number (all inputs' partition n): {ids}")
            }
            Guarantee::ExactlyOncePerPartition => {
                format!("exactly-once-per-partition; transactional.id per input partition: {ids}")
            }
            Guarantee::ExactlyOncePerConsumer => {
                format!("exactly-once-per-consumer; transactional.id per worker of each instance: {ids}")
            }
            Guarantee::AtLeastOnce => "at-least-once; no transactions (idempotent producers)".to_string(),
        };
        row(f, "guarantee", &guarantee)?;
        row(f, "rebalancing", self.rebalancing.as_str())?;
        let inputs = self.inputs.join(", ");
        match self.co_partitioned {
            true => row(f, "input", &format!("{inputs} (co-partitioned: partition n of each is one task)"))?,
            false => row(f, "input", &inputs)?,
        }
        for t in &self.repartitions {
            row(
                f,
                "repartition",
                &format!("{t} (written by key, read back: partition n with partition n of the input)"),
            )?;
        }
        row(f, "processor", &self.processor)?;
        for s in &self.stores {
            row(f, "store", &format!("{} ({}, {}); changelog {}", s.name, s.role, s.backend, s.changelog))?;
        }
        for (t, global) in &self.tables {
            match global {
                true => row(f, "table", &format!("{t} (global: every partition, read whole by every instance)"))?,
                false => row(f, "table", &format!("{t} (co-partitioned with the input)"))?,
            }
        }
        for t in &self.outputs {
            row(f, "output", t)?;
        }
        for (t, stores) in &self.late {
            row(f, "late", &format!("{t} (late records of {})", stores.join(", ")))?;
        }
        if let Some(t) = &self.dead_letter {
            row(f, "dead letter", t)?;
        }
        if let Some(s) = &self.sink {
            row(f, "sink", s)?;
        }
        Ok(())
    }
}

/// The transactional.id patterns of `cfg`, made by the runtime's own functions with
/// placeholders: `<partition>` (per input partition), `<instance-id>` and `<k>` (per worker).
fn transactional_ids(cfg: &PipelineConfig) -> Vec<String> {
    // The number the runtime would put last, replaced by its placeholder.
    let pattern = |id: String, n: &str, placeholder: &str| match id.strip_suffix(n) {
        Some(head) => format!("{head}{placeholder}"),
        None => id,
    };
    match cfg.guarantee {
        Guarantee::ExactlyOncePerPartition => {
            let mut ids: Vec<String> = Vec::new();
            for topic in &cfg.input_topics {
                let (task, _) = cfg.task_of(topic, 0);
                let id = pattern(cfg.partition_transactional_id(&task, 0), "0", "<partition>");
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            ids
        }
        Guarantee::ExactlyOncePerConsumer => {
            let placeholder = PipelineConfig { instance_id: "<instance-id>".into(), ..cfg.clone() };
            vec![placeholder.worker_transactional_id(0), pattern(placeholder.worker_transactional_id(1), "1", "<k>")]
        }
        Guarantee::AtLeastOnce => Vec::new(),
    }
}

/// `text` for a quoted Mermaid label: the characters that would end the quote or start an
/// HTML tag written as Mermaid entities.
fn label(text: &str) -> String {
    text.replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;")
}

/// A type's name without the paths of its parts: `kafka_eos_postgres::sink::PostgresSink`
/// → `PostgresSink`, `a::Wrap<b::Inner>` → `Wrap<Inner>`.
fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut path = String::new();
    let last = |path: &str| path.rsplit("::").next().unwrap_or_default().to_string();
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            path.push(c);
        } else {
            out.push_str(&last(&path));
            path.clear();
            out.push(c);
        }
    }
    out.push_str(&last(&path));
    out
}

#[cfg(test)]
#[path = "describe_tests.rs"]
mod tests;
