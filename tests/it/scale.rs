//! Scaling out under incremental rebalancing (issue 11): partitions that stay with their
//! instance keep committing while others move.

use std::time::Duration;

use kafka_eos::{Guarantee, Rebalancing};
use kafka_eos_cli::scale::{join_third, JoinOptions};

use crate::common::bootstrap;

/// Two instances share 16 partitions while input flows; a third joins
/// ([`join_third`]). Under each incremental protocol, every partition that stays with its
/// instance keeps committing throughout: its longest gap between commits stays under twice
/// the commit interval plus 1 s (the target), while some partitions do move. The
/// copy ends exactly once. (Eager pauses every partition for the whole rebalance:
/// `benches/rebalance.rs` measures it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_instance_leaves_unmoved_partitions_committing() {
    for (rebalancing, guarantee) in [
        (Rebalancing::Cooperative, Guarantee::ExactlyOnce),
        (Rebalancing::Consumer, Guarantee::ExactlyOnce),
        (Rebalancing::Cooperative, Guarantee::ExactlyOncePerConsumer),
    ] {
        let what = format!("{} / {}", rebalancing.as_str(), guarantee.as_str());
        let opts = JoinOptions::new(&bootstrap(), guarantee, rebalancing);
        let r = join_third(&opts).await.unwrap_or_else(|e| panic!("{what}: {e}"));
        eprintln!("{what}: {r:?}");
        assert!(r.unmoved > 0 && r.moved > 0, "{what}: {} unmoved, {} moved", r.unmoved, r.moved);
        let limit = opts.commit_interval * 2 + Duration::from_secs(1);
        assert!(
            r.longest_unmoved_gap < limit,
            "{what}: an unmoved partition stopped committing for {:?} (limit {limit:?})",
            r.longest_unmoved_gap
        );
        assert!(r.verified.is_exactly_once(), "{what}: {:?}", r.verified);
        assert_eq!(r.verified.output_records, r.produced, "{what}");
        assert_eq!(r.summaries.iter().map(|s| s.records_in).sum::<u64>(), r.produced, "{what}");
    }
}
