//! Unit tests of the measuring pieces.

use super::*;

#[test]
fn median_of_odd_even_and_nan() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    assert!(median(&[]).is_nan());
    assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
}

#[test]
fn progress_marks_the_window() {
    let p = Progress::new(100, CpuSource::SelfProcess);
    p.add(5);
    p.start();
    p.add(10);
    assert!(p.window().is_none());
    p.set(100);
    let w = p.window().expect("both marks");
    assert_eq!(w.records, 95);
    assert!(p.is_done() && p.end_to_end().is_some());
}

#[test]
fn cpu_and_rss_are_readable() {
    assert!(pid_cpu(std::process::id()).is_some());
    assert!(peak_rss(None).is_some_and(|b| b > 0));
}

#[test]
fn producer_performance_summary_parses() {
    let out = "3000 records sent, 599.9 records/sec (0.06 MB/sec), 2.0 ms avg latency, 120.0 ms max latency.\n\
               500000 records sent, 373134.328358 records/sec (35.59 MB/sec), 5.12 ms avg latency, \
               210.00 ms max latency, 3 ms 50th, 15 ms 95th, 20 ms 99th, 25 ms 99.9th.\n";
    assert_eq!(parse_producer_performance(out), Some(373134.328358));
    assert_eq!(parse_producer_performance("3000 records sent, 599.9 records/sec (0.06 MB/sec)"), None);
}

#[test]
fn table_is_markdown_with_numbers_right_aligned() {
    let t = table(&["a", "bb"], &[vec!["xyz".into(), "1".into()]]);
    assert_eq!(t, "| a   | bb |\n|-----|----|\n| xyz |  1 |\n");
}

/// `kafka-eos bench` used to panic here: the rows had a cell more than the header.
#[test]
fn overhead_table_has_a_header_per_cell() {
    let input = Input {
        bootstrap: "127.0.0.1:9092".into(),
        topic: "in".into(),
        partitions: 1,
        records: 10,
        value_size: 100,
        client_properties: Properties::default(),
        broker_pids: vec![],
    };
    let progress = Progress::new(10, CpuSource::SelfProcess);
    let r = CopyResult::measured(Subject::Ceiling.name(), &input, None, &progress, Some(1 << 20));
    let t = overhead_table(&[r]);
    let bars: Vec<usize> = t.lines().map(|l| l.matches('|').count()).collect();
    assert!(bars.iter().all(|&n| n == bars[0] && n == 10), "{t}");
}
