import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * End-to-end check of a broker with the official Java client (producer, consumer, Admin).
 *
 * <p>For every compression codec (none, gzip, snappy, lz4, zstd) it:
 * <ol>
 *   <li>creates a 3-partition, RF 1 topic with the Admin client and checks describeTopics;</li>
 *   <li>produces N records with an idempotent, acks=all producer: distinct keys, values of
 *       varied sizes (including empty and null values, a ~700 KB incompressible value),
 *       several headers (duplicate keys, a null value, an empty value, non-ASCII) and explicit
 *       CreateTime timestamps (mostly increasing, with some spikes and some older ones);</li>
 *   <li>checks the offsets the producer got back are contiguous from 0 per partition and
 *       increase in send order;</li>
 *   <li>consumes everything with assign() + seekToBeginning() (no group) and checks every key,
 *       value, header, timestamp, timestamp type, per-partition order and that each offset is
 *       exactly the one the producer was told;</li>
 *   <li>checks Admin listOffsets for earliest, latest, several timestamps and max timestamp
 *       against what was produced;</li>
 *   <li>deletes the topic and waits for it to disappear from listTopics.</li>
 * </ol>
 *
 * <p>Exits 0 after printing a line starting with "ClientCheck OK"; exits 1 after printing
 * "ClientCheck FAILED: ..." with the first mismatch. Every blocking call is bounded, and a
 * watchdog ends the process with exit code 3 if the whole run exceeds --timeout-s.
 *
 * <p>Usage: ClientCheck --bootstrap host:port [--topic-prefix P] [--records N]
 *           [--codecs none,gzip,...] [--timeout-s S]
 */
public final class ClientCheck {

    private static final List<String> ALL_CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");
    private static final int PARTITIONS = 3;
    /** Bound for each individual Admin / producer future. */
    private static final long OP_TIMEOUT_MS = 30_000;

    /** A mismatch between what the broker returned and what the check expected. */
    static final class CheckFailed extends RuntimeException {
        CheckFailed(String msg) {
            super(msg);
        }
    }

    /** One record as produced, plus where the producer was told it landed. */
    static final class Sent {
        final int index;
        final byte[] key;
        final byte[] value;
        final Header[] headers;
        final long timestamp;
        int partition = -1;
        long offset = -1;

        Sent(int index, byte[] key, byte[] value, Header[] headers, long timestamp) {
            this.index = index;
            this.key = key;
            this.value = value;
            this.headers = headers;
            this.timestamp = timestamp;
        }

        String describe() {
            return "record #" + index + " (key " + new String(key, StandardCharsets.UTF_8)
                    + ", partition " + partition + ", offset " + offset + ")";
        }
    }

    private final String bootstrap;
    private final String topicPrefix;
    private final int records;

    private ClientCheck(String bootstrap, String topicPrefix, int records) {
        this.bootstrap = bootstrap;
        this.topicPrefix = topicPrefix;
        this.records = records;
    }

    public static void main(String[] args) {
        String bootstrap = null;
        String prefix = "clientcheck-" + ProcessHandle.current().pid();
        int records = 3000;
        long timeoutS = 600;
        List<String> codecs = ALL_CODECS;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (a) {
                case "--bootstrap": bootstrap = v; i++; break;
                case "--topic-prefix": prefix = v; i++; break;
                case "--records": records = Integer.parseInt(v); i++; break;
                case "--timeout-s": timeoutS = Long.parseLong(v); i++; break;
                case "--codecs": codecs = Arrays.asList(v.split(",")); i++; break;
                default:
                    System.err.println("unknown argument: " + a);
                    System.exit(2);
            }
        }
        if (bootstrap == null || records < 1) {
            System.err.println("usage: ClientCheck --bootstrap host:port [--topic-prefix P] [--records N>=1]"
                    + " [--codecs none,gzip,snappy,lz4,zstd] [--timeout-s S]");
            System.exit(2);
        }
        startWatchdog(timeoutS);

        ClientCheck check = new ClientCheck(bootstrap, prefix, records);
        long t0 = System.nanoTime();
        try {
            check.checkCluster();
            for (String codec : codecs) {
                check.runCodec(codec);
            }
        } catch (CheckFailed e) {
            System.out.println("ClientCheck FAILED: " + e.getMessage());
            System.out.flush();
            System.exit(1);
        } catch (Throwable e) {
            System.out.println("ClientCheck FAILED with exception: " + e);
            e.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
        System.out.printf("ClientCheck OK: %d codecs x %d records produced, consumed and verified on %s in %.1fs%n",
                codecs.size(), records, bootstrap, (System.nanoTime() - t0) / 1e9);
        System.out.flush();
        System.exit(0);  // do not wait for lingering client threads
    }

    /** Hard bound on the whole run, in case some client call ignores its own timeout. */
    private static void startWatchdog(long timeoutS) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(timeoutS));
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("ClientCheck FAILED: watchdog: run exceeded " + timeoutS + "s");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        t.setDaemon(true);
        t.start();
    }

    private static void check(boolean ok, String msg) {
        if (!ok) {
            throw new CheckFailed(msg);
        }
    }

    private static void log(String msg) {
        System.out.println("[ClientCheck] " + msg);
        System.out.flush();
    }

    private Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "clientcheck-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    /** describeCluster returns at least one node, a cluster id, and the node we bootstrapped from. */
    private void checkCluster() throws Exception {
        try (Admin admin = admin()) {
            DescribeClusterResult dc = admin.describeCluster();
            Collection<Node> nodes = dc.nodes().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            String clusterId = dc.clusterId().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            Node controller = dc.controller().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            check(!nodes.isEmpty(), "describeCluster returned no nodes");
            check(clusterId != null && !clusterId.isEmpty(), "describeCluster returned no cluster id");
            for (Node n : nodes) {
                check(n.id() >= 0 && n.host() != null && !n.host().isEmpty() && n.port() > 0,
                        "describeCluster returned a malformed node: " + n);
            }
            log("cluster " + clusterId + ": nodes " + nodes + ", controller " + controller);
        }
    }

    // ---------------------------------------------------------------- one codec

    private void runCodec(String codec) throws Exception {
        String topic = topicPrefix + "-" + codec;
        long t0 = System.nanoTime();
        try (Admin admin = admin()) {
            try {
                createAndDescribe(admin, topic);
                List<Sent> sent = produce(topic, codec);
                Map<Integer, List<Sent>> byPartition = checkProducedOffsets(topic, sent);
                consumeAndVerify(topic, byPartition);
                checkListOffsets(admin, topic, byPartition);
            } catch (Throwable t) {
                // Do not leave the topic behind on a shared (external) broker; ignore any error.
                try {
                    admin.deleteTopics(List.of(topic)).all().get(10, TimeUnit.SECONDS);
                } catch (Exception ignored) {
                    // the original failure is what matters
                }
                throw t;
            }
            deleteTopic(admin, topic);
        }
        log(String.format("codec %-6s OK: %d records over %d partitions (%.1fs)", codec, records, PARTITIONS,
                (System.nanoTime() - t0) / 1e9));
    }

    /** CreateTopics(3 partitions, RF 1), then DescribeTopics shows exactly that, with leaders. */
    private void createAndDescribe(Admin admin, String topic) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1)))
                .all().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);

        // Metadata may lag the controller for a moment: retry until every partition has a leader.
        long deadline = System.currentTimeMillis() + OP_TIMEOUT_MS;
        String lastProblem;
        while (true) {
            TopicDescription d;
            try {
                d = admin.describeTopics(List.of(topic)).allTopicNames()
                        .get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS).get(topic);
                lastProblem = describeProblem(topic, d);
            } catch (java.util.concurrent.ExecutionException e) {
                lastProblem = "describeTopics failed: " + e.getCause();
            }
            if (lastProblem == null) {
                break;
            }
            check(System.currentTimeMillis() < deadline, "topic " + topic + " not ready after create: " + lastProblem);
            Thread.sleep(200);
        }

        // Metadata naming a leader does not mean the leader already hosts the partition (Kafka's
        // KRaft brokers answer NOT_LEADER_OR_FOLLOWER for a moment, which can wedge the idempotent
        // producer's sequence tracking). ListOffsets is served by the leader only and the Admin
        // client retries it, so an answer of 0 for every partition means the topic is writable.
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (int p = 0; p < PARTITIONS; p++) latest.put(new TopicPartition(topic, p), OffsetSpec.latest());
        for (Map.Entry<TopicPartition, ListOffsetsResultInfo> e : listOffsets(admin, latest).entrySet()) {
            check(e.getValue().offset() == 0, "new topic partition " + e.getKey() + " has log end offset "
                    + e.getValue().offset() + ", expected 0");
        }
    }

    /** Returns null if the description is what a fresh 3-partition RF-1 topic must look like. */
    private static String describeProblem(String topic, TopicDescription d) {
        if (d == null) return "no description";
        if (!d.name().equals(topic)) return "name " + d.name();
        if (d.isInternal()) return "reported as internal";
        if (d.topicId() == null || d.topicId().getMostSignificantBits() == 0 && d.topicId().getLeastSignificantBits() == 0)
            return "zero/absent topic id";
        if (d.partitions().size() != PARTITIONS) return "partition count " + d.partitions().size();
        for (int i = 0; i < PARTITIONS; i++) {
            TopicPartitionInfo p = d.partitions().get(i);
            if (p.partition() != i) return "partition list not sorted 0..n-1: " + d.partitions();
            if (p.leader() == null || p.leader().isEmpty()) return "partition " + i + " has no leader";
            if (p.replicas().size() != 1) return "partition " + i + " replicas " + p.replicas();
            if (p.isr().size() != 1) return "partition " + i + " isr " + p.isr();
            if (p.replicas().get(0).id() != p.leader().id()) return "partition " + i + " leader not in replicas";
        }
        return null;
    }

    // ---------------------------------------------------------------- produce

    /** Builds record #i deterministically; see the class comment for the mix. */
    private Sent makeRecord(int i, long base) {
        byte[] key = String.format("k-%07d", i).getBytes(StandardCharsets.UTF_8);

        byte[] value;
        if (i % 11 == 0) {
            value = null;                                   // null value (tombstone)
        } else if (i % 7 == 0) {
            value = new byte[0];                            // empty, not null
        } else {
            int size;
            if (i == records / 3) size = 700_000;            // one large record, close to 1 MiB limit
            else if (i % 97 == 1) size = 40_000 + i;         // some medium records
            else size = 1 + (i * 131) % 1500;                // mostly small, varied
            value = new byte[size];
            Random r = new Random(i);
            byte[] text = ("runnel value " + i + " ").getBytes(StandardCharsets.UTF_8);
            // The big one is all random (incompressible); others are half text (compressible), half random.
            int textPart = i == records / 3 ? 0 : size / 2;
            for (int j = 0; j < textPart; j++) value[j] = text[j % text.length];
            for (int j = textPart; j < size; j++) value[j] = (byte) r.nextInt(256);
        }

        Header[] headers;
        if (i % 5 == 0) {
            headers = new Header[0];                        // no headers at all
        } else {
            List<Header> hs = new ArrayList<>();
            hs.add(new RecordHeader("idx", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
            hs.add(new RecordHeader("dup", "first".getBytes(StandardCharsets.UTF_8)));
            hs.add(new RecordHeader("dup", ("second-" + i).getBytes(StandardCharsets.UTF_8)));
            hs.add(new RecordHeader("null-value", (byte[]) null));
            hs.add(new RecordHeader("empty-value", new byte[0]));
            if (i % 3 == 0) hs.add(new RecordHeader("ключ-✓", "väl ✓".getBytes(StandardCharsets.UTF_8)));
            headers = hs.toArray(new Header[0]);
        }

        // Mostly increasing timestamps, some spikes above everything, some older ones.
        long ts;
        if (i % 997 == 500) ts = base + 2L * records + i;
        else if (i % 613 == 300) ts = base - 100_000 - i;
        else ts = base + i;
        return new Sent(i, key, value, headers, ts);
    }

    private List<Sent> produce(String topic, String codec) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "clientcheck-producer-" + codec);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");

        // Timestamps one hour in the past: inside any sane message.timestamp.*.max.ms window.
        long base = System.currentTimeMillis() - 3_600_000L;
        List<Sent> sent = new ArrayList<>(records);
        List<Future<RecordMetadata>> futures = new ArrayList<>(records);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < records; i++) {
                Sent s = makeRecord(i, base);
                sent.add(s);
                futures.add(producer.send(new ProducerRecord<>(topic, null, s.timestamp, s.key, s.value,
                        Arrays.asList(s.headers))));
            }
            producer.flush();
            for (int i = 0; i < records; i++) {
                RecordMetadata md;
                try {
                    md = futures.get(i).get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
                } catch (java.util.concurrent.ExecutionException e) {
                    throw new CheckFailed("produce of record #" + i + " to " + topic + " failed: " + e.getCause());
                } catch (TimeoutException e) {
                    throw new CheckFailed("produce of record #" + i + " to " + topic + " not acknowledged in time");
                }
                Sent s = sent.get(i);
                s.partition = md.partition();
                s.offset = md.offset();
                check(md.topic().equals(topic), "producer metadata topic " + md.topic() + " for " + s.describe());
                check(md.hasOffset() && md.offset() >= 0, "producer got no offset for " + s.describe());
                check(md.timestamp() == s.timestamp, "producer metadata timestamp " + md.timestamp()
                        + " != sent " + s.timestamp + " for " + s.describe() + " (topic should use CreateTime)");
            }
            producer.close(Duration.ofSeconds(30));
        }
        return sent;
    }

    /**
     * On a fresh topic written by one idempotent producer, each partition's offsets are exactly
     * 0, 1, 2, ... in send order. Returns the records grouped by partition in offset order.
     */
    private Map<Integer, List<Sent>> checkProducedOffsets(String topic, List<Sent> sent) {
        Map<Integer, List<Sent>> byPartition = new TreeMap<>();
        for (Sent s : sent) {
            check(s.partition >= 0 && s.partition < PARTITIONS, "bad partition for " + s.describe());
            List<Sent> list = byPartition.computeIfAbsent(s.partition, k -> new ArrayList<>());
            check(s.offset == list.size(), "producer offsets not contiguous in send order on " + topic + "-"
                    + s.partition + ": expected offset " + list.size() + " for " + s.describe());
            list.add(s);
        }
        for (int p = 0; p < PARTITIONS; p++) byPartition.putIfAbsent(p, new ArrayList<>());
        return byPartition;
    }

    // ---------------------------------------------------------------- consume

    private void consumeAndVerify(String topic, Map<Integer, List<Sent>> byPartition) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "clientcheck-consumer");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        // Small fetches so a partition needs several round trips (exercises fetch offsets).
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "65536");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "200");

        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < PARTITIONS; i++) tps.add(new TopicPartition(topic, i));
        Map<Integer, Integer> next = new HashMap<>();  // partition -> index into byPartition list
        for (int i = 0; i < PARTITIONS; i++) next.put(i, 0);

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 90_000;
            while (!allRead(next, byPartition)) {
                check(System.currentTimeMillis() < deadline, "consume timed out on " + topic + ": read "
                        + next + " of " + sizes(byPartition) + " records per partition");
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    List<Sent> expected = byPartition.get(r.partition());
                    int n = next.get(r.partition());
                    check(n < expected.size(), "unexpected extra record at " + topic + "-" + r.partition()
                            + " offset " + r.offset() + " (only " + expected.size() + " were produced)");
                    verifyRecord(topic, expected.get(n), r);
                    next.put(r.partition(), n + 1);
                }
            }
            // Nothing beyond what was produced: the position is the log end and a further poll is empty.
            for (TopicPartition tp : tps) {
                long pos = consumer.position(tp, Duration.ofSeconds(30));
                check(pos == byPartition.get(tp.partition()).size(), "consumer position on " + tp + " is " + pos
                        + " after reading " + byPartition.get(tp.partition()).size() + " records");
            }
            ConsumerRecords<byte[], byte[]> extra = consumer.poll(Duration.ofMillis(500));
            check(extra.isEmpty(), "poll after the end returned " + extra.count() + " records on " + topic);
        }
    }

    private static boolean allRead(Map<Integer, Integer> next, Map<Integer, List<Sent>> byPartition) {
        for (Map.Entry<Integer, List<Sent>> e : byPartition.entrySet()) {
            if (next.get(e.getKey()) < e.getValue().size()) return false;
        }
        return true;
    }

    private static Map<Integer, Integer> sizes(Map<Integer, List<Sent>> byPartition) {
        Map<Integer, Integer> m = new TreeMap<>();
        byPartition.forEach((k, v) -> m.put(k, v.size()));
        return m;
    }

    /** The consumed record is, field by field, the one the producer wrote at that offset. */
    private static void verifyRecord(String topic, Sent s, ConsumerRecord<byte[], byte[]> r) {
        String where = topic + "-" + r.partition() + "@" + r.offset() + " (expected " + s.describe() + ")";
        check(r.offset() == s.offset, "out of order or wrong offset: got offset " + r.offset() + " at " + where);
        check(Arrays.equals(r.key(), s.key), "key mismatch at " + where + ": got " + show(r.key()));
        if (s.value == null) {
            check(r.value() == null, "value should be null at " + where + ", got " + show(r.value()));
            check(r.serializedValueSize() == -1, "serializedValueSize of a null value should be -1 at " + where);
        } else {
            check(r.value() != null, "value is null at " + where + ", expected " + s.value.length + " bytes");
            check(Arrays.equals(r.value(), s.value), "value mismatch at " + where + ": got " + r.value().length
                    + " bytes, expected " + s.value.length + firstDiff(r.value(), s.value));
        }
        check(r.timestamp() == s.timestamp, "timestamp " + r.timestamp() + " != " + s.timestamp + " at " + where);
        check(r.timestampType() == TimestampType.CREATE_TIME, "timestamp type " + r.timestampType() + " at " + where);

        Header[] got = r.headers().toArray();
        check(got.length == s.headers.length, "header count " + got.length + " != " + s.headers.length + " at "
                + where + ": got " + Arrays.toString(got));
        for (int h = 0; h < got.length; h++) {
            Header e = s.headers[h];
            check(got[h].key().equals(e.key()), "header #" + h + " key '" + got[h].key() + "' != '" + e.key()
                    + "' at " + where);
            if (e.value() == null) {
                check(got[h].value() == null, "header '" + e.key() + "' should have a null value at " + where
                        + ", got " + show(got[h].value()));
            } else {
                check(Arrays.equals(got[h].value(), e.value()), "header #" + h + " '" + e.key() + "' value "
                        + show(got[h].value()) + " != " + show(e.value()) + " at " + where);
            }
        }
    }

    private static String show(byte[] b) {
        if (b == null) return "null";
        if (b.length > 40) return b.length + " bytes";
        return "'" + new String(b, StandardCharsets.UTF_8) + "'";
    }

    private static String firstDiff(byte[] a, byte[] b) {
        int n = Math.min(a.length, b.length);
        for (int i = 0; i < n; i++) {
            if (a[i] != b[i]) return " (first difference at byte " + i + ")";
        }
        return "";
    }

    // ---------------------------------------------------------------- list offsets

    /**
     * ListOffsets through the Admin client agrees with what was produced:
     * earliest = 0, latest = record count, forTimestamp(t) = smallest offset whose timestamp >= t
     * (with that record's timestamp) or -1 when there is none, maxTimestamp = offset and timestamp
     * of the first record carrying the largest timestamp.
     */
    private void checkListOffsets(Admin admin, String topic, Map<Integer, List<Sent>> byPartition)
            throws Exception {
        Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        Map<TopicPartition, OffsetSpec> maxTs = new HashMap<>();
        for (int p = 0; p < PARTITIONS; p++) {
            TopicPartition tp = new TopicPartition(topic, p);
            earliest.put(tp, OffsetSpec.earliest());
            latest.put(tp, OffsetSpec.latest());
            maxTs.put(tp, OffsetSpec.maxTimestamp());
        }
        Map<TopicPartition, ListOffsetsResultInfo> e = listOffsets(admin, earliest);
        Map<TopicPartition, ListOffsetsResultInfo> l = listOffsets(admin, latest);
        Map<TopicPartition, ListOffsetsResultInfo> m = listOffsets(admin, maxTs);
        for (int p = 0; p < PARTITIONS; p++) {
            TopicPartition tp = new TopicPartition(topic, p);
            List<Sent> recs = byPartition.get(p);
            check(e.get(tp).offset() == 0, "listOffsets(earliest) on " + tp + " = " + e.get(tp).offset() + ", expected 0");
            check(l.get(tp).offset() == recs.size(), "listOffsets(latest) on " + tp + " = " + l.get(tp).offset()
                    + ", expected " + recs.size());
            if (!recs.isEmpty()) {
                Sent max = recs.get(0);
                for (Sent s : recs) if (s.timestamp > max.timestamp) max = s;
                ListOffsetsResultInfo got = m.get(tp);
                check(got.offset() == max.offset && got.timestamp() == max.timestamp, "listOffsets(maxTimestamp) on "
                        + tp + " = offset " + got.offset() + " ts " + got.timestamp() + ", expected offset "
                        + max.offset + " ts " + max.timestamp);
            }
        }

        // Timestamp targets: before everything, exact timestamps of a few records (including spikes
        // and older ones), a value between records, and one after everything.
        List<Long> targets = new ArrayList<>();
        long minTs = Long.MAX_VALUE;
        long maxTsAll = Long.MIN_VALUE;
        for (List<Sent> recs : byPartition.values()) {
            for (Sent s : recs) {
                minTs = Math.min(minTs, s.timestamp);
                maxTsAll = Math.max(maxTsAll, s.timestamp);
                if (s.index % 997 == 500 || s.index % 613 == 300 || s.index == records / 2) targets.add(s.timestamp);
            }
        }
        targets.add(minTs - 1_000);
        targets.add(minTs + records / 2 + 100_000L);   // between the "older" and the regular timestamps
        targets.add(maxTsAll + 1);                      // after everything: no offset (-1)
        for (long target : targets) {
            Map<TopicPartition, OffsetSpec> q = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) q.put(new TopicPartition(topic, p), OffsetSpec.forTimestamp(target));
            Map<TopicPartition, ListOffsetsResultInfo> got = listOffsets(admin, q);
            for (int p = 0; p < PARTITIONS; p++) {
                TopicPartition tp = new TopicPartition(topic, p);
                Sent want = null;
                for (Sent s : byPartition.get(p)) {
                    if (s.timestamp >= target) {
                        want = s;
                        break;
                    }
                }
                ListOffsetsResultInfo g = got.get(tp);
                long wantOffset = want == null ? -1 : want.offset;
                long wantTs = want == null ? -1 : want.timestamp;
                check(g.offset() == wantOffset && g.timestamp() == wantTs, "listOffsets(forTimestamp " + target
                        + ") on " + tp + " = offset " + g.offset() + " ts " + g.timestamp() + ", expected offset "
                        + wantOffset + " ts " + wantTs);
            }
        }
    }

    private static Map<TopicPartition, ListOffsetsResultInfo> listOffsets(Admin admin,
            Map<TopicPartition, OffsetSpec> q) throws Exception {
        return admin.listOffsets(q).all().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
    }

    // ---------------------------------------------------------------- delete

    /** DeleteTopics succeeds, and the topic disappears from listTopics and describeTopics. */
    private void deleteTopic(Admin admin, String topic) throws Exception {
        Set<String> before = admin.listTopics().names().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        check(before.contains(topic), "listTopics does not show " + topic + " before deletion: " + before);
        admin.deleteTopics(List.of(topic)).all().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        long deadline = System.currentTimeMillis() + OP_TIMEOUT_MS;
        while (admin.listTopics().names().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS).contains(topic)) {
            check(System.currentTimeMillis() < deadline, "topic " + topic + " still listed 30s after deleteTopics");
            Thread.sleep(200);
        }
        try {
            admin.describeTopics(List.of(topic)).allTopicNames().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            throw new CheckFailed("describeTopics still describes " + topic + " after deletion");
        } catch (java.util.concurrent.ExecutionException ex) {
            check(ex.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException,
                    "describeTopics of a deleted topic failed with " + ex.getCause()
                            + ", expected UnknownTopicOrPartitionException");
        }
    }
}
