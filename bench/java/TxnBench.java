import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactional producer throughput and commit latency, the same program against any
 * Kafka-compatible cluster (bench/txn.sh runs it against Runnel and Apache Kafka).
 *
 * <pre>
 * TxnBench --bootstrap B --topic T [--seconds 10] [--record-size 512] [--partitions 12]
 *          [--replication 3] [--commit-ms 100]   (0: no transactions, an idempotent producer)
 *          [--rate R]   (records per second; 0, the default: as fast as the producer takes them)
 * </pre>
 *
 * With --commit-ms N it runs transactions back to back: each sends records as fast as the
 * producer takes them (acks=all, linger 5 ms, 128 KiB batches) for N ms, then commits;
 * commitTransaction() is timed (it returns once the commit is durable at the coordinator,
 * after every record of the transaction is acknowledged). Prints one line:
 * records_per_s, mb_per_s, commits, commit_p50_ms, commit_p99_ms, commit_max_ms.
 */
public class TxnBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = null, topic = null;
        int seconds = 10, recordSize = 512, partitions = 12, commitMs = 100;
        long rate = 0;
        short replication = 3;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--bootstrap" -> bootstrap = args[i + 1];
                case "--topic" -> topic = args[i + 1];
                case "--seconds" -> seconds = Integer.parseInt(args[i + 1]);
                case "--record-size" -> recordSize = Integer.parseInt(args[i + 1]);
                case "--partitions" -> partitions = Integer.parseInt(args[i + 1]);
                case "--replication" -> replication = Short.parseShort(args[i + 1]);
                case "--commit-ms" -> commitMs = Integer.parseInt(args[i + 1]);
                case "--rate" -> rate = Long.parseLong(args[i + 1]);
                default -> throw new IllegalArgumentException(args[i]);
            }
        }
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, replication))).all().get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, 131072);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        boolean transactional = commitMs > 0;
        if (transactional) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-bench");
        }
        byte[] value = new byte[recordSize];
        new java.util.Random(1).nextBytes(value);
        AtomicLong acked = new AtomicLong();
        List<Double> commitsMs = new ArrayList<>();
        long start, end;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            if (transactional) {
                producer.initTransactions();
            }
            // One warm-up second, not counted.
            long warm = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
            while (System.nanoTime() < warm) {
                if (transactional) {
                    producer.beginTransaction();
                }
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(Math.max(commitMs, 100));
                while (System.nanoTime() < until) {
                    producer.send(new ProducerRecord<>(topic, value));
                }
                if (transactional) {
                    producer.commitTransaction();
                } else {
                    producer.flush();
                }
            }
            start = System.nanoTime();
            long stop = start + TimeUnit.SECONDS.toNanos(seconds);
            long sent = 0;
            while (System.nanoTime() < stop) {
                if (transactional) {
                    producer.beginTransaction();
                }
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(transactional ? commitMs : 100);
                while (System.nanoTime() < until) {
                    if (rate > 0) {
                        // Paced: record n is due at start + n / rate.
                        long due = start + sent * 1_000_000_000L / rate;
                        long wait = due - System.nanoTime();
                        if (wait > 0) {
                            java.util.concurrent.locks.LockSupport.parkNanos(Math.min(wait, until - System.nanoTime()));
                            continue;
                        }
                    }
                    sent++;
                    producer.send(new ProducerRecord<>(topic, value), (m, e) -> {
                        if (e == null) {
                            acked.incrementAndGet();
                        }
                    });
                }
                if (transactional) {
                    long c0 = System.nanoTime();
                    producer.commitTransaction();
                    commitsMs.add((System.nanoTime() - c0) / 1e6);
                }
            }
            producer.flush();
            end = System.nanoTime();
        }
        double secs = (end - start) / 1e9;
        Collections.sort(commitsMs);
        double p50 = commitsMs.isEmpty() ? 0 : commitsMs.get(commitsMs.size() / 2);
        double p99 = commitsMs.isEmpty() ? 0 : commitsMs.get(Math.min(commitsMs.size() - 1, (int) Math.ceil(commitsMs.size() * 0.99) - 1));
        double max = commitsMs.isEmpty() ? 0 : commitsMs.get(commitsMs.size() - 1);
        System.out.printf("records_per_s=%.0f mb_per_s=%.1f commits=%d commit_p50_ms=%.1f commit_p99_ms=%.1f commit_max_ms=%.1f%n",
            acked.get() / secs, acked.get() * (double) recordSize / secs / 1e6, commitsMs.size(), p50, p99, max);
    }
}
