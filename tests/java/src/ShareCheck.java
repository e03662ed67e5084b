import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Share groups (KIP-932) with the official Java client's KafkaShareConsumer, for
 * tests/test_share_groups.py. Every consumer uses share.acknowledgement.mode=explicit: each
 * record a poll returns is acknowledged (ACCEPT / RELEASE / REJECT) before the next poll, and
 * commitSync() sends the acknowledgements (ShareAcknowledge) and waits for the answer.
 *
 * <pre>
 * ShareCheck BOOTSTRAP MODE ARGS... [--timeout-s S]
 *   earliest     GROUP                 group config share.auto.offset.reset=earliest
 *                                      (IncrementalAlterConfigs on a GROUP resource), read back
 *                                      with DescribeConfigs; then four invalid SETs that must
 *                                      each be refused (reported by exception class)
 *   produce      TOPIC N [START]       records k&lt;i&gt;/v&lt;i&gt; (START &lt;= i &lt; START+N) to
 *                                      partition i mod (partition count)
 *   consume      TOPIC GROUP N C       produce k0..k&lt;N-1&gt;, then C share consumers in one group
 *                                      accept everything until every key arrived
 *   drain        TOPIC GROUP N C FILE  like consume without producing: every key k0..k&lt;N-1&gt;
 *                                      except those listed in FILE (one per line, accepted
 *                                      earlier) must arrive, and none of FILE's keys may
 *   release      TOPIC GROUP N         produce, then RELEASE i%3==0 and REJECT i%5==1 on first
 *                                      delivery, ACCEPT the rest and every redelivery
 *   expire       TOPIC GROUP N LOCK_MS [group]
 *                                      produce; member A takes records and acknowledges nothing
 *                                      (stays in the group, does not poll again); member B must
 *                                      get A's records once their acquisition locks expire.
 *                                      With "group", share.record.lock.duration.ms=LOCK_MS is set
 *                                      as a group config first (else LOCK_MS is the broker's).
 *   limit        TOPIC GROUP N L [group]
 *                                      produce; RELEASE every delivery: each record comes exactly
 *                                      L times (delivery counts 1..L), then never again. With
 *                                      "group", share.delivery.count.limit=L is set as a group
 *                                      config first (else L is the broker's limit).
 *   latest       TOPIC GROUP N         a group without configs starts at the log end: N records
 *                                      produced before the consumer joined are never delivered;
 *                                      once a probe record (key p&lt;partition&gt;-&lt;round&gt;,
 *                                      sent every 500 ms) came back from every partition, N
 *                                      more are produced and must all be delivered once
 *   consume-some TOPIC GROUP K         accept (and commitSync) the first K records, then take
 *                                      more without acknowledging them and halt the JVM without
 *                                      closing the consumer (a crash holding acquired records)
 *   member       TOPIC GROUP CLIENT_ID MAX_SECONDS STOP_FILE
 *                                      one consumer accepting everything until STOP_FILE exists
 *                                      (or MAX_SECONDS pass), then close()
 *   describe     GROUP                 Admin describeShareGroups + listShareGroupOffsets
 * </pre>
 *
 * <p>Every mode prints exactly one JSON object on one stdout line, with "ok": true and exit 0,
 * or "ok": false, "error": reason and what was seen so far, and exit 1 (usage errors exit 2,
 * the watchdog exits 3). Progress goes to stderr. Every loop is bounded by a deadline
 * (--timeout-s, 90 s by default) and a watchdog halts the JVM 60 s after it.
 * Consuming modes set share.auto.offset.reset=earliest on their group first (except latest),
 * and wait until DescribeConfigs shows every group config they set.
 */
public final class ShareCheck {

    private static final long OP_TIMEOUT_MS = 30_000;
    private static final Duration POLL = Duration.ofMillis(200);
    private static final Duration COMMIT_TIMEOUT = Duration.ofSeconds(15);
    /** After the last expected record: keep polling this long to catch duplicates / late ones. */
    private static final long QUIET_MS = 3000;

    /** The JSON line printed at the end (insertion ordered). */
    private static final Map<String, Object> result = new LinkedHashMap<>();
    private static long timeoutS = 90;

    static final class CheckFailed extends RuntimeException {
        CheckFailed(String msg) {
            super(msg);
        }
    }

    public static void main(String[] argv) {
        List<String> args = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            if (argv[i].equals("--timeout-s") && i + 1 < argv.length) {
                timeoutS = Long.parseLong(argv[++i]);
            } else {
                args.add(argv[i]);
            }
        }
        if (args.size() < 2) {
            usage("missing bootstrap or mode");
        }
        String bootstrap = args.get(0);
        String mode = args.get(1);
        List<String> a = args.subList(2, args.size());
        result.put("mode", mode);
        startWatchdog(timeoutS + 60, mode);
        int rc = 0;
        try {
            switch (mode) {
                case "earliest":
                    need(a, 1, "GROUP");
                    earliest(bootstrap, a.get(0));
                    break;
                case "produce":
                    need(a, 2, "TOPIC N [START]");
                    int start = a.size() > 2 ? Integer.parseInt(a.get(2)) : 0;
                    result.put("partitions", produce(bootstrap, a.get(0), start, Integer.parseInt(a.get(1))));
                    break;
                case "consume":
                    need(a, 4, "TOPIC GROUP N CONSUMERS");
                    consume(bootstrap, a.get(0), a.get(1), Integer.parseInt(a.get(2)), Integer.parseInt(a.get(3)),
                            true, Set.of());
                    break;
                case "drain":
                    need(a, 5, "TOPIC GROUP N CONSUMERS EXCLUDED_KEYS_FILE");
                    Set<String> excluded = new TreeSet<>();
                    for (String line : Files.readAllLines(Paths.get(a.get(4)), StandardCharsets.UTF_8)) {
                        if (!line.isBlank()) {
                            excluded.add(line.trim());
                        }
                    }
                    consume(bootstrap, a.get(0), a.get(1), Integer.parseInt(a.get(2)), Integer.parseInt(a.get(3)),
                            false, excluded);
                    break;
                case "release":
                    need(a, 3, "TOPIC GROUP N");
                    release(bootstrap, a.get(0), a.get(1), Integer.parseInt(a.get(2)));
                    break;
                case "expire":
                    need(a, 4, "TOPIC GROUP N LOCK_MS [group]");
                    expire(bootstrap, a.get(0), a.get(1), Integer.parseInt(a.get(2)), Integer.parseInt(a.get(3)),
                            a.size() > 4 && a.get(4).equals("group"));
                    break;
                case "limit":
                    need(a, 4, "TOPIC GROUP N L [group]");
                    limit(bootstrap, a.get(0), a.get(1), Integer.parseInt(a.get(2)), Integer.parseInt(a.get(3)),
                            a.size() > 4 && a.get(4).equals("group"));
                    break;
                case "committed":
                    need(a, 2, "TOPIC GROUP");
                    committed(bootstrap, a.get(0), a.get(1));
                    break;
                case "latest":
                    need(a, 3, "TOPIC GROUP N");
                    latest(bootstrap, a.get(0), a.get(1), Integer.parseInt(a.get(2)));
                    break;
                case "consume-some":
                    need(a, 3, "TOPIC GROUP K");
                    consumeSome(bootstrap, a.get(0), a.get(1), Integer.parseInt(a.get(2)));
                    break;
                case "member":
                    need(a, 5, "TOPIC GROUP CLIENT_ID MAX_SECONDS STOP_FILE");
                    member(bootstrap, a.get(0), a.get(1), a.get(2), Long.parseLong(a.get(3)), Paths.get(a.get(4)));
                    break;
                case "describe":
                    need(a, 1, "GROUP");
                    try (Admin admin = admin(bootstrap)) {
                        result.put("group", describeGroup(admin, a.get(0)));
                    }
                    break;
                default:
                    usage("unknown mode " + mode);
            }
            result.put("ok", true);
        } catch (CheckFailed e) {
            result.put("ok", false);
            result.put("error", e.getMessage());
            rc = 1;
        } catch (Throwable e) {
            result.put("ok", false);
            result.put("error", "exception: " + e);
            e.printStackTrace();
            rc = 1;
        }
        System.out.println(toJson(result));
        System.out.flush();
        if (rc != 0) {
            err("ShareCheck " + mode + " FAILED: " + result.get("error"));
        }
        System.exit(rc);  // do not wait for lingering client threads
    }

    // ------------------------------------------------------------------------------ helpers

    private static void usage(String why) {
        System.err.println("ShareCheck: " + why + "\nusage: ShareCheck BOOTSTRAP MODE ARGS... [--timeout-s S]"
                + " (see the class comment in tests/java/src/ShareCheck.java)");
        System.exit(2);
    }

    private static void need(List<String> a, int n, String what) {
        if (a.size() < n) {
            usage("expected " + what);
        }
    }

    private static void check(boolean ok, String msg) {
        if (!ok) {
            throw new CheckFailed(msg);
        }
    }

    private static void err(String msg) {
        System.err.println(msg);
        System.err.flush();
    }

    private static void startWatchdog(long seconds, String what) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(seconds));
            } catch (InterruptedException e) {
                return;
            }
            result.put("ok", false);
            result.put("error", "watchdog: " + what + " exceeded " + seconds + "s");
            System.out.println(toJson(result));
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        t.setDaemon(true);
        t.start();
    }

    private static long deadline() {
        return System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutS);
    }

    private static boolean before(long deadline) {
        return System.nanoTime() < deadline;
    }

    private static long msSince(long t0) {
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
    }

    private static int index(String key) {
        check(key != null && key.startsWith("k"), "unexpected key " + key);
        return Integer.parseInt(key.substring(1));
    }

    private static int deliveryCount(ConsumerRecord<String, String> r) {
        Optional<Short> dc = r.deliveryCount();
        check(dc.isPresent(), "record " + r.key() + " has no delivery count");
        return dc.get();
    }

    private static List<String> keys(int n) {
        List<String> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            out.add("k" + i);
        }
        return out;
    }

    /** At most 20 of the given keys, sorted by index, for messages. */
    private static List<String> sample(Collection<String> keys) {
        List<String> out = new ArrayList<>(keys);
        out.sort((x, y) -> Integer.compare(index(x), index(y)));
        return out.size() > 20 ? out.subList(0, 20) : out;
    }

    private static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "sharecheck-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    private static KafkaShareConsumer<String, String> shareConsumer(String bootstrap, String group, String clientId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "100");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaShareConsumer<>(p);
    }

    /** commitSync(); the number of partitions whose acknowledgements failed (logged). */
    private static int commit(KafkaShareConsumer<String, String> c, String who) {
        Map<TopicIdPartition, Optional<KafkaException>> res = c.commitSync(COMMIT_TIMEOUT);
        int failed = 0;
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : res.entrySet()) {
            if (e.getValue().isPresent()) {
                failed++;
                err(who + ": acknowledgement of " + e.getKey() + " failed: " + e.getValue().get());
            }
        }
        return failed;
    }

    private static void closeQuietly(KafkaShareConsumer<String, String> c, String who) {
        try {
            c.close(Duration.ofSeconds(15));
        } catch (Exception e) {
            err(who + ": close failed: " + e);
        }
    }

    private static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "sharecheck-producer");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    /**
     * A transactional producer commits k0..k9, aborts aborted0..aborted9, commits k10..k19 (all to
     * partition 0); a group with share.isolation.level=read_committed then gets k0..k19 only.
     */
    private static void committed(String bootstrap, String topic, String group) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "sharecheck-txn-" + group);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Set<String> aborted = new TreeSet<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (int round = 0; round < 3; round++) {
                producer.beginTransaction();
                for (int i = 0; i < 10; i++) {
                    String key = round == 1 ? "aborted" + i : "k" + (round == 0 ? i : 10 + i);
                    producer.send(new ProducerRecord<>(topic, 0, key, "v"));
                    if (round == 1) {
                        aborted.add(key);
                    }
                }
                producer.flush();
                if (round == 1) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
            }
        }
        earliestFor(bootstrap, group, Map.of("share.isolation.level", "read_committed"));
        consume(bootstrap, topic, group, 20, 1, false, aborted);
    }

    /** Produces k&lt;i&gt;/v&lt;i&gt; for START &lt;= i &lt; START+N to partition i mod P; returns P. */
    private static int produce(String bootstrap, String topic, int start, int n) throws Exception {
        try (KafkaProducer<String, String> producer = producer(bootstrap)) {
            List<PartitionInfo> infos = producer.partitionsFor(topic);
            check(infos != null && !infos.isEmpty(), "no partitions for topic " + topic);
            int parts = infos.size();
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = start; i < start + n; i++) {
                futures.add(producer.send(new ProducerRecord<>(topic, i % parts, "k" + i, "v" + i)));
            }
            producer.flush();
            for (int j = 0; j < futures.size(); j++) {
                try {
                    futures.get(j).get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
                } catch (Exception e) {
                    throw new CheckFailed("send of k" + (start + j) + " failed: " + e);
                }
            }
            err("ShareCheck: produced k" + start + "..k" + (start + n - 1) + " to " + topic + " (" + parts
                    + " partitions)");
            return parts;
        }
    }

    /** IncrementalAlterConfigs SET of group configs, then a bounded wait until DescribeConfigs
     *  shows them; returns the described configs as {name: {value, source}}. */
    private static Map<String, Object> setGroupConfigs(Admin admin, String group, Map<String, String> configs)
            throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
        List<AlterConfigOp> ops = new ArrayList<>();
        for (Map.Entry<String, String> e : configs.entrySet()) {
            ops.add(new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue()), AlterConfigOp.OpType.SET));
        }
        admin.incrementalAlterConfigs(Map.of(res, ops)).all().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        Map<String, Object> described;
        while (true) {
            described = describeGroupConfigs(admin, group);
            boolean all = true;
            for (Map.Entry<String, String> e : configs.entrySet()) {
                @SuppressWarnings("unchecked")
                Map<String, Object> d = (Map<String, Object>) described.get(e.getKey());
                all &= d != null && e.getValue().equals(d.get("value"));
            }
            if (all) {
                return described;
            }
            check(before(deadline), "group configs " + configs + " not described back within 20s: " + described);
            Thread.sleep(200);
        }
    }

    private static Map<String, Object> describeGroupConfigs(Admin admin, String group) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
        Config cfg = admin.describeConfigs(List.of(res)).all().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS).get(res);
        Map<String, Object> out = new TreeMap<>();
        for (ConfigEntry e : cfg.entries()) {
            Map<String, Object> d = new LinkedHashMap<>();
            d.put("value", e.value());
            d.put("source", e.source().toString());
            out.put(e.name(), d);
        }
        return out;
    }

    /** describeShareGroups + listShareGroupOffsets as a JSON-ready map. */
    private static Map<String, Object> describeGroup(Admin admin, String group) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        ShareGroupDescription d = admin.describeShareGroups(List.of(group)).describedGroups().get(group)
                .get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        out.put("state", d.groupState().toString());
        out.put("group_epoch", d.groupEpoch());
        List<Object> members = new ArrayList<>();
        for (ShareMemberDescription m : d.members()) {
            Map<String, Object> md = new LinkedHashMap<>();
            md.put("client_id", m.clientId());
            md.put("member_epoch", m.memberEpoch());
            List<String> parts = new ArrayList<>();
            for (TopicPartition tp : m.assignment().topicPartitions()) {
                parts.add(tp.toString());
            }
            parts.sort(null);
            md.put("assignment", parts);
            members.add(md);
        }
        out.put("members", members);
        Map<TopicPartition, SharePartitionOffsetInfo> offs = admin
                .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(group).get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        Map<String, Object> offsets = new TreeMap<>();
        for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offs.entrySet()) {
            Map<String, Object> o = new LinkedHashMap<>();
            SharePartitionOffsetInfo info = e.getValue();
            o.put("start_offset", info == null ? null : info.startOffset());
            o.put("lag", info == null ? null : info.lag().orElse(null));
            offsets.put(e.getKey().toString(), o);
        }
        out.put("offsets", offsets);
        return out;
    }

    private static void earliestFor(String bootstrap, String group, Map<String, String> more) throws Exception {
        Map<String, String> cfg = new LinkedHashMap<>();
        cfg.put("share.auto.offset.reset", "earliest");
        cfg.putAll(more);
        try (Admin admin = admin(bootstrap)) {
            setGroupConfigs(admin, group, cfg);
        }
    }

    // ------------------------------------------------------------------------------ earliest

    private static void earliest(String bootstrap, String group) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            Map<String, Object> described = setGroupConfigs(admin, group,
                    Map.of("share.auto.offset.reset", "earliest"));
            @SuppressWarnings("unchecked")
            Map<String, Object> reset = (Map<String, Object>) described.get("share.auto.offset.reset");
            check("DYNAMIC_GROUP_CONFIG".equals(reset.get("source")),
                    "share.auto.offset.reset described with source " + reset.get("source"));
            // Values the broker must refuse: not a reset strategy, a lock duration below
            // group.share.min.record.lock.duration.ms, a delivery count limit above
            // group.share.max.delivery.count.limit, a config no group has.
            Map<String, Object> refused = new LinkedHashMap<>();
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            for (String[] kv : new String[][] {{"share.auto.offset.reset", "bogus"},
                    {"share.record.lock.duration.ms", "1"}, {"share.delivery.count.limit", "1000"},
                    {"no.such.group.config", "1"}}) {
                AlterConfigOp op = new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET);
                String outcome = "accepted";
                try {
                    admin.incrementalAlterConfigs(Map.of(res, List.of(op))).all()
                            .get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
                } catch (java.util.concurrent.ExecutionException e) {
                    outcome = e.getCause().getClass().getSimpleName();
                }
                refused.put(kv[0] + "=" + kv[1], outcome);
            }
            result.put("refused", refused);
            described = describeGroupConfigs(admin, group);
            result.put("configs", described);
            for (Map.Entry<String, Object> e : refused.entrySet()) {
                check(!"accepted".equals(e.getValue()), "the broker accepted " + e.getKey());
            }
            @SuppressWarnings("unchecked")
            Map<String, Object> after = (Map<String, Object>) described.get("share.auto.offset.reset");
            check("earliest".equals(after.get("value")), "share.auto.offset.reset is " + after + " after the refusals");
        }
    }

    // ------------------------------------------------------------------------------ consume / drain

    /** C consumers in threads accept everything until every expected key arrived (then QUIET_MS
     *  more); keys in `excluded` are not expected and must not arrive. */
    private static void consume(String bootstrap, String topic, String group, int n, int consumers,
                                boolean doProduce, Set<String> excluded) throws Exception {
        // Kafka's default lock (30 s), not the tests' short one: a consumer slowed down by a
        // busy machine must not lose its records to another before it acknowledges them.
        earliestFor(bootstrap, group, Map.of("share.record.lock.duration.ms", "30000"));
        if (doProduce) {
            produce(bootstrap, topic, 0, n);
        }
        Set<String> expected = new HashSet<>(keys(n));
        expected.removeAll(excluded);
        Map<String, AtomicInteger> seen = new ConcurrentHashMap<>();
        Map<Integer, AtomicInteger> dcHist = new ConcurrentHashMap<>();
        Map<String, Integer> excludedSeen = new ConcurrentHashMap<>();
        AtomicInteger deliveries = new AtomicInteger();
        AtomicInteger commitErrors = new AtomicInteger();
        AtomicBoolean stop = new AtomicBoolean(false);
        int[] perConsumer = new int[consumers];
        List<String> threadErrors = new ArrayList<>();
        long deadline = deadline();
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            final int me = c;
            Thread t = new Thread(() -> {
                String who = "consumer c" + me;
                KafkaShareConsumer<String, String> consumer = shareConsumer(bootstrap, group, "sharecheck-c" + me);
                try {
                    consumer.subscribe(List.of(topic));
                    while (!stop.get() && before(deadline)) {
                        ConsumerRecords<String, String> recs = consumer.poll(POLL);
                        if (recs.isEmpty()) {
                            continue;
                        }
                        for (ConsumerRecord<String, String> r : recs) {
                            int dc = deliveryCount(r);
                            dcHist.computeIfAbsent(dc, k -> new AtomicInteger()).incrementAndGet();
                            seen.computeIfAbsent(r.key(), k -> new AtomicInteger()).incrementAndGet();
                            if (excluded.contains(r.key())) {
                                excludedSeen.put(r.key(), dc);
                            }
                            deliveries.incrementAndGet();
                            synchronized (perConsumer) {
                                perConsumer[me]++;
                            }
                            consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                        }
                        commitErrors.addAndGet(commit(consumer, who));
                    }
                } catch (Exception e) {
                    synchronized (threadErrors) {
                        threadErrors.add(who + ": " + e);
                    }
                    err(who + ": " + e);
                } finally {
                    closeQuietly(consumer, who);
                }
            }, "consumer-" + c);
            t.start();
            threads.add(t);
        }
        long t0 = System.nanoTime();
        while (before(deadline) && threadErrors.isEmpty() && !seen.keySet().containsAll(expected)) {
            Thread.sleep(100);
        }
        long allSeenMs = msSince(t0);
        if (seen.keySet().containsAll(expected)) {
            Thread.sleep(QUIET_MS);  // late duplicates show up here
        }
        stop.set(true);
        for (Thread t : threads) {
            t.join(30_000);
        }
        Set<String> missing = new HashSet<>(expected);
        missing.removeAll(seen.keySet());
        Map<String, Integer> dup = new TreeMap<>();
        for (Map.Entry<String, AtomicInteger> e : seen.entrySet()) {
            if (e.getValue().get() > 1) {
                dup.put(e.getKey(), e.getValue().get());
            }
        }
        Map<String, Object> per = new LinkedHashMap<>();
        for (int c = 0; c < consumers; c++) {
            per.put("c" + c, perConsumer[c]);
        }
        result.put("expected", expected.size());
        result.put("deliveries", deliveries.get());
        result.put("distinct", seen.size());
        result.put("duplicates", deliveries.get() - seen.size());
        result.put("duplicate_keys", sample(dup.keySet()));
        result.put("missing", missing.size());
        result.put("missing_keys", sample(missing));
        result.put("excluded", excluded.size());
        result.put("excluded_delivered", new TreeMap<>(excludedSeen));
        result.put("per_consumer", per);
        result.put("delivery_counts", hist(dcHist));
        result.put("commit_errors", commitErrors.get());
        result.put("all_seen_ms", allSeenMs);
        check(threadErrors.isEmpty(), "consumer failed: " + threadErrors);
        check(missing.isEmpty(), missing.size() + " of " + expected.size() + " keys never delivered within "
                + timeoutS + "s, e.g. " + sample(missing));
        for (Thread t : threads) {
            check(!t.isAlive(), t.getName() + " did not finish");
        }
    }

    private static Map<String, Object> hist(Map<Integer, AtomicInteger> h) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (Integer k : new TreeSet<>(h.keySet())) {
            out.put(String.valueOf(k), h.get(k).get());
        }
        return out;
    }

    // ------------------------------------------------------------------------------ release

    private static void release(String bootstrap, String topic, String group, int n) throws Exception {
        earliestFor(bootstrap, group, Map.of());
        produce(bootstrap, topic, 0, n);
        Set<String> toRelease = new TreeSet<>();
        Set<String> toReject = new TreeSet<>();
        Set<String> toAccept = new TreeSet<>();
        for (int i = 0; i < n; i++) {
            (i % 3 == 0 ? toRelease : i % 5 == 1 ? toReject : toAccept).add("k" + i);
        }
        Map<String, List<Integer>> deliveries = new HashMap<>();  // key -> delivery counts seen
        List<String> unexpected = new ArrayList<>();
        Map<Integer, AtomicInteger> dcHist = new HashMap<>();
        int commitErrors = 0;
        long deadline = deadline();
        long quietUntil = Long.MAX_VALUE;
        KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, "sharecheck-release");
        try {
            c.subscribe(List.of(topic));
            while (before(deadline) && System.nanoTime() < quietUntil) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    String k = r.key();
                    int dc = deliveryCount(r);
                    dcHist.computeIfAbsent(dc, x -> new AtomicInteger()).incrementAndGet();
                    List<Integer> before = deliveries.computeIfAbsent(k, x -> new ArrayList<>());
                    int nth = before.size() + 1;
                    before.add(dc);
                    if (dc != nth) {
                        unexpected.add(k + " delivery " + nth + " has delivery count " + dc);
                    }
                    AcknowledgeType ack = AcknowledgeType.ACCEPT;
                    if (nth == 1 && toRelease.contains(k)) {
                        ack = AcknowledgeType.RELEASE;
                    } else if (nth == 1 && toReject.contains(k)) {
                        ack = AcknowledgeType.REJECT;
                    } else if (nth > 1 && !toRelease.contains(k)) {
                        unexpected.add(k + " (" + (toReject.contains(k) ? "rejected" : "accepted")
                                + ") delivered again, delivery count " + dc);
                    } else if (nth > 2) {
                        unexpected.add(k + " (released once, then accepted) delivered " + nth + " times");
                    }
                    c.acknowledge(r, ack);
                }
                if (!recs.isEmpty()) {
                    commitErrors += commit(c, "release");
                }
                if (quietUntil == Long.MAX_VALUE && complete(deliveries, toRelease, n)) {
                    quietUntil = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUIET_MS);
                }
            }
        } finally {
            closeQuietly(c, "release");
        }
        int redelivered = 0;
        Set<String> missing = new TreeSet<>();
        for (String k : keys(n)) {
            int times = deliveries.getOrDefault(k, List.of()).size();
            redelivered += Math.max(0, times - 1);
            if (times < (toRelease.contains(k) ? 2 : 1)) {
                missing.add(k);
            }
        }
        result.put("released", toRelease.size());
        result.put("rejected", toReject.size());
        result.put("accepted_first", toAccept.size());
        result.put("distinct", deliveries.size());
        result.put("redelivered", redelivered);
        result.put("delivery_counts", hist(dcHist));
        result.put("missing_keys", sample(missing));
        result.put("unexpected", unexpected.size() > 20 ? unexpected.subList(0, 20) : unexpected);
        result.put("commit_errors", commitErrors);
        check(unexpected.isEmpty(), unexpected.size() + " unexpected deliveries, e.g. " + result.get("unexpected"));
        check(missing.isEmpty(), missing.size() + " keys not delivered (released ones twice) within " + timeoutS
                + "s, e.g. " + sample(missing));
    }

    private static boolean complete(Map<String, List<Integer>> deliveries, Set<String> twice, int n) {
        for (int i = 0; i < n; i++) {
            String k = "k" + i;
            if (deliveries.getOrDefault(k, List.of()).size() < (twice.contains(k) ? 2 : 1)) {
                return false;
            }
        }
        return true;
    }

    // ------------------------------------------------------------------------------ expire

    private static void expire(String bootstrap, String topic, String group, int n, int lockMs, boolean groupConfig)
            throws Exception {
        earliestFor(bootstrap, group, groupConfig ? Map.of("share.record.lock.duration.ms", String.valueOf(lockMs))
                : Map.of());
        produce(bootstrap, topic, 0, n);
        long deadline = deadline();
        KafkaShareConsumer<String, String> a = shareConsumer(bootstrap, group, "sharecheck-expire-a");
        KafkaShareConsumer<String, String> b = null;
        Map<String, Integer> aGot = new TreeMap<>();
        Map<String, Integer> bGot = new HashMap<>();
        List<String> unexpected = new ArrayList<>();
        try {
            a.subscribe(List.of(topic));
            long aTime = 0;
            // A takes its records in one long poll. The Java client sends one ShareFetchEvent per
            // poll() call and stops fetching when a response acquires records; a second, short
            // poll whose event reaches the network thread after that response turns fetching
            // back on, and A's client then keeps fetching in the background without its
            // application ever polling again: it can take A's records once more when their locks
            // expire (delivery count 2, unseen) before B gets them (count 3).
            while (aGot.isEmpty()) {
                check(before(deadline), "consumer A got no records within " + timeoutS + "s");
                long left = Math.max(1, (deadline - System.nanoTime()) / 1_000_000);
                for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(left))) {
                    aGot.put(r.key(), deliveryCount(r));
                }
                aTime = System.nanoTime();
            }
            a.acquisitionLockTimeoutMs().ifPresent(ms -> result.put("a_lock_timeout_ms", ms));
            err("expire: A took " + aGot.size() + " records and acknowledges none of them");
            // A never polls again (in explicit mode it may not before acknowledging) but stays
            // subscribed: its background thread keeps heartbeating.
            b = shareConsumer(bootstrap, group, "sharecheck-expire-b");
            b.subscribe(List.of(topic));
            long firstRedelivery = -1;
            Set<String> all = new HashSet<>(keys(n));
            while (!bGot.keySet().containsAll(all) && before(deadline)) {
                ConsumerRecords<String, String> recs = b.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    int dc = deliveryCount(r);
                    Integer prev = bGot.put(r.key(), dc);
                    if (prev != null) {
                        unexpected.add(r.key() + " delivered to B twice");
                    }
                    if (aGot.containsKey(r.key())) {
                        if (firstRedelivery < 0) {
                            firstRedelivery = msSince(aTime);
                        }
                        if (dc < 2) {
                            unexpected.add(r.key() + " taken by A, then delivered to B with delivery count " + dc);
                        }
                    } else if (dc != 1) {
                        unexpected.add(r.key() + " (not taken by A) delivered to B with delivery count " + dc);
                    }
                    b.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                if (!recs.isEmpty()) {
                    check(commit(b, "expire B") == 0, "B's acknowledgements failed");
                }
            }
            Map<String, Integer> aKeysAtB = new TreeMap<>();
            for (String k : aGot.keySet()) {
                if (bGot.containsKey(k)) {
                    aKeysAtB.put(k, bGot.get(k));
                }
            }
            try (Admin admin = admin(bootstrap)) {
                result.put("group_while_a_idle", describeGroup(admin, group));
            }
            result.put("a_took", aGot.size());
            result.put("a_delivery_counts", new TreeSet<>(aGot.values()));
            result.put("b_got", bGot.size());
            result.put("b_got_a_keys", aKeysAtB.size());
            result.put("b_delivery_counts_of_a_keys", new TreeSet<>(aKeysAtB.values()));
            result.put("redelivered_after_ms", firstRedelivery);
            result.put("lock_ms", lockMs);
            result.put("unexpected", unexpected);
            Set<String> missing = new HashSet<>(all);
            missing.removeAll(bGot.keySet());
            check(unexpected.isEmpty(), "unexpected deliveries: " + unexpected);
            check(missing.isEmpty(), missing.size() + " keys never reached B within " + timeoutS + "s, e.g. "
                    + sample(missing) + " (A took " + aGot.keySet() + ")");
            // The lock is taken when A's ShareFetch acquires the records, before A's poll returns.
            check(firstRedelivery >= lockMs / 2, "A's records reached B " + firstRedelivery
                    + " ms after A got them, before the lock of " + lockMs + " ms can have expired");
        } finally {
            if (b != null) {
                closeQuietly(b, "expire B");
            }
            closeQuietly(a, "expire A");
        }
    }

    // ------------------------------------------------------------------------------ limit

    private static void limit(String bootstrap, String topic, String group, int n, int l, boolean groupConfig)
            throws Exception {
        earliestFor(bootstrap, group, groupConfig ? Map.of("share.delivery.count.limit", String.valueOf(l)) : Map.of());
        produce(bootstrap, topic, 0, n);
        Map<String, List<Integer>> deliveries = new TreeMap<>();
        Map<Integer, AtomicInteger> dcHist = new HashMap<>();
        List<String> unexpected = new ArrayList<>();
        int afterComplete = 0;
        int maxDc = 0;
        long deadline = deadline();
        long quietUntil = Long.MAX_VALUE;
        KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, "sharecheck-limit");
        try {
            c.subscribe(List.of(topic));
            while (before(deadline) && System.nanoTime() < quietUntil) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    int dc = deliveryCount(r);
                    maxDc = Math.max(maxDc, dc);
                    dcHist.computeIfAbsent(dc, x -> new AtomicInteger()).incrementAndGet();
                    List<Integer> seen = deliveries.computeIfAbsent(r.key(), x -> new ArrayList<>());
                    seen.add(dc);
                    if (dc != seen.size()) {
                        unexpected.add(r.key() + " delivery " + seen.size() + " has delivery count " + dc);
                    }
                    if (seen.size() > l) {
                        unexpected.add(r.key() + " delivered " + seen.size() + " times (limit " + l + ")");
                    }
                    if (quietUntil != Long.MAX_VALUE) {
                        afterComplete++;
                    }
                    c.acknowledge(r, AcknowledgeType.RELEASE);
                }
                if (!recs.isEmpty()) {
                    check(commit(c, "limit") == 0, "acknowledgements failed");
                }
                if (quietUntil == Long.MAX_VALUE && deliveries.size() == n
                        && deliveries.values().stream().allMatch(s -> s.size() >= l)) {
                    quietUntil = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUIET_MS);
                }
            }
        } finally {
            closeQuietly(c, "limit");
        }
        Map<Integer, AtomicInteger> timesHist = new HashMap<>();
        for (List<Integer> s : deliveries.values()) {
            timesHist.computeIfAbsent(s.size(), x -> new AtomicInteger()).incrementAndGet();
        }
        result.put("limit", l);
        result.put("distinct", deliveries.size());
        result.put("max_delivery_count", maxDc);
        result.put("delivery_counts", hist(dcHist));
        result.put("times_delivered", hist(timesHist));
        result.put("after_complete", afterComplete);
        result.put("unexpected", unexpected.size() > 20 ? unexpected.subList(0, 20) : unexpected);
        check(unexpected.isEmpty(), unexpected.size() + " unexpected deliveries, e.g. " + result.get("unexpected"));
        check(quietUntil != Long.MAX_VALUE, "not every record was delivered " + l + " times within " + timeoutS
                + "s: " + result.get("times_delivered"));
    }

    // ------------------------------------------------------------------------------ latest

    private static void latest(String bootstrap, String topic, String group, int n) throws Exception {
        int parts = produce(bootstrap, topic, 0, n);
        long deadline = deadline();
        Map<String, Integer> got = new TreeMap<>();
        Set<Integer> probed = new TreeSet<>();
        int probes = 0;
        KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, "sharecheck-latest");
        try (Admin admin = admin(bootstrap); KafkaProducer<String, String> producer = producer(bootstrap)) {
            Map<String, Object> configs = describeGroupConfigs(admin, group);
            result.put("reset_config", configs.get("share.auto.offset.reset"));
            c.subscribe(List.of(topic));
            // A share partition's start offset is set (to the log end) when its leader first
            // serves the group; until then the Admin describes no offset for it. So: one probe
            // record per partition (key p<partition>-<round>) every 500 ms until a probe from
            // every partition came back; whatever is produced after that must be delivered.
            long nextProbe = 0;
            while (probed.size() < parts) {
                check(before(deadline), "probes came back from partitions " + probed + " only, within "
                        + timeoutS + "s");
                if (System.nanoTime() >= nextProbe) {
                    for (int q = 0; q < parts; q++) {
                        if (!probed.contains(q)) {
                            producer.send(new ProducerRecord<>(topic, q, "p" + q + "-" + probes, "probe"));
                        }
                    }
                    producer.flush();
                    probes++;
                    nextProbe = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500);
                }
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    if (r.key().startsWith("p")) {
                        probed.add(r.partition());
                    } else {
                        got.put(r.key(), deliveryCount(r));
                    }
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                if (!recs.isEmpty()) {
                    check(commit(c, "latest") == 0, "acknowledgements failed");
                }
            }
            result.put("probe_rounds", probes);
            produce(bootstrap, topic, n, n);
            Set<String> expected = new HashSet<>();
            for (int i = n; i < 2 * n; i++) {
                expected.add("k" + i);
            }
            long quietUntil = Long.MAX_VALUE;
            while (before(deadline) && System.nanoTime() < quietUntil) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    if (!r.key().startsWith("p")) {
                        got.merge(r.key(), deliveryCount(r), (x, y) -> -1);  // -1 marks a repeat
                    }
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                if (!recs.isEmpty()) {
                    check(commit(c, "latest") == 0, "acknowledgements failed");
                }
                if (quietUntil == Long.MAX_VALUE && got.keySet().containsAll(expected)) {
                    quietUntil = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUIET_MS);
                }
            }
            Set<String> old = new TreeSet<>();
            Set<String> repeated = new TreeSet<>();
            for (Map.Entry<String, Integer> e : got.entrySet()) {
                if (index(e.getKey()) < n) {
                    old.add(e.getKey());
                }
                if (e.getValue() == -1) {
                    repeated.add(e.getKey());
                }
            }
            Set<String> missing = new TreeSet<>(expected);
            missing.removeAll(got.keySet());
            result.put("old_delivered", sample(old));
            result.put("new_delivered", got.size() - old.size());
            result.put("repeated", sample(repeated));
            check(old.isEmpty(), old.size() + " records produced before the group started were delivered: "
                    + sample(old));
            check(missing.isEmpty(), missing.size() + " new records never delivered, e.g. " + sample(missing));
            check(repeated.isEmpty(), "records delivered twice: " + sample(repeated));
        } finally {
            closeQuietly(c, "latest");
        }
    }

    // ------------------------------------------------------------------------------ consume-some

    private static void consumeSome(String bootstrap, String topic, String group, int k) throws Exception {
        earliestFor(bootstrap, group, Map.of());
        long deadline = deadline();
        List<String> accepted = new ArrayList<>();
        List<String> held = new ArrayList<>();
        KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, "sharecheck-some");
        c.subscribe(List.of(topic));
        // Accept the first K records delivered; the rest of the batch that completes K is held
        // (acquired, never acknowledged).
        while (accepted.size() < k) {
            check(before(deadline), "only " + accepted.size() + " of " + k + " records within " + timeoutS + "s");
            ConsumerRecords<String, String> recs = c.poll(POLL);
            for (ConsumerRecord<String, String> r : recs) {
                if (accepted.size() < k) {
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    accepted.add(r.key());
                } else {
                    held.add(r.key());
                }
            }
            if (!recs.isEmpty()) {
                check(commit(c, "consume-some") == 0, "acknowledgements failed");
            }
        }
        result.put("accepted", accepted);
        result.put("held", held);
        result.put("ok", true);
        System.out.println(toJson(result));
        System.out.flush();
        // A crash: no close(), no leave; the broker frees the held records when their locks
        // expire (or the member's session times out).
        Runtime.getRuntime().halt(0);
    }

    // ------------------------------------------------------------------------------ member

    private static void member(String bootstrap, String topic, String group, String clientId, long maxSeconds,
                               Path stopFile) throws Exception {
        earliestFor(bootstrap, group, Map.of());
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(maxSeconds);
        int received = 0;
        int commitErrors = 0;
        KafkaShareConsumer<String, String> c = shareConsumer(bootstrap, group, clientId);
        try {
            c.subscribe(List.of(topic));
            err("member " + clientId + ": subscribed to " + topic + " in share group " + group);
            while (before(deadline) && !Files.exists(stopFile)) {
                ConsumerRecords<String, String> recs = c.poll(POLL);
                for (ConsumerRecord<String, String> r : recs) {
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    received++;
                }
                if (!recs.isEmpty()) {
                    commitErrors += commit(c, clientId);
                    err("member " + clientId + ": received " + received);
                }
            }
        } finally {
            closeQuietly(c, clientId);
        }
        result.put("received", received);
        result.put("commit_errors", commitErrors);
        result.put("stopped_by", Files.exists(stopFile) ? "stop-file" : "max-seconds");
    }

    // ------------------------------------------------------------------------------ JSON

    static String toJson(Object o) {
        StringBuilder sb = new StringBuilder();
        json(sb, o);
        return sb.toString();
    }

    private static void json(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof Boolean || o instanceof Number) {
            sb.append(o);
        } else if (o instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                if (!first) {
                    sb.append(", ");
                }
                first = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(": ");
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object x : (Collection<?>) o) {
                if (!first) {
                    sb.append(", ");
                }
                first = false;
                json(sb, x);
            }
            sb.append(']');
        } else {
            String s = o.toString();
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char ch = s.charAt(i);
                if (ch == '"' || ch == '\\') {
                    sb.append('\\').append(ch);
                } else if (ch < 0x20) {
                    sb.append(String.format("\\u%04x", (int) ch));
                } else {
                    sb.append(ch);
                }
            }
            sb.append('"');
        }
    }
}
