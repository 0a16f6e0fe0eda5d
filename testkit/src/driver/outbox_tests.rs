//! An outbox sink in the driver: the processor's records are shown as committed sink rows,
//! with the input records they came from, beside the pipeline's state.

use kafka_eos::sink::{Sink, SinkBatch, SinkError, SinkErrorClass, SinkGuarantee};
use kafka_eos::Pipeline;

use super::*;

#[derive(Debug)]
struct Never;
impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}
impl std::error::Error for Never {}
impl SinkError for Never {
    fn class(&self) -> SinkErrorClass {
        SinkErrorClass::Fatal
    }
}

/// A sink the driver never connects.
struct Nowhere;
impl Sink for Nowhere {
    type Row = String;
    type Error = Never;
    fn guarantee(&self) -> SinkGuarantee {
        SinkGuarantee::ExactlyOnce
    }
    async fn on_assigned(&mut self, partitions: &[(kafka_eos::Topic, i32)]) -> Result<Vec<Option<i64>>, Never> {
        Ok(vec![None; partitions.len()])
    }
    async fn write(&mut self, _batch: &SinkBatch<String>) -> Result<(), Never> {
        Ok(())
    }
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Entry {
    card: String,
    count: u64,
}

#[test]
fn an_outbox_sinks_records_are_committed_sink_rows_beside_state() -> Result<(), Box<dyn std::error::Error>> {
    let mut b = Pipeline::builder().application_id("velocity").input_topic("payments");
    let entries = b.outbox_sink("ledger", || async { Ok::<_, Never>(Nowhere) }, |e: Entry| format!("{e:?}"));
    let counts = b.store::<String, u64>("counts");
    let b = b.processor(move |ctx, rec| {
        let card = String::from_utf8(rec.key.clone().unwrap_or_default())?;
        let count = ctx.store(&counts).get(&card)?.unwrap_or(0) + 1;
        ctx.store(&counts).put(&card, &count)?;
        ctx.sink(&entries, Entry { card, count });
        Ok(())
    });
    let mut driver = TestDriver::new(b)?;
    for card in ["a", "b", "a"] {
        driver.pipe(TestInput::new().key(card).value("1"))?;
    }
    driver.crash_and_restore()?;
    driver.pipe(TestInput::new().key("a").value("1"))?;
    let rows: Vec<(i64, &Entry)> = driver.sink_rows::<Entry>().into_iter().map(|r| (r.offset, r.row)).collect();
    let want = [("a", 1), ("b", 1), ("a", 2), ("a", 3)].map(|(card, count)| Entry { card: card.into(), count });
    assert_eq!(rows, want.iter().enumerate().map(|(i, e)| (i as i64, e)).collect::<Vec<_>>());
    assert!(driver.output("velocity-ledger-outbox").is_empty(), "rows, not outbox records");
    Ok(())
}
