// The chaos suite's copy written with Kafka's own clients only: a read-process-write loop
// on the Java transactional producer and consumer, as Kafka's documentation writes it
// (KIP-447: one producer per process, the offsets sent with the consumer's group metadata,
// so that the group generation fences a zombie). cli/src/java.rs compiles it; the chaos
// suite runs it with `--subject java-txn` and judges it with the same verifier as ours.
//
// Each poll is one transaction. Every record is copied unchanged (key, value) to the output
// partition with the input's number, with the header kafka-eos.origin = topic/partition/
// offset that the verifier joins on. An abortable error aborts and rewinds to the committed
// offsets; a fatal one (fenced producer, and the like) closes both clients and starts them
// again with the same transactional.id, whose initTransactions aborts what was left open.
//
// Usage: TxnCopyApp <bootstrap> <group> <input> <output> <transactional-id> <session-ms>
//                   <transaction-timeout-ms> <status-ms>
// Prints "chaos-status key=value ..." every status-ms; on SIGTERM, finishes the transaction
// in progress, prints "chaos-final ..." and exits 0.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnCopyApp {
    private static final String ORIGIN_HEADER = "kafka-eos.origin";

    private static final AtomicLong RECORDS_IN = new AtomicLong();
    private static final AtomicLong RECORDS_OUT = new AtomicLong();
    private static final AtomicLong COMMITTED = new AtomicLong();
    private static final AtomicLong ABORTED = new AtomicLong();
    private static final AtomicLong FENCED = new AtomicLong();
    private static final AtomicLong REBALANCES = new AtomicLong();

    private static volatile boolean running = true;
    private static volatile KafkaConsumer<byte[], byte[]> current;

    /** An error after which the producer cannot go on: start both clients again. */
    private static final class Restart extends RuntimeException {
        Restart(Throwable cause) {
            super(cause);
        }
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 8) {
            System.err.println("usage: TxnCopyApp <bootstrap> <group> <input> <output> <transactional-id> "
                    + "<session-ms> <transaction-timeout-ms> <status-ms>");
            System.exit(2);
        }
        long statusMs = Long.parseLong(args[7]);
        Thread loop = Thread.currentThread();
        Thread status = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(statusMs);
                } catch (InterruptedException e) {
                    return;
                }
                printStatus("chaos-status");
            }
        }, "status");
        status.setDaemon(true);
        status.start();
        // SIGTERM: stop between transactions, then print the final status.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            running = false;
            KafkaConsumer<byte[], byte[]> c = current;
            if (c != null) {
                c.wakeup();
            }
            try {
                loop.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            printStatus("chaos-final");
            // A stop asked for and done: exit 0, not the JVM's 143 for SIGTERM.
            Runtime.getRuntime().halt(0);
        }));
        while (running) {
            try {
                runClients(args);
            } catch (Restart e) {
                FENCED.incrementAndGet();
                System.err.println("restarting the clients after: " + e.getCause());
            } catch (WakeupException e) {
                // SIGTERM while polling.
            } catch (KafkaException e) {
                System.err.println("restarting the clients after: " + e);
            }
        }
    }

    private static synchronized void printStatus(String kind) {
        System.out.println(kind + " records_in=" + RECORDS_IN.get() + " records_out=" + RECORDS_OUT.get()
                + " committed=" + COMMITTED.get() + " aborted=" + ABORTED.get() + " fenced=" + FENCED.get()
                + " rebalances=" + REBALANCES.get());
        System.out.flush();
    }

    private static void runClients(String[] args) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, args[5]);
        c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, String.valueOf(Long.parseLong(args[5]) / 3));
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[4]);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, args[6]);
        String input = args[2];
        String output = args[3];
        try (KafkaConsumer<byte[], byte[]> consumer =
                        new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
                KafkaProducer<byte[], byte[]> producer =
                        new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            current = consumer;
            try {
                producer.initTransactions();
            } catch (ProducerFencedException | InvalidProducerEpochException | AuthorizationException e) {
                throw new Restart(e);
            }
            consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    REBALANCES.incrementAndGet();
                }
            });
            while (running) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                if (records.isEmpty()) {
                    continue;
                }
                RECORDS_IN.addAndGet(records.count());
                copy(consumer, producer, output, records);
            }
        } finally {
            current = null;
        }
    }

    /** One transaction: the records' copies and their offsets, committed or aborted. */
    private static void copy(KafkaConsumer<byte[], byte[]> consumer, KafkaProducer<byte[], byte[]> producer,
            String output, ConsumerRecords<byte[], byte[]> records) {
        try {
            producer.beginTransaction();
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            for (ConsumerRecord<byte[], byte[]> r : records) {
                RecordHeaders headers = new RecordHeaders();
                String origin = r.topic() + "/" + r.partition() + "/" + r.offset();
                headers.add(ORIGIN_HEADER, origin.getBytes(StandardCharsets.UTF_8));
                producer.send(new ProducerRecord<>(output, r.partition(), r.key(), r.value(), headers));
                next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
            }
            producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
            commit(producer);
            COMMITTED.incrementAndGet();
            RECORDS_OUT.addAndGet(records.count());
        } catch (ProducerFencedException | InvalidProducerEpochException | OutOfOrderSequenceException
                | AuthorizationException | UnsupportedVersionException e) {
            throw new Restart(e);
        } catch (KafkaException e) {
            System.err.println("aborting the transaction after: " + e);
            try {
                producer.abortTransaction();
            } catch (KafkaException fatal) {
                throw new Restart(fatal);
            }
            ABORTED.incrementAndGet();
            rewind(consumer);
        }
    }

    /** A commit that timed out may be retried, and must be before anything else. */
    private static void commit(KafkaProducer<byte[], byte[]> producer) {
        while (true) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                System.err.println("commit timed out, retrying: " + e);
            }
        }
    }

    /** Every assigned partition back to its committed offset (its start if none). */
    private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        Set<TopicPartition> assigned = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata o = committed.get(tp);
            if (o == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, o.offset());
            }
        }
    }
}
