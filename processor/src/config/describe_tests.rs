use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::codec::Raw;
use crate::operators::{Dedup, TumblingWindows};
use crate::sink::test_sinks::{Ledger, Never};
use crate::state::backend::{Change, KeyValueBackend, MemoryBackend};
use crate::state::StoreSpec;
use crate::{Pipeline, PipelineBuilder, ProcessorErrorPolicy};

/// A backend that does not name its kind: described by its type's name.
#[derive(Default)]
struct Shelf(MemoryBackend);

impl KeyValueBackend for Shelf {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(key)
    }
    fn write_batch(&mut self, changes: Vec<Change>) {
        self.0.write_batch(changes)
    }
    fn scan(&self) -> Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)> + '_> {
        self.0.scan()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn size_bytes(&self) -> usize {
        self.0.size_bytes()
    }
}

fn base(app: &str) -> PipelineBuilder {
    Pipeline::builder().bootstrap_servers("127.0.0.1:9092").application_id(app)
}

/// Stores of three kinds, a co-partitioned and a global table, an output, a late-records and a dead-letter topic, a sink.
fn full() -> TopologyDescription {
    let mut b = base("close")
        .input_topic("payments")
        .on_processor_error(ProcessorErrorPolicy::retry(1).then_dead_letter("payments-dlq"));
    let _seen = Dedup::<u64>::new(&mut b, "seen", Duration::from_secs(60));
    let _daily = TumblingWindows::<String, i64>::new(&mut b, "daily", Duration::from_secs(86_400), "late-payments");
    let shelf = Arc::new(|_: &str, _: i32| Box::new(Shelf::default()) as Box<dyn KeyValueBackend>);
    let _notes = b.store_spec(StoreSpec::<String, String>::new("notes").backend(shelf));
    let _merchants = b.table::<Vec<u8>, _>("merchants", Raw);
    let _rates = b.global_table::<Vec<u8>, _>("rates", Raw);
    let _rows = b.sink(|| async { Ok::<_, Never>(Ledger) });
    let out = b.output_topic("revenue");
    b.processor(move |_ctx, _rec| {
        let _ = &out;
        Ok(())
    })
    .build()
    .unwrap()
    .describe()
}

#[test]
fn a_full_pipeline_lists_every_part_as_text() {
    let text = full().to_string();
    assert_eq!(
        text,
        "\
application close (group.id, transactional.id prefix)
  guarantee   exactly-once-per-partition; transactional.id per input partition: close:payments:<partition>
  rebalancing cooperative
  input       payments
  processor   closure
  store       seen (dedup, memory); changelog close-seen-changelog
  store       daily (tumbling windows, memory); changelog close-daily-changelog
  store       notes (store, Shelf); changelog close-notes-changelog
  table       merchants (co-partitioned with the input)
  table       rates (global: every partition, read whole by every instance)
  output      revenue
  late        late-payments (late records of daily)
  dead letter payments-dlq
  sink        Ledger
"
    );
}

#[test]
fn a_full_pipeline_draws_every_part_in_mermaid() {
    assert_eq!(
        full().mermaid(),
        "\
flowchart LR
    subgraph application [\"close (exactly-once-per-partition)\"]
        processor[\"processor: closure<br/>transactional.id close:payments:#lt;partition#gt;\"]
        store0[(\"seen<br/>dedup, memory\")]
        processor <--> store0
        store1[(\"daily<br/>tumbling windows, memory\")]
        processor <--> store1
        store2[(\"notes<br/>store, Shelf\")]
        processor <--> store2
    end
    input0[/\"payments\"/] --> processor
    table0[/\"merchants\"/] -. table .-> processor
    table1[/\"rates\"/] -. global table .-> processor
    store0 -. changelog .-> changelog0[/\"close-seen-changelog\"/]
    store1 -. changelog .-> changelog1[/\"close-daily-changelog\"/]
    store2 -. changelog .-> changelog2[/\"close-notes-changelog\"/]
    processor --> output0[/\"revenue\"/]
    processor -- late records --> late0[/\"late-payments\"/]
    processor -- dead letters --> deadletter[/\"payments-dlq\"/]
    processor --> sink[[\"sink: Ledger\"]]
"
    );
}

#[test]
fn a_minimal_pipeline_has_its_input_and_processor_only() {
    let p = base("bare").input_topic("in").guarantee(Guarantee::AtLeastOnce).processor(|_, _| Ok(())).build().unwrap();
    let d = p.describe();
    assert_eq!(
        d.to_string(),
        "\
application bare (group.id, transactional.id prefix)
  guarantee   at-least-once; no transactions (idempotent producers)
  rebalancing cooperative
  input       in
  processor   closure
"
    );
    assert_eq!(
        d.mermaid(),
        "\
flowchart LR
    subgraph application [\"bare (at-least-once)\"]
        processor[\"processor: closure\"]
    end
    input0[/\"in\"/] --> processor
"
    );
}

#[test]
fn transactional_id_patterns_are_the_runtimes_ids_with_placeholders() {
    // Per input partition, one pattern per input topic.
    let p = base("app").input_topic("a").input_topic("b").processor(|_, _| Ok(())).build().unwrap();
    let ids = transactional_ids(p.config());
    assert_eq!(ids, ["app:a:<partition>", "app:b:<partition>"]);
    assert_eq!(ids[1].replace("<partition>", "7"), p.config().partition_transactional_id("b", 7));

    // Co-partitioned: partition n of every input is one task, named by the first topic.
    let mut b = base("join").input_topic("left").input_topic("right").rebalancing(Rebalancing::Eager);
    let _s = b.store::<u8, u8>("pairs");
    let p = b.processor(|_, _| Ok(())).build().unwrap();
    assert_eq!(transactional_ids(p.config()), ["join:left:<partition>"]);
    assert!(p.describe().to_string().contains("left, right (co-partitioned: partition n of each is one task)"));

    // Per consumer: one per worker of each instance.
    let p = base("app")
        .input_topic("a")
        .guarantee(Guarantee::ExactlyOncePerConsumer)
        .instance_id("pod-1")
        .processor(|_, _| Ok(()))
        .build()
        .unwrap();
    let cfg = p.config();
    let ids = transactional_ids(cfg);
    assert_eq!(ids, ["app:<instance-id>", "app:<instance-id>#<k>"]);
    assert_eq!(ids[0].replace("<instance-id>", "pod-1"), cfg.worker_transactional_id(0));
    assert_eq!(ids[1].replace("<instance-id>", "pod-1").replace("<k>", "3"), cfg.worker_transactional_id(3));
    assert!(p.describe().to_string().contains("rebalancing eager"), "the per-consumer default");
}

#[test]
fn named_processors_and_sinks_keep_their_type_names_only() {
    assert_eq!(short_type_name("kafka_eos_postgres::sink::PostgresSink"), "PostgresSink");
    assert_eq!(short_type_name("a::Wrap<b::c::Inner, u8>"), "Wrap<Inner, u8>");
    assert_eq!(short_type_name("Plain"), "Plain");
    let p = base("app").input_topic("a").async_processor(async |_, _| Ok(())).build().unwrap();
    assert!(p.describe().to_string().contains("processor   async closure\n"));
}

#[test]
fn windows_sharing_a_late_topic_draw_it_once() {
    let mut b = base("app").input_topic("in");
    let _a = TumblingWindows::<String, i64>::new(&mut b, "hourly", Duration::from_secs(3600), "late");
    let _b = TumblingWindows::<String, i64>::new(&mut b, "daily", Duration::from_secs(86_400), "late");
    let d = b.processor(|_, _| Ok(())).build().unwrap().describe();
    assert!(d.to_string().contains("  late        late (late records of hourly, daily)\n"), "{d}");
    assert!(!d.to_string().contains("output"), "a late topic is not listed as an output too: {d}");
    assert_eq!(d.mermaid().matches("late records -->").count(), 1, "{}", d.mermaid());
}

#[test]
fn labels_escape_what_would_end_a_mermaid_label() {
    assert_eq!(label("a\"<b>"), "a#quot;#lt;b#gt;");
}

#[test]
fn a_repartition_topic_is_drawn_as_a_loop_through_the_processor() {
    let mut b = base("velo").input_topic("payments").guarantee(Guarantee::AtLeastOnce);
    b.repartition("by-merchant");
    let d = b.processor(|_, _| Ok(())).build().unwrap().describe();
    assert_eq!(
        d.to_string(),
        "\
application velo (group.id, transactional.id prefix)
  guarantee   at-least-once; no transactions (idempotent producers)
  rebalancing cooperative
  input       payments
  repartition velo-by-merchant-repartition (written by key, read back: partition n with partition n of the input)
  processor   closure
"
    );
    assert!(d
        .mermaid()
        .contains("processor -- by new key --> repartition0[/\"velo-by-merchant-repartition\"/] --> processor\n"));
}
