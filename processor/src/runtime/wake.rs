//! Waking librdkafka's fetchers after partitions are resumed. A resume only flags the
//! partition (librdkafka 2.12), and a broker thread whose partitions were all paused idles up
//! to 1 s before it fetches again. So after a resume a helper thread sends one `ListOffsets`
//! to the leader of one resumed partition per broker, which wakes that broker's thread
//! (leaders refreshed past [`LEADERS_TTL`]; a stale one only misses). Nothing runs on the
//! poll thread, and [`FetchWaker::stop`] ends the helper before the consumer is let go, so the
//! consumer is never closed on the helper's thread.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use crate::partition::TopicPartition;
use crate::record::Topic;
use crate::runtime::task_manager::start::join_by;

/// How long the leaders of the last metadata fetch are trusted.
const LEADERS_TTL: Duration = Duration::from_secs(30);
/// Bound of each request the helper makes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Left for librdkafka's main thread to apply the resume before the poke.
const SETTLE: Duration = Duration::from_millis(5);

/// Hands resumed partitions to the helper thread (cheap, never blocks).
pub(crate) struct FetchWaker {
    tx: Sender<Vec<TopicPartition>>,
    stopped: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl FetchWaker {
    /// Starts the helper thread for `consumer`; it ends at [`stop`](Self::stop), or when
    /// this waker or the consumer is dropped.
    pub(crate) fn start<C: ConsumerContext + 'static>(consumer: Weak<BaseConsumer<C>>) -> std::io::Result<FetchWaker> {
        let (tx, rx) = channel();
        let stopped = Arc::new(AtomicBool::new(false));
        let flag = stopped.clone();
        let thread =
            std::thread::Builder::new().name("kafka-eos-wake".into()).spawn(move || serve(&consumer, &rx, &flag))?;
        Ok(FetchWaker { tx, stopped, thread: Mutex::new(Some(thread)) })
    }

    /// Stops the helper and waits until `deadline` for it to end (it may be in the middle
    /// of its requests, each bounded by [`REQUEST_TIMEOUT`]).
    pub(crate) fn stop(&self, deadline: Instant) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = self.tx.send(Vec::new());
        let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        if !join_by(thread, deadline) {
            tracing::debug!("the fetch waker is still in a request at the deadline: left to end on its own");
        }
    }

    /// Wakes the fetchers of `partitions`, just resumed.
    pub(crate) fn wake(&self, partitions: impl IntoIterator<Item = TopicPartition>) {
        let partitions: Vec<TopicPartition> = partitions.into_iter().collect();
        if !partitions.is_empty() {
            // The helper is gone only with the consumer: nothing left to wake.
            let _ = self.tx.send(partitions);
        }
    }
}

fn serve<C: ConsumerContext>(
    consumer: &Weak<BaseConsumer<C>>,
    rx: &Receiver<Vec<TopicPartition>>,
    stopped: &AtomicBool,
) {
    let mut leaders = Leaders::default();
    while let Ok(mut partitions) = rx.recv() {
        std::thread::sleep(SETTLE);
        while let Ok(more) = rx.try_recv() {
            partitions.extend(more);
        }
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        let Some(consumer) = consumer.upgrade() else { return };
        for (topic, partition) in leaders.one_per_leader(&*consumer, &partitions) {
            if let Err(e) = consumer.fetch_watermarks(topic.as_str(), partition, REQUEST_TIMEOUT) {
                tracing::debug!(%topic, partition, error = %e, "waking the partition's fetcher failed");
            }
        }
    }
}

/// Partition leaders, from the last metadata fetch.
#[derive(Default)]
struct Leaders {
    by_partition: HashMap<TopicPartition, i32>,
    fetched: Option<Instant>,
}

impl Leaders {
    /// One of `partitions` per leader broker (partitions whose leader is unknown left out).
    fn one_per_leader<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        partitions: &[TopicPartition],
    ) -> Vec<TopicPartition> {
        let stale = self.fetched.is_none_or(|t| t.elapsed() > LEADERS_TTL);
        if stale || partitions.iter().any(|tp| !self.by_partition.contains_key(tp)) {
            let topics: BTreeSet<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
            for topic in topics {
                match consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT) {
                    Ok(md) => {
                        for t in md.topics() {
                            let name = Topic::new(t.name());
                            for p in t.partitions() {
                                self.by_partition.insert((name.clone(), p.id()), p.leader());
                            }
                        }
                    }
                    Err(e) => tracing::debug!(%topic, error = %e, "partition leaders unknown: not waking its fetchers"),
                }
            }
            self.fetched = Some(Instant::now());
        }
        pick(&self.by_partition, partitions)
    }
}

/// The first of `partitions` for each leader in `leaders` (a negative leader: none).
fn pick(leaders: &HashMap<TopicPartition, i32>, partitions: &[TopicPartition]) -> Vec<TopicPartition> {
    let mut one: BTreeMap<i32, TopicPartition> = BTreeMap::new();
    for tp in partitions {
        if let Some(&leader) = leaders.get(tp).filter(|l| **l >= 0) {
            one.entry(leader).or_insert_with(|| tp.clone());
        }
    }
    one.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stop` ends an idle helper at once (without the stop flag's wake-up it would wait
    /// out its deadline), and returns by its deadline after a wake, whose requests go to a
    /// broker that is not there.
    #[test]
    fn stop_ends_an_idle_helper_at_once_and_returns_by_its_deadline_after_a_wake() {
        let consumer: Arc<BaseConsumer> = Arc::new(
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", "127.0.0.1:1")
                .set("group.id", "wake-test")
                .set("log_level", "0")
                .create()
                .expect("a consumer"),
        );
        let idle = FetchWaker::start(Arc::downgrade(&consumer)).expect("the helper");
        let t = Instant::now();
        idle.stop(Instant::now() + Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1), "an idle helper took {:?}", t.elapsed());

        let woken = FetchWaker::start(Arc::downgrade(&consumer)).expect("the helper");
        woken.wake([(Topic::new("t"), 0)]);
        std::thread::sleep(SETTLE * 10);
        let t = Instant::now();
        woken.stop(Instant::now() + Duration::from_millis(200));
        assert!(t.elapsed() < REQUEST_TIMEOUT, "stop waited {:?}", t.elapsed());
    }

    #[test]
    fn one_partition_is_picked_per_known_leader() {
        let tp = |t: &str, p: i32| (Topic::new(t), p);
        let leaders: HashMap<TopicPartition, i32> =
            [(tp("a", 0), 1), (tp("a", 1), 2), (tp("a", 2), 1), (tp("b", 0), 2), (tp("b", 1), -1)].into();
        let asked = [tp("a", 2), tp("a", 0), tp("b", 0), tp("b", 1), tp("c", 0)];
        assert_eq!(pick(&leaders, &asked), vec![tp("a", 2), tp("b", 0)]);
    }
}
