//! The windowed stream–stream join against a real broker: orders and shipments keyed by order
//! id — on one input topic, or on two co-partitioned topics — joined within a window by a
//! pipeline stopped and restarted mid-run and with injected aborts. The committed pairs equal
//! a batch computation, none twice, and the late records reach the late topic once each.
//! Both exactly-once modes.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_eos::operators::StreamJoin;
use kafka_eos::{Guarantee, OutputRecord, Pipeline, PipelineBuilder, Rebalancing, Summary};
use kafka_eos_testkit::admin::{self, Client};
use kafka_eos_testkit::read::read_all;

use crate::common::{bootstrap, replaying, spawn, unique, FailOnce};

const PARTITIONS: i32 = 3;
const ORDERS: u64 = 2_500;
const T0: i64 = 1_700_000_000_000;
const WINDOW_MS: i64 = 2_000;
const GRACE_MS: i64 = 500;
/// With two topics, which side's records come first is up to the consumer's fetches: a grace
/// longer than any disorder makes the result independent of it (nothing is late).
const TWO_TOPIC_GRACE_MS: i64 = 3_600_000;

/// An input event: order id, event time, and `None` for the order or `Some(shipment id)`.
#[derive(Clone, Copy)]
struct Event {
    order: u64,
    t: i64,
    shipment: Option<u64>,
}

impl Event {
    fn partition(&self) -> i32 {
        (self.order % PARTITIONS as u64) as i32
    }

    fn value(&self) -> String {
        match self.shipment {
            None => format!("order {} {}", self.order, self.t),
            Some(s) => format!("shipment {} {s} {}", self.order, self.t),
        }
    }
}

/// The input in arrival order: an order every 20 ms with 1 to 3 shipments, some up to a
/// window before the order (most of those arrive first), some after, some further than the
/// window; records arrive up to 1.5 s out of order (within window + grace), and 3 % of them
/// 6 to 10 s late.
fn events() -> Vec<Event> {
    let mut seed = 0x5851_f42d_4c95_7f2du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut out, mut shipments) = (Vec::new(), 0);
    for order in 0..ORDERS {
        let t = T0 + order as i64 * 20;
        out.push(Event { order, t, shipment: None });
        for _ in 0..1 + next(3) {
            let offset = match next(10) {
                0..=2 => -(next(WINDOW_MS as u64 + 1) as i64),
                3..=6 => next(WINDOW_MS as u64) as i64,
                7 => WINDOW_MS,
                _ => WINDOW_MS + 1 + next(3 * WINDOW_MS as u64) as i64,
            };
            shipments += 1;
            out.push(Event { order, t: t + offset, shipment: Some(shipments) });
        }
    }
    let mut arriving: Vec<(i64, Event)> = out
        .into_iter()
        .map(|e| {
            let delay = if next(100) < 3 { 6_000 + next(4_000) } else { next(1_500) };
            (e.t + delay as i64, e)
        })
        .collect();
    arriving.sort_by_key(|(arrival, _)| *arrival);
    arriving.into_iter().map(|(_, e)| e).collect()
}

/// What the committed output must hold — `order/shipment → "t_order t_shipment"` for every
/// order and shipment within the window, neither late — and the late records' values.
fn batch(events: &[Event], grace_ms: i64) -> (BTreeMap<String, String>, Vec<String>) {
    let (mut stream_time, mut late) = (BTreeMap::<i32, i64>::new(), Vec::new());
    let (mut orders, mut shipments) = (BTreeMap::new(), Vec::new());
    for e in events {
        let max = stream_time.entry(e.partition()).or_insert(i64::MIN);
        if e.t < max.saturating_sub(WINDOW_MS + grace_ms) {
            late.push(e.value());
            continue;
        }
        *max = (*max).max(e.t);
        match e.shipment {
            None => {
                orders.insert(e.order, e.t);
            }
            Some(_) => shipments.push(*e),
        }
    }
    let mut pairs = BTreeMap::new();
    for s in shipments {
        if let Some(&t) = orders.get(&s.order).filter(|t| t.abs_diff(s.t) <= WINDOW_MS as u64) {
            pairs.insert(format!("{}/{}", s.order, s.shipment.unwrap()), format!("{t} {}", s.t));
        }
    }
    late.sort();
    (pairs, late)
}

struct Joining {
    bootstrap: String,
    input: String,
    /// The shipments' own topic (co-partitioned with `input`, the orders'), if not `input`.
    shipments: Option<String>,
    /// The group protocol with two topics (a range assignor either way).
    protocol: Rebalancing,
    output: String,
    late: String,
    app: String,
    guarantee: Guarantee,
    /// Records that failed once already (an injected abort each).
    failed: FailOnce,
}

impl Joining {
    fn pipeline(&self) -> PipelineBuilder {
        let mut b = replaying(&self.bootstrap, &self.app, &self.input, self.guarantee, 300);
        if let Some(shipments) = &self.shipments {
            // Partition n of both topics on one instance: a range assignor.
            b = b.input_topic(shipments).rebalancing(self.protocol);
            if self.protocol == Rebalancing::Consumer {
                b = b.consumer_property("group.remote.assignor", "range");
            }
        }
        let join = StreamJoin::<u64, (), u64>::new(&mut b, "order-shipments", Duration::from_millis(WINDOW_MS as u64))
            .unwrap()
            .grace(Duration::from_millis(self.grace_ms() as u64));
        let (out, late) = (b.output_topic(&self.output), b.output_topic(&self.late));
        let failed = self.failed.clone();
        b.processor(move |ctx, rec| {
            failed.check(rec, rec.offset % 500 == 150)?;
            let text = String::from_utf8(rec.value.clone().unwrap_or_default())?;
            let fields: Vec<&str> = text.split(' ').collect();
            let update = match fields[..] {
                ["order", order, t] => join.left(ctx, &order.parse()?, t.parse()?, ())?,
                ["shipment", order, shipment, t] => join.right(ctx, &order.parse()?, t.parse()?, shipment.parse()?)?,
                _ => return Err(format!("bad record {text:?}").into()),
            };
            if let Some(record) = update.late_record(rec, &late) {
                ctx.emit(record);
            }
            for pair in update.joined {
                ctx.emit(
                    OutputRecord::to(&out)
                        .key(format!("{}/{}", pair.key, pair.right))
                        .value(format!("{} {}", pair.left_time_ms, pair.right_time_ms)),
                );
            }
            Ok(())
        })
    }

    fn grace_ms(&self) -> i64 {
        if self.shipments.is_some() {
            TWO_TOPIC_GRACE_MS
        } else {
            GRACE_MS
        }
    }

    async fn produce(&self, events: &[Event]) {
        let record = |e: &Event| (Some(e.partition()), e.order.to_string().into_bytes(), e.value().into_bytes());
        // One topic: in arrival order. Two: each side in its order, to its topic.
        let writes = match &self.shipments {
            None => vec![(self.input.clone(), events.iter().map(record).collect::<Vec<_>>())],
            Some(shipments) => {
                let (orders, shipped): (Vec<&Event>, Vec<&Event>) = events.iter().partition(|e| e.shipment.is_none());
                vec![
                    (self.input.clone(), orders.into_iter().map(record).collect()),
                    (shipments.clone(), shipped.into_iter().map(record).collect()),
                ]
            }
        };
        let b = self.bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            writes.into_iter().try_for_each(|(t, records)| admin::produce(&b, &t, records))
        })
        .await
        .unwrap()
        .expect("produce");
    }

    /// Waits until the group has committed every input record.
    async fn caught_up(&self) {
        let mut t = vec![self.input.clone()];
        t.extend(self.shipments.clone());
        let (b, g) = (self.bootstrap.clone(), self.app.clone());
        tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &g, &t, Duration::from_secs(120)))
            .await
            .unwrap()
            .expect("caught up");
    }

    /// Every committed record of `topic`: (key, value).
    async fn read(&self, topic: &str) -> Vec<(String, String)> {
        let (b, topic) = (self.bootstrap.clone(), topic.to_string());
        let records = tokio::task::spawn_blocking(move || read_all(&Client::new(&b), &topic, Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("read");
        let text = |b: &Option<Vec<u8>>| String::from_utf8_lossy(b.as_deref().unwrap_or_default()).into_owned();
        records.iter().map(|r| (text(&r.key), text(&r.value))).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_join_shipments_within_the_window_once_each_across_restarts_and_aborts() {
    join_across_restarts_and_aborts(None).await;
}

/// Orders and shipments on two topics: partition n of both in one task (one transactional.id
/// in per-partition mode), their join state shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_and_shipments_on_two_co_partitioned_topics_join_once_each_across_restarts_and_aborts() {
    join_across_restarts_and_aborts(Some(Rebalancing::Eager)).await;
}

/// The same on the KIP-848 consumer protocol with the broker's range assignor (per-partition
/// mode: the per-consumer mode accepts only eager rebalancing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_co_partitioned_topics_join_on_the_consumer_protocol_with_the_range_assignor() {
    join_across_restarts_and_aborts(Some(Rebalancing::Consumer)).await;
}

/// `two_topics`: the group protocol of a two-topic run; `None`: one topic.
async fn join_across_restarts_and_aborts(two_topics: Option<Rebalancing>) {
    let protocol = two_topics.unwrap_or(Rebalancing::Eager);
    let two_topics = two_topics.is_some();
    let events = events();
    let (want, want_late) = batch(&events, if two_topics { TWO_TOPIC_GRACE_MS } else { GRACE_MS });
    let arrival: BTreeMap<(u64, Option<u64>), usize> =
        events.iter().enumerate().map(|(i, e)| ((e.order, e.shipment), i)).collect();
    let before_order = want
        .keys()
        .filter(|k| {
            let (order, shipment) = k.split_once('/').unwrap();
            let (order, shipment) = (order.parse().unwrap(), shipment.parse().unwrap());
            arrival[&(order, Some(shipment))] < arrival[&(order, None)]
        })
        .count();
    let outside = events
        .iter()
        .filter(|e| e.shipment.is_some() && e.t.abs_diff(T0 + e.order as i64 * 20) > WINDOW_MS as u64)
        .count();
    println!(
        "{} pairs ({before_order} with a shipment first), {} late, {outside} shipments outside the window",
        want.len(),
        want_late.len()
    );
    assert!(want.len() > 3_000 && before_order > 300 && outside > 500);
    assert!(if two_topics { want_late.is_empty() } else { want_late.len() > 100 });

    let guarantees: &[Guarantee] = match protocol {
        Rebalancing::Consumer => &[Guarantee::ExactlyOncePerPartition],
        _ => &[Guarantee::ExactlyOncePerPartition, Guarantee::ExactlyOncePerConsumer],
    };
    for &guarantee in guarantees {
        let name = unique("join");
        let j = Joining {
            bootstrap: bootstrap(),
            input: format!("{name}-in"),
            shipments: two_topics.then(|| format!("{name}-shipments")),
            protocol,
            output: format!("{name}-out"),
            late: format!("{name}-late"),
            app: name,
            guarantee,
            failed: FailOnce::default(),
        };
        let mut topics = vec![j.input.clone(), j.output.clone(), j.late.clone()];
        topics.extend(j.shipments.clone());
        let b = j.bootstrap.clone();
        tokio::task::spawn_blocking(move || topics.iter().try_for_each(|t| admin::create_topic(&b, t, PARTITIONS, 1)))
            .await
            .unwrap()
            .expect("topics");
        let mut summaries: Vec<Summary> = Vec::new();
        for (i, part) in events.chunks(events.len() / 4 + 1).enumerate() {
            let run = spawn(j.pipeline());
            // Two topics: a second instance joins for one part, so the group's (eager,
            // range) rebalances split the partitions, each n of both topics together.
            let second = (two_topics && i == 1).then(|| spawn(j.pipeline()));
            if let Some(second) = &second {
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                while second.handle.health().partitions.is_empty() || run.handle.health().partitions.len() == 6 {
                    assert!(std::time::Instant::now() < deadline, "the second instance got no partitions");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            j.produce(part).await;
            match second {
                None => run.wait_records_in(part.len() as u64 / 3, Duration::from_secs(60)).await,
                Some(second) => {
                    j.caught_up().await;
                    let s = second.stop().await;
                    assert!(s.records_in > 0, "the second instance processed its partitions");
                    summaries.push(s);
                }
            }
            summaries.push(run.stop().await);
        }
        let last = spawn(j.pipeline());
        j.caught_up().await;
        summaries.push(last.stop().await);

        let mode = format!(
            "{}{}",
            guarantee.as_str(),
            if two_topics { format!(", two topics, {protocol:?}") } else { String::new() }
        );
        let output = j.read(&j.output).await;
        let got: BTreeMap<String, String> = output.iter().cloned().collect();
        assert_eq!(got.len(), output.len(), "{mode}: a pair committed twice");
        let wrong: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).take(10).collect();
        let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).take(10).collect();
        assert!(wrong.is_empty() && extra.is_empty(), "{mode}: wrong or missing {wrong:?}, extra {extra:?}");
        let mut late: Vec<String> = j.read(&j.late).await.into_iter().map(|(_, v)| v).collect();
        late.sort();
        assert_eq!(late, want_late, "{mode}: the late records, once each");
        let sum = |f: fn(&Summary) -> u64| summaries.iter().map(f).sum::<u64>();
        println!(
            "{mode}: {} aborts, {} restored records, {} late counted",
            sum(|s| s.transactions_aborted),
            sum(|s| s.restored_records),
            sum(|s| s.late_records)
        );
        // A producer given up with its commit in doubt drops that batch's counts.
        if sum(|s| s.producers_fenced) == 0 {
            assert_eq!(sum(|s| s.late_records), want_late.len() as u64, "{mode}: {summaries:?}");
        }
        assert!(sum(|s| s.transactions_aborted) >= 5, "{mode}: injected failures abort");
        assert!(sum(|s| s.restored_records) > 0, "{mode}: restarts restore the join's buffers");
    }
}

/// Co-partitioned inputs must have the same partition count: start-up refuses others,
/// naming the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_inputs_with_different_partition_counts_are_refused_at_start() {
    let name = unique("join-layout");
    let (b, orders, shipments) = (bootstrap(), format!("{name}-orders"), format!("{name}-shipments"));
    let (b2, o, s) = (b.clone(), orders.clone(), shipments.clone());
    tokio::task::spawn_blocking(move || {
        admin::create_topic(&b2, &o, 3, 1).and_then(|()| admin::create_topic(&b2, &s, 2, 1))
    })
    .await
    .unwrap()
    .expect("topics");
    let mut builder = Pipeline::builder()
        .bootstrap_servers(&b)
        .application_id(&name)
        .input_topic(&orders)
        .input_topic(&shipments)
        .rebalancing(Rebalancing::Eager)
        .handle_signals(false);
    let _join = StreamJoin::<u64, (), u64>::new(&mut builder, "j", Duration::from_secs(1)).unwrap();
    let err = crate::common::run_expecting_error(builder.processor(|_, _| Ok(()))).await.to_string();
    assert!(err.contains("co-partitioned") && err.contains("2)"), "{err}");
}
