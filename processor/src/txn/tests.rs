//! Unit tests of the cycle's pure parts.

use super::*;
use rdkafka::Offset;

pub(crate) fn rec(t: &str, p: i32, o: i64) -> InputRecord {
    InputRecord { topic: t.into(), partition: p, offset: o, timestamp: None, key: None, value: None, headers: vec![] }
}

#[test]
fn next_offsets_is_last_plus_one_per_partition() {
    let tpl = next_offsets(&[rec("a", 0, 5), rec("a", 1, 9), rec("a", 0, 7), rec("b", 0, 1)]);
    let got: Vec<_> = tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition(), e.offset())).collect();
    assert_eq!(
        got,
        vec![
            ("a".into(), 0, Offset::Offset(8)),
            ("a".into(), 1, Offset::Offset(10)),
            ("b".into(), 0, Offset::Offset(2)),
        ]
    );
}
