//! Zombie fencing: an instance stuck mid-transaction loses its partition; the new owner's
//! `init_transactions` fences it, its late commit fails, and none of its records appear.

use std::time::{Duration, Instant};

use kafka_eos::{Guarantee, Rebalancing};

use crate::common::{spawn, topics, unique, Stuck};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_instance_is_fenced_and_its_transaction_never_appears() {
    const RECORDS: u64 = 2_000;
    let t = topics("zombie", 1, RECORDS, 100).await;
    let app = unique("zombie");

    // Instance A blocks inside its transaction on offset 1,000 until released (once).
    // Eager: a joining instance revokes everything, so A must give up its only partition
    // (an incremental protocol would leave it with A, which owns it rightfully).
    let stuck = Stuck::default();
    let a = spawn(
        t.pipeline(&app, Guarantee::ExactlyOncePerPartition)
            .rebalancing(Rebalancing::Eager)
            .task_timeout(Duration::from_secs(3))
            .max_records_per_transaction(200)
            .processor(stuck.processor(&t.output, 0, 1_000)),
    );
    stuck.wait_reached(Duration::from_secs(60)).await;
    // Its open transaction already holds outputs of offsets 1000.. (the batch began).
    // Instance B joins: the rebalance revokes A's partition; A's task cannot finish within
    // the task timeout and is abandoned; whoever gets the partition (B, or A's next task)
    // re-initialises its transactional.id, which fences the stuck producer and aborts its
    // transaction.
    let b = spawn(t.pipeline(&app, Guarantee::ExactlyOncePerPartition).rebalancing(Rebalancing::Eager));
    t.wait_caught_up(&app, Duration::from_secs(90)).await;

    // Wake the zombie: it finishes processing and tries to commit with a fenced producer.
    stuck.release();
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.handle.summary().producers_fenced == 0 {
        assert!(Instant::now() < deadline, "the zombie's commit was not fenced: {:?}", a.handle.summary());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sa = a.stop().await;
    let sb = b.stop().await;
    let report = t.verify().await;
    assert!(report.is_exactly_once(), "{report:?} (A: {sa:?}, B: {sb:?})");
    assert_eq!(report.output_records, RECORDS);
    assert_eq!(sa.records_in + sb.records_in, RECORDS, "every record committed once across both instances");
}
