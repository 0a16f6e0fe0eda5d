//! Where a copy's time goes: the per-task timeline of a 1:1 copy, stage by stage.
//!
//! `cargo bench --bench timeline [-- --quick]`; the figures go in docs/benchmarks.md
//! ("Where the time goes").
//!
//! # How
//! One input topic (4 partitions, 100 B values) copied once per guarantee with the default
//! tuning (100 ms commit interval). Every task's time is a sequence of cycles, each preceded
//! by the time the batch was collected and, before that, the time the task had nothing to
//! do; the `on_transaction` hook ([`TransactionEvent`]) reports all five:
//!
//! ```text
//! idle ─> collect ─> [ process ─> await acks ─> commit ] ─> idle ─> ...
//!         (≤ commit interval)  cycle = begin .. commit done
//! ```
//!
//! - `idle`: no record for the task (the consumer has not handed it one yet);
//! - `collect`: the batch fills, for up to the commit interval — records keep arriving;
//!   each is processed as it comes (the default `process_while_collecting`), and that
//!   time is counted as `process`, not here;
//! - `process`: `begin_transaction`, the processor, enqueuing the outputs;
//! - `await acks`: until the last output's delivery report;
//! - `commit`: `send_offsets_to_transaction` + `commit_transaction` (zero for
//!   at-least-once, whose offsets the consumer thread commits asynchronously).
//!
//! Summed over every committed cycle of every task (but each task's first, which waited for
//! the group join), each stage's share of the tasks' time
//! says what bounds the copy: a task that is mostly `collect` waits for the interval,
//! mostly `idle` waits for the consumer, mostly `await acks`/`commit` waits for the broker.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{broker, init_tracing, load_average, runtime, Args};
use kafka_eos::config::Properties;
use kafka_eos::observe::{Outcome, TransactionEvent};
use kafka_eos::Guarantee;
use kafka_eos_cli::bench::{copy, delete_topics, table, unique_name, CopyOptions, Input, Subject, Tuning};

/// Per-cycle samples of one subject, in microseconds.
#[derive(Default)]
struct Stages {
    idle: Vec<u64>,
    collect: Vec<u64>,
    process: Vec<u64>,
    acks: Vec<u64>,
    commit: Vec<u64>,
    records: Vec<u64>,
    tasks: BTreeMap<String, u64>,
}

impl Stages {
    fn record(&mut self, e: &TransactionEvent) {
        let task = self.tasks.entry(e.transactional_id.clone().unwrap_or_else(|| "all".into())).or_default();
        *task += 1;
        if *task == 1 {
            return; // a task's first cycle waited for the group join: not the steady state
        }
        let us = |d: Duration| d.as_micros() as u64;
        self.idle.push(us(e.idle));
        // The default tuning processes a batch as it is collected: `collect` then holds
        // `process`, and the stages stay disjoint with the processing taken out of it.
        self.collect.push(us(e.collect.saturating_sub(e.process)));
        self.process.push(us(e.process));
        self.acks.push(us(e.await_acks));
        self.commit.push(us(e.commit));
        self.records.push(e.records as u64);
    }
}

fn median(v: &[u64]) -> f64 {
    quantile(v, 0.5)
}

fn quantile(v: &[u64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0) as f64
}

fn main() {
    let args = Args::parse();
    init_tracing();
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    let rt = runtime();
    let records: u64 = args.records.unwrap_or(if args.quick { 100_000 } else { 500_000 });
    let partitions = args.partitions.first().copied().unwrap_or(4);
    let topic = unique_name("timeline-in");
    let input = Input::create(&bootstrap, &topic, partitions, 1, records, 100, Properties::default())
        .unwrap_or_else(|e| panic!("producing the input: {e}"));
    println!(
        "timeline ({} mode): {records} records x 100 B in {partitions} partitions, 100 ms commit interval",
        args.mode()
    );
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    let mut topics = vec![topic.clone()];
    for g in [Guarantee::AtLeastOnce, Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer] {
        let stages = Arc::new(Mutex::new(Stages::default()));
        let sink = stages.clone();
        let opts = CopyOptions {
            tuning: Tuning::default(),
            time_limit: Some(Duration::from_secs(300)),
            verify: false,
            hook: Some(Arc::new(move |e: &TransactionEvent| {
                if e.outcome == Outcome::Committed {
                    sink.lock().unwrap_or_else(|p| p.into_inner()).record(e);
                }
            })),
        };
        let output = unique_name("timeline-out");
        topics.push(output.clone());
        let res = copy(rt.handle(), &input, &output, Subject::Pipeline(g), &opts)
            .unwrap_or_else(|e| panic!("{}: {e}", g.as_str()));
        let s = stages.lock().unwrap_or_else(|p| p.into_inner());
        let sums: Vec<u64> =
            [&s.idle, &s.collect, &s.process, &s.acks, &s.commit].iter().map(|v| v.iter().sum()).collect();
        let all: u64 = sums.iter().sum::<u64>().max(1);
        let pct = |i: usize| format!("{:.0} %", sums[i] as f64 * 100.0 / all as f64);
        rows.push(vec![
            g.as_str().to_string(),
            format!("{:.0}", res.records_per_second),
            s.tasks.len().to_string(),
            s.records.len().to_string(),
            format!("{:.0}", median(&s.records)),
            pct(0),
            pct(1),
            pct(2),
            pct(3),
            pct(4),
            format!(
                "{:.1} / {:.1} / {:.1}",
                quantile(&s.idle, 0.9) / 1000.0,
                s.idle.iter().max().copied().unwrap_or(0) as f64 / 1000.0,
                s.idle.iter().sum::<u64>() as f64 / 1e6
            ),
        ]);
        let ms = |v: &[u64]| median(v) / 1000.0;
        let (idle, collect, process, acks, commit) =
            (ms(&s.idle), ms(&s.collect), ms(&s.process), ms(&s.acks), ms(&s.commit));
        let bar =
            |label: &str, v: f64| format!("{label} {v:.1}|{}", "=".repeat((v / 2.0).round().clamp(1.0, 60.0) as usize));
        lines.push(format!(
            "{:<28} |{}|{}|{}|{}|{}",
            format!("{} (median cycle, ms)", g.as_str()),
            bar("idle", idle),
            bar("collect", collect),
            bar("process", process),
            bar("acks", acks),
            bar("commit", commit)
        ));
    }
    println!(
        "\nshare of the tasks' time per stage, summed over every committed cycle (load average {:.2})",
        load_average()
    );
    print!(
        "{}",
        table(
            &[
                "subject",
                "records/s",
                "tasks",
                "cycles",
                "records/cycle p50",
                "idle",
                "collect",
                "process",
                "await acks",
                "commit",
                "idle p90 / max ms / sum s"
            ],
            &rows
        )
    );
    println!("\nmedian cycle, one '=' per 2 ms:");
    for l in lines {
        println!("{l}");
    }
    delete_topics(&bootstrap, &Properties::default(), &topics);
    drop(cluster);
}
