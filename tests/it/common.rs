//! Shared fixtures: the broker, unique names, running pipelines in the background.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kafka_eos::processor::{Context, ProcessError};
use kafka_eos::{
    Error, Guarantee, InputRecord, OutputRecord, Pipeline, PipelineBuilder, ShutdownHandle, Summary, Topic,
};
use kafka_eos_testkit::admin;
use kafka_eos_testkit::broker::{Cluster, ClusterConfig};
use kafka_eos_testkit::verify::{read_to_end, verify, Report, VerifyConfig};
use rdkafka::Message;

/// The bootstrap servers of the binary's shared cluster (started on first use). A test
/// that cannot get a broker fails loudly: a skipped broker test would look green.
pub fn bootstrap() -> String {
    init_logging();
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            Cluster::from_env_or_start(ClusterConfig::default())
                .unwrap_or_else(|e| panic!("cannot start the test broker: {e}"))
        })
        .bootstrap_servers()
}

/// The tests' log: `RUST_LOG` picks what is printed; warnings are kept for [`warnings`].
pub fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let printed = tracing_subscriber::fmt::layer()
        .with_test_writer()
        .with_filter(tracing_subscriber::EnvFilter::from_default_env());
    let _ = tracing_subscriber::registry().with(printed).with(WarningLog).try_init();
}

/// Held by the tests that start a broker of their own, so that they start one at a time: a
/// new broker's first load is slow while another JVM warms up beside it on 2 cores.
pub async fn own_broker_turn() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// A name no other test (or earlier run against the same external cluster) uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}-{}-{}-{nanos:x}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Input and output topics with `partitions` partitions each, the input holding `records`
/// records of `value_size` bytes.
pub struct Topics {
    pub bootstrap: String,
    pub input: String,
    pub output: String,
    pub partitions: i32,
}

pub async fn topics(name: &str, partitions: i32, records: u64, value_size: usize) -> Topics {
    topics_on(&bootstrap(), name, partitions, records, value_size).await
}

/// [`topics`] on another cluster than the shared one.
pub async fn topics_on(bootstrap: &str, name: &str, partitions: i32, records: u64, value_size: usize) -> Topics {
    let t = Topics {
        bootstrap: bootstrap.to_string(),
        input: unique(&format!("{name}-in")),
        output: unique(&format!("{name}-out")),
        partitions,
    };
    let (b, i, o) = (t.bootstrap.clone(), t.input.clone(), t.output.clone());
    tokio::task::spawn_blocking(move || {
        admin::create_topic(&b, &i, partitions, 1)?;
        admin::create_topic(&b, &o, partitions, 1)?;
        if records > 0 {
            admin::produce_sequence(&b, &i, partitions, records, value_size)?;
        }
        Ok::<_, kafka_eos::Error>(())
    })
    .await
    .unwrap()
    .expect("topics");
    t
}

impl Topics {
    /// A builder with the test defaults: a 1:1 transform (value reversed) into the output
    /// topic, same partition as the input (so per-partition order can be checked).
    pub fn pipeline(&self, app: &str, guarantee: Guarantee) -> PipelineBuilder {
        let out = Topic::new(&self.output);
        Pipeline::builder()
            .bootstrap_servers(&self.bootstrap)
            .application_id(app)
            .input_topic(&self.input)
            .guarantee(guarantee)
            .handle_signals(false)
            .startup_timeout(Duration::from_secs(20))
            .processor(move |ctx, r| emit_reversed(ctx, &out, r))
    }

    pub async fn produce(&self, records: u64) {
        let (b, i, p) = (self.bootstrap.clone(), self.input.clone(), self.partitions);
        tokio::task::spawn_blocking(move || admin::produce_sequence(&b, &i, p, records, 100))
            .await
            .unwrap()
            .expect("produce");
    }

    pub async fn wait_caught_up(&self, app: &str, timeout: Duration) {
        let (b, g, t) = (self.bootstrap.clone(), app.to_string(), vec![self.input.clone()]);
        tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &g, &t, timeout))
            .await
            .unwrap()
            .expect("catch up");
    }

    pub async fn verify(&self) -> Report {
        self.verify_with(|_| {}).await
    }

    pub async fn verify_with(&self, tweak: impl FnOnce(&mut VerifyConfig)) -> Report {
        let mut cfg = VerifyConfig::new(&self.bootstrap, &self.input, &self.output);
        tweak(&mut cfg);
        tokio::task::spawn_blocking(move || verify(&cfg)).await.unwrap().expect("verify")
    }

    /// Output records as a read_uncommitted reader sees them (aborted ones included).
    pub async fn count_output_uncommitted(&self) -> u64 {
        let mut cfg = VerifyConfig::new(&self.bootstrap, &self.input, &self.output);
        cfg.client_properties.set("isolation.level", "read_uncommitted");
        let topic = self.output.clone();
        tokio::task::spawn_blocking(move || {
            let mut n = 0u64;
            kafka_eos_testkit::verify::read_to_end(&cfg, &topic, Instant::now() + Duration::from_secs(60), |_| n += 1)
                .map(|()| n)
        })
        .await
        .unwrap()
        .expect("read uncommitted")
    }
}

pub fn reversed(out: &Topic, r: &kafka_eos::InputRecord) -> OutputRecord {
    let mut v = r.value.clone().unwrap_or_default();
    v.reverse();
    let mut o = OutputRecord::to(out).value(v).partition(r.partition);
    o.key = r.key.clone();
    o
}

/// Emits [`reversed`]`(out, r)`: the test processors' usual output.
pub fn emit_reversed(ctx: &mut Context<'_>, out: &Topic, r: &InputRecord) -> Result<(), ProcessError> {
    ctx.emit(reversed(out, r));
    Ok(())
}

/// A pipeline running in the background.
pub struct Running {
    pub handle: ShutdownHandle,
    join: tokio::task::JoinHandle<kafka_eos::Result<Summary>>,
}

pub fn spawn(builder: PipelineBuilder) -> Running {
    let pipeline = builder.build().expect("valid pipeline");
    let handle = pipeline.shutdown_handle();
    Running { handle, join: tokio::spawn(pipeline.run()) }
}

impl Running {
    /// Graceful shutdown; panics if the pipeline failed.
    pub async fn stop(self) -> Summary {
        self.handle.shutdown();
        self.finish().await.expect("pipeline failed")
    }

    /// Waits for the pipeline to end by itself.
    pub async fn finish(self) -> kafka_eos::Result<Summary> {
        tokio::time::timeout(Duration::from_secs(120), self.join)
            .await
            .expect("pipeline did not stop within 120 s")
            .expect("pipeline task panicked")
    }

    /// Waits until the pipeline has committed at least `n` input records.
    pub async fn wait_records_in(&self, n: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.handle.summary().records_in < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} records in after {timeout:?}",
                self.handle.summary().records_in
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The stuck-mid-transaction fixture: a 1:1 processor that blocks the first time it reaches
/// one record, until released. Only the first task to get there blocks, so a partition
/// handed back to the same instance does not block again.
#[derive(Clone, Default)]
pub struct Stuck {
    reached: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

impl Stuck {
    /// The processor: outputs like [`reversed`] into `out`, blocking once at `partition`/`offset`.
    pub fn processor(
        &self,
        out: &str,
        partition: i32,
        offset: i64,
    ) -> impl FnMut(&mut Context<'_>, &InputRecord) -> Result<(), ProcessError> + Clone + Send + 'static {
        let (me, out) = (self.clone(), Topic::new(out));
        move |ctx, r| {
            if r.partition == partition && r.offset == offset && !me.reached.swap(true, Ordering::SeqCst) {
                while !me.release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            emit_reversed(ctx, &out, r)
        }
    }

    /// Waits until a task is blocked on the record.
    pub async fn wait_reached(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.reached.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "no task reached the stuck record within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets the blocked task go on.
    pub fn release(&self) {
        self.release.store(true, Ordering::SeqCst);
    }
}

/// A pipeline that outputs nothing.
pub fn noop(bootstrap: &str, app: &str, topic: &str) -> PipelineBuilder {
    Pipeline::builder()
        .bootstrap_servers(bootstrap)
        .application_id(app)
        .input_topic(topic)
        .handle_signals(false)
        .processor(|_, _| Ok(()))
}

/// Runs a pipeline that must fail, returning its error.
pub async fn run_expecting_error(builder: PipelineBuilder) -> Error {
    builder.build().expect("valid pipeline").run().await.expect_err("the pipeline must fail")
}

/// A pipeline over `input` for the replay tests: processor errors retried once, at once, so
/// that each [`FailOnce`] failure aborts its batch and replays it.
pub fn replaying(bootstrap: &str, app: &str, input: &str, guarantee: Guarantee, max_records: usize) -> PipelineBuilder {
    Pipeline::builder()
        .bootstrap_servers(bootstrap)
        .application_id(app)
        .input_topic(input)
        .guarantee(guarantee)
        .handle_signals(false)
        .max_records_per_transaction(max_records)
        .on_processor_error(kafka_eos::ProcessorErrorPolicy::retry(1).backoff(Duration::from_millis(1)))
}

/// Fails chosen records once each (an injected processor error: the batch aborts and is
/// replayed), remembered across restarts of the pipeline.
#[derive(Clone, Default)]
pub struct FailOnce(Arc<Mutex<HashSet<(kafka_eos::Topic, i32, i64)>>>);

impl FailOnce {
    /// `Err` the first time `rec` comes with `chosen`.
    pub fn check(&self, rec: &InputRecord, chosen: bool) -> Result<(), ProcessError> {
        if chosen && self.0.lock().unwrap().insert((rec.topic.clone(), rec.partition, rec.offset)) {
            return Err(format!("injected failure at {}", rec.origin()).into());
        }
        Ok(())
    }
}

/// Every `warn` (and `error`) event of the binary's tests, as `message field=value ...`
/// lines, whatever `RUST_LOG` prints: what [`warnings`] reads.
struct WarningLog;

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarningLog {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() > tracing::Level::WARN {
            return;
        }
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                use std::fmt::Write;
                let _ = if field.name() == "message" {
                    write!(self.0, "{value:?}")
                } else {
                    write!(self.0, " {}={value:?}", field.name())
                };
            }
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        WARNINGS.lock().unwrap().push(line.0);
    }
}

/// The warnings logged so far (by any test of the binary) that contain `needle`.
pub fn warnings(needle: &str) -> Vec<String> {
    WARNINGS.lock().unwrap().iter().filter(|w| w.contains(needle)).cloned().collect()
}

/// Waits until `group` has committed everything in `topic` (two minutes at most).
pub async fn caught_up(bootstrap: &str, group: &str, topic: &str) {
    let (b, g, t) = (bootstrap.to_string(), group.to_string(), vec![topic.to_string()]);
    tokio::task::spawn_blocking(move || admin::wait_for_catch_up(&b, &g, &t, Duration::from_secs(120)))
        .await
        .unwrap()
        .expect("caught up");
}

/// How long partition 0 of `topic` keeps a transaction open, from now: the time until its
/// last stable offset (what a read_committed consumer may read up to) reaches its high
/// watermark, polled every 50 ms; `max` if it does not by then. A transaction left open
/// hides every later committed record of the partition from read_committed readers.
pub async fn open_transaction_time(bootstrap: &str, topic: &str, max: Duration) -> Duration {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let reader = |isolation: &str| -> BaseConsumer {
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("group.id", "open-transaction-probe")
                .set("isolation.level", isolation)
                .create()
                .expect("watermark reader")
        };
        let (committed, uncommitted) = (reader("read_committed"), reader("read_uncommitted"));
        let started = Instant::now();
        while started.elapsed() < max {
            let ask = Duration::from_secs(5);
            if let (Ok((_, stable)), Ok((_, high))) =
                (committed.fetch_watermarks(&topic, 0, ask), uncommitted.fetch_watermarks(&topic, 0, ask))
            {
                if stable == high {
                    return started.elapsed();
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        max
    })
    .await
    .unwrap()
}

/// Every committed record of `output` (a pipeline's from `input`): key -> values, in order.
pub async fn committed_by_key(bootstrap: &str, input: &str, output: &str) -> BTreeMap<String, Vec<String>> {
    let cfg = VerifyConfig::new(bootstrap, input, output);
    let topic = output.to_string();
    tokio::task::spawn_blocking(move || {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        read_to_end(&cfg, &topic, Instant::now() + Duration::from_secs(60), |m| {
            let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
            out.entry(text(m.key())).or_default().push(text(m.payload()));
        })
        .map(|()| out)
    })
    .await
    .unwrap()
    .expect("read")
}
