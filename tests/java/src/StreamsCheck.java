import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams exactly-once application against the broker (tests/test_transactions.py):
 * word count with processing.guarantee=exactly_once_v2, whose topology has a repartition
 * topic (group by word) and a changelog (the count store).
 *
 * <pre>
 * StreamsCheck --bootstrap B --prefix P --state-dir DIR [--timeout-s S]
 * </pre>
 *
 * Writes 600 lines of words (a fixed vocabulary, known counts), runs the application until
 * the output (read with read_committed, the latest count per word) holds the exact counts,
 * closes it, writes 400 more lines, and runs it again with a new, empty state directory, so
 * that its store is rebuilt from the changelog. The final counts must be exact, and no
 * count read along the way may exceed the true one (a duplicate would). Prints
 * "StreamsCheck OK: ..." and exits 0; 1 on a failed check, 3 when the watchdog fires.
 */
public class StreamsCheck {
    static String bootstrap;
    static final String[] WORDS = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};

    static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("StreamsCheck FAILED: " + what);
            System.exit(1);
        }
    }

    /** Lines first..first+n-1; line i holds words i%8 and (i*3)%8 (twice when equal). */
    static Map<String, Long> writeLines(String topic, int first, int n, Map<String, Long> counts) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = first; i < first + n; i++) {
                String a = WORDS[i % WORDS.length];
                String b = WORDS[(i * 3) % WORDS.length];
                producer.send(new ProducerRecord<>(topic, "line-" + i, a + " " + b));
                counts.merge(a, 1L, Long::sum);
                counts.merge(b, 1L, Long::sum);
            }
        }
        return counts;
    }

    static KafkaStreams start(String app, String in, String out, Path stateDir) {
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(in)
            .flatMapValues(line -> List.of(line.split(" ")))
            .groupBy((k, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(out, Produced.with(Serdes.String(), Serdes.Long()));
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("StreamsCheck: stream thread died: " + e);
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        return streams;
    }

    /** Reads the output (read_committed) until the latest count of every word is `want`. */
    static void awaitCounts(String out, Map<String, Long> want, int timeoutS) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        Map<String, Long> latest = new HashMap<>();
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(p, new StringDeserializer(), new LongDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                tps.add(new TopicPartition(out, i));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutS);
            while (!latest.equals(want)) {
                check(System.nanoTime() < deadline, "counts did not reach " + want + " in " + timeoutS + " s; latest " + latest);
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200))) {
                    long total = want.getOrDefault(r.key(), 0L);
                    check(r.value() <= total, r.key() + " counted " + r.value() + " > " + total + ": a record processed twice");
                    latest.put(r.key(), r.value());
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String prefix = "streamscheck";
        int timeoutS = 400;
        Path stateRoot = Path.of(System.getProperty("java.io.tmpdir"));
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--bootstrap" -> bootstrap = args[i + 1];
                case "--prefix" -> prefix = args[i + 1];
                case "--timeout-s" -> timeoutS = Integer.parseInt(args[i + 1]);
                case "--state-dir" -> stateRoot = Path.of(args[i + 1]);
                default -> throw new IllegalArgumentException(args[i]);
            }
        }
        final int limit = timeoutS;
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limit * 1000L);
                System.err.println("StreamsCheck: watchdog fired after " + limit + "s");
                Runtime.getRuntime().halt(3);
            } catch (InterruptedException e) {
                // done in time
            }
        });
        watchdog.setDaemon(true);
        watchdog.start();
        String in = prefix + "-lines", out = prefix + "-counts", app = prefix + "-app";
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(in, 3, (short) -1), new NewTopic(out, 3, (short) -1)))
                .all().get(30, TimeUnit.SECONDS);
        }
        Map<String, Long> counts = writeLines(in, 0, 600, new HashMap<>());
        KafkaStreams first = start(app, in, out, Files.createTempDirectory(stateRoot, "streamscheck-a"));
        awaitCounts(out, counts, 150);
        first.close(Duration.ofSeconds(30));
        System.out.println("StreamsCheck: first run counted " + counts);
        writeLines(in, 600, 400, counts);
        KafkaStreams second = start(app, in, out, Files.createTempDirectory(stateRoot, "streamscheck-b"));
        awaitCounts(out, counts, 150);
        second.close(Duration.ofSeconds(30));
        System.out.println("StreamsCheck OK: exactly_once_v2 word count exact, also after a restart with an empty state directory");
        System.exit(0);
    }
}
