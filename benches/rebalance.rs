//! How long partitions pause when an instance joins, per rebalance protocol and guarantee.
//!
//! `cargo bench --bench rebalance [-- --quick] [--reps N] [--subjects
//! exactly-once-per-consumer]`; the figures go in docs/scaling.md. Each configuration is one
//! [`join_third`] run (two instances on 16 partitions with paced input, a third joins; see
//! `kafka_eos_cli::scale`), repeated; the table gives medians:
//!
//! - `unmoved gap`: the longest gap between two commits of a partition that stayed with its
//!   instance (what incremental rebalancing keeps short; target < 2 × commit interval + 1 s);
//! - `moved pause`: the longest time a moved partition went without a commit, from its last
//!   commit at the old owner to its first at the new one;
//! - `newcomer`: from the join to the newcomer's first commit;
//! - `aborts`: aborted over all transactions of the run.
//!
//! Every run is verified exactly-once; a broken copy stops the bench.

mod common;

use std::time::Duration;

use common::{broker, init_tracing, load_average, runtime, write_results, Args};
use kafka_eos::{Guarantee, Rebalancing};
use kafka_eos_cli::bench::{median, table};
use kafka_eos_cli::scale::{join_third, JoinOptions};

fn main() {
    let args = Args::parse();
    init_tracing();
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    let rt = runtime();
    let protocols = [Rebalancing::Eager, Rebalancing::Cooperative, Rebalancing::Consumer];
    let all = [Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer, Guarantee::AtLeastOnce];
    let guarantees: Vec<Guarantee> = match (&args.subjects[..], args.quick) {
        ([], true) => vec![Guarantee::ExactlyOncePerPartition],
        ([], false) => all.to_vec(),
        (names, _) => {
            all.into_iter().filter(|g| names.iter().any(|n| n.parse::<Guarantee>().ok() == Some(*g))).collect()
        }
    };
    let reps = args.reps();
    println!("rebalance ({} mode): 2 instances on 16 partitions, a third joins; {reps} run(s) each", args.mode());
    let (mut rows, mut results) = (Vec::new(), Vec::new());
    for g in &guarantees {
        for r in protocols {
            let mut runs = Vec::new();
            for _ in 0..reps {
                let opts = JoinOptions::new(&bootstrap, *g, r);
                let report =
                    rt.block_on(join_third(&opts)).unwrap_or_else(|e| panic!("{} / {}: {e}", r.as_str(), g.as_str()));
                let exact = report.verified.is_exactly_once() && report.verified.output_records == report.produced;
                if g.is_transactional() {
                    assert!(exact, "{} / {}: not exactly once: {:?}", r.as_str(), g.as_str(), report.verified);
                } else {
                    assert!(report.verified.is_at_least_once(), "{}: {:?}", r.as_str(), report.verified);
                }
                runs.push(report);
            }
            let med =
                |f: &dyn Fn(&kafka_eos_cli::scale::JoinReport) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
            let secs = |d: Duration| d.as_secs_f64();
            let (gap, pause, newcomer, aborts, moved) = (
                med(&|r| secs(r.longest_unmoved_gap)),
                med(&|r| secs(r.longest_moved_pause)),
                med(&|r| secs(r.newcomer_first_commit)),
                med(&|r| r.abort_ratio()),
                med(&|r| r.moved as f64),
            );
            rows.push(vec![
                g.as_str().to_string(),
                r.as_str().to_string(),
                format!("{moved:.0} of 16"),
                format!("{gap:.2} s"),
                format!("{pause:.2} s"),
                format!("{newcomer:.2} s"),
                format!("{:.1} %", aborts * 100.0),
            ]);
            results.push(serde_json::json!({
                "guarantee": g.as_str(), "rebalancing": r.as_str(), "reps": reps,
                "moved": moved, "unmoved_gap_s": gap, "moved_pause_s": pause,
                "newcomer_first_commit_s": newcomer, "abort_ratio": aborts,
            }));
        }
    }
    println!("\nmedians (load average {:.2}); commit interval 300 ms, unmoved-gap target 1.6 s", load_average());
    print!(
        "{}",
        table(&["guarantee", "rebalancing", "moved", "unmoved gap", "moved pause", "newcomer", "aborts"], &rows)
    );
    write_results("rebalance", args.mode(), &bootstrap, serde_json::json!({ "partitions": 16 }), results);
    drop(cluster);
}
