import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A producer and a consumer group at work while the cluster is rolled.
 *
 * <p>The producer (acks=all, idempotent, retries) sends numbered records at a fixed rate until
 * the stop file appears (or --max-s passes), then flushes. Each send's latency, from send()
 * to its acknowledgement, is kept with the time it was sent, and every failed send is
 * counted. A consumer in a group (committing as it goes) reads the topic meanwhile and keeps
 * reading after the producer stops, until it has every acknowledged record or --drain-s
 * passes.
 *
 * <p>Prints one line of JSON: sent, acked, failed (with the first error), latency
 * percentiles over the whole run and over the window the test marks with the roll file
 * (its first line: the roll's start and end, epoch milliseconds), and how many acknowledged
 * records the group did not read.
 *
 * <p>Usage: RollCheck --bootstrap B --topic T --group G --rate N --stop-file F
 * [--roll-file R] [--max-s S] [--drain-s S]
 */
public class RollCheck {
    public static void main(String[] argv) throws Exception {
        String bootstrap = null, topic = null, group = null, stopFile = null, rollFile = null;
        int rate = 200;
        long maxS = 300, drainS = 60;
        for (int i = 0; i + 1 < argv.length; i += 2) {
            switch (argv[i]) {
                case "--bootstrap": bootstrap = argv[i + 1]; break;
                case "--topic": topic = argv[i + 1]; break;
                case "--group": group = argv[i + 1]; break;
                case "--rate": rate = Integer.parseInt(argv[i + 1]); break;
                case "--stop-file": stopFile = argv[i + 1]; break;
                case "--roll-file": rollFile = argv[i + 1]; break;
                case "--max-s": maxS = Long.parseLong(argv[i + 1]); break;
                case "--drain-s": drainS = Long.parseLong(argv[i + 1]); break;
                default: throw new IllegalArgumentException("unknown option " + argv[i]);
            }
        }
        if (bootstrap == null || topic == null || group == null || stopFile == null) {
            throw new IllegalArgumentException("--bootstrap, --topic, --group and --stop-file are required");
        }

        Set<Long> acked = ConcurrentHashMap.newKeySet();
        Set<Long> consumed = ConcurrentHashMap.newKeySet();
        // (sent at, latency) pairs, in milliseconds.
        List<long[]> latencies = Collections.synchronizedList(new ArrayList<>());
        AtomicLong failed = new AtomicLong();
        StringBuilder firstError = new StringBuilder();

        Consumer reader = new Consumer(bootstrap, topic, group, consumed);
        Thread readerThread = new Thread(reader, "reader");
        readerThread.start();

        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        long sent = 0;
        long start = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            Path stop = Paths.get(stopFile);
            long deadline = start + maxS * 1000;
            while (!Files.exists(stop) && System.currentTimeMillis() < deadline) {
                // Paced: record n goes at start + n / rate.
                long due = start + sent * 1000 / rate;
                long now = System.currentTimeMillis();
                if (due > now) {
                    Thread.sleep(due - now);
                }
                final long n = sent++;
                final long at = System.currentTimeMillis();
                byte[] value = Long.toString(n).getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(topic, value, value), (md, e) -> {
                    if (e == null) {
                        acked.add(n);
                        latencies.add(new long[] {at, System.currentTimeMillis() - at});
                    } else {
                        failed.incrementAndGet();
                        synchronized (firstError) {
                            if (firstError.length() == 0) {
                                firstError.append(e.toString());
                            }
                        }
                    }
                });
            }
            producer.flush();
        }

        long drainDeadline = System.currentTimeMillis() + drainS * 1000;
        while (System.currentTimeMillis() < drainDeadline && !consumed.containsAll(acked)) {
            Thread.sleep(100);
        }
        reader.stop();
        readerThread.join(30_000);

        long rollStart = 0, rollEnd = Long.MAX_VALUE;
        if (rollFile != null && Files.exists(Paths.get(rollFile))) {
            String[] parts = Files.readAllLines(Paths.get(rollFile)).get(0).trim().split("\\s+");
            rollStart = Long.parseLong(parts[0]);
            rollEnd = Long.parseLong(parts[1]);
        }
        List<Long> all = new ArrayList<>(), during = new ArrayList<>();
        synchronized (latencies) {
            for (long[] l : latencies) {
                all.add(l[1]);
                if (l[0] >= rollStart && l[0] <= rollEnd) {
                    during.add(l[1]);
                }
            }
        }
        long missing = acked.stream().filter(n -> !consumed.contains(n)).count();
        String error;
        synchronized (firstError) {
            error = firstError.toString().replace("\\", "\\\\").replace("\"", "\\\"");
        }
        System.out.println("{\"sent\": " + sent + ", \"acked\": " + acked.size() + ", \"failed\": " + failed.get()
                + ", \"first_error\": \"" + error + "\""
                + ", \"p50_ms\": " + percentile(all, 0.50) + ", \"p99_ms\": " + percentile(all, 0.99)
                + ", \"max_ms\": " + percentile(all, 1.0)
                + ", \"roll_records\": " + during.size()
                + ", \"roll_p50_ms\": " + percentile(during, 0.50) + ", \"roll_p99_ms\": " + percentile(during, 0.99)
                + ", \"roll_max_ms\": " + percentile(during, 1.0)
                + ", \"consumed\": " + consumed.size() + ", \"missing\": " + missing
                + ", \"consumer_error\": \"" + reader.error().replace("\"", "'") + "\"}");
    }

    static long percentile(List<Long> values, double q) {
        if (values.isEmpty()) {
            return -1;
        }
        List<Long> sorted = new ArrayList<>(values);
        Collections.sort(sorted);
        int i = (int) Math.ceil(q * sorted.size()) - 1;
        return sorted.get(Math.max(0, Math.min(sorted.size() - 1, i)));
    }

    /** A group member that notes every record value it reads and commits as it goes. */
    static class Consumer implements Runnable {
        private final Properties props = new Properties();
        private final String topic;
        private final Set<Long> consumed;
        private volatile boolean running = true;
        private volatile String error = "";

        Consumer(String bootstrap, String topic, String group, Set<Long> consumed) {
            this.topic = topic;
            this.consumed = consumed;
            props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        }

        void stop() {
            running = false;
        }

        String error() {
            return error;
        }

        @Override
        public void run() {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
                c.subscribe(Collections.singletonList(topic));
                while (running) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                        consumed.add(Long.parseLong(new String(r.value(), StandardCharsets.UTF_8)));
                    }
                    try {
                        c.commitSync(Duration.ofSeconds(10));
                    } catch (RuntimeException e) {
                        // A commit during a coordinator move is retried at the next poll.
                        error = e.toString();
                    }
                }
            } catch (RuntimeException e) {
                error = e.toString();
            }
        }
    }
}
