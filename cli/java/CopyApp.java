// The Kafka Streams peer of the kafka-eos benchmarks and a subject of the chaos suite
// (`--subject kafka-streams`); cli/src/java.rs compiles it. The same 1:1 copy as the Rust
// pipelines, so that the two can be compared on the same broker and the same input.
//
// Every record is forwarded unchanged (key, value) to the output partition with the
// input's number (input record i sits in partition i % n and has key "i"), with the
// header kafka-eos.origin = topic/partition/offset that kafka_eos_testkit::verify joins on.
// Everything else is Kafka Streams' defaults: one stream thread, its producer and
// consumer settings, and, under exactly_once_v2, one transactional producer per thread.
//
// Usage: CopyApp <bootstrap> <application-id> <input> <output> <guarantee> <commit-ms> <state-dir>
//                [<status-ms> <session-ms> <transaction-timeout-ms>]
//   guarantee: exactly_once_v2 | at_least_once
//   status-ms: print "chaos-status key=value ..." that often (the chaos suite's status
//   line: records processed, commits, rebalances), and "chaos-final ..." on SIGTERM.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StreamPartitioner;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;

public final class CopyApp {
    private static final String ORIGIN_HEADER = "kafka-eos.origin";
    private static final AtomicLong PROCESSED = new AtomicLong();
    private static final AtomicLong REBALANCES = new AtomicLong();
    /** The commits last read from the metrics, which a closed KafkaStreams no longer has. */
    private static final AtomicLong COMMITS = new AtomicLong();

    /** Adds the origin header and forwards the record unchanged. */
    static final class Tag implements Processor<byte[], byte[], byte[], byte[]> {
        private ProcessorContext<byte[], byte[]> context;

        @Override
        public void init(ProcessorContext<byte[], byte[]> context) {
            this.context = context;
        }

        @Override
        public void process(Record<byte[], byte[]> record) {
            RecordMetadata m = context.recordMetadata().orElseThrow();
            String origin = m.topic() + "/" + m.partition() + "/" + m.offset();
            RecordHeaders headers = new RecordHeaders();
            headers.add(ORIGIN_HEADER, origin.getBytes(StandardCharsets.UTF_8));
            context.forward(record.withHeaders(headers));
            PROCESSED.incrementAndGet();
        }
    }

    /** Output partition = input partition, recovered from the decimal key. */
    static final class SamePartition implements StreamPartitioner<byte[], byte[]> {
        @Override
        public Optional<Set<Integer>> partitions(String topic, byte[] key, byte[] value, int numPartitions) {
            if (key == null) {
                return Optional.empty();
            }
            long k = 0;
            for (byte b : key) {
                if (b < '0' || b > '9') {
                    return Optional.empty();
                }
                k = k * 10 + (b - '0');
            }
            return Optional.of(Set.of((int) (k % numPartitions)));
        }
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 7 && args.length != 10) {
            System.err.println("usage: CopyApp <bootstrap> <application-id> <input> <output> <guarantee> <commit-ms> <state-dir>"
                    + " [<status-ms> <session-ms> <transaction-timeout-ms>]");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[4]);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args[5]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
        if (args.length == 10) {
            props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), args[8]);
            props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), String.valueOf(Long.parseLong(args[8]) / 3));
            props.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), args[9]);
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .process(Tag::new)
                .to(args[3], Produced.with(Serdes.ByteArray(), Serdes.ByteArray())
                        .withStreamPartitioner(new SamePartition()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + before + " -> " + now);
            if (now == KafkaStreams.State.REBALANCING) {
                REBALANCES.incrementAndGet();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        boolean chaos = args.length == 10;
        // The bench stops us with SIGTERM once every input record is committed.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            stopped.countDown();
            if (chaos) {
                printStatus("chaos-final", streams);
                // A stop asked for and done: exit 0, not the JVM's 143 for SIGTERM.
                Runtime.getRuntime().halt(0);
            }
        }));
        streams.start();
        if (chaos) {
            long statusMs = Long.parseLong(args[7]);
            Thread status = new Thread(() -> {
                while (true) {
                    try {
                        Thread.sleep(statusMs);
                    } catch (InterruptedException e) {
                        return;
                    }
                    printStatus("chaos-status", streams);
                }
            }, "status");
            status.setDaemon(true);
            status.start();
        }
        stopped.await();
    }

    /** The chaos suite's status line; commits from the stream threads' metrics. */
    private static synchronized void printStatus(String kind, KafkaStreams streams) {
        double commits = 0;
        for (var e : streams.metrics().entrySet()) {
            if (e.getKey().name().equals("commit-total") && e.getKey().group().equals("stream-thread-metrics")) {
                commits += ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        long processed = PROCESSED.get();
        long committed = COMMITS.accumulateAndGet((long) commits, Math::max);
        System.out.println(kind + " records_in=" + processed + " records_out=" + processed + " committed="
                + committed + " aborted=0 fenced=0 rebalances=" + REBALANCES.get());
        System.out.flush();
    }
}
