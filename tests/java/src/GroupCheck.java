import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Consumer-group building blocks for the Python integration tests (tests/test_java_groups.py,
 * tests/test_consumer_groups_tool.py). One program, three subcommands; every blocking call is
 * bounded and a watchdog halts the JVM (exit 3) if a run overshoots its limit.
 *
 * <pre>
 * member    --bootstrap B --group G --topic T --out FILE
 *           [--protocol classic|consumer] [--assignor range|cooperative-sticky|uniform]
 *           [--client-id ID] [--session-timeout-ms MS] [--idle-seconds S] [--max-seconds S]
 *           [--auto-offset-reset earliest|latest|none] [--exit-after-records N]
 *           [--pattern RE2]  (with --protocol consumer: subscribe to a broker-side regex
 *                             instead of T; T is still required and ignored)
 * produce   --bootstrap B --topic T --count N [--start K]
 * committed --bootstrap B --group G --topic T
 * </pre>
 *
 * <p><b>member</b>: a KafkaConsumer in group G subscribed to T with auto-commit off. Each poll's
 * records are appended to FILE as "partition offset value" lines (flushed once per poll) and then
 * committed with commitSync() - at-least-once processing. Offsets of revoked partitions are also
 * committed in onPartitionsRevoked. Every rebalance callback is logged to stderr as
 * "GroupCheck member ID: assigned [..] / revoked [..] / lost [..]; assignment now [..]" (partition
 * numbers). The member stops gracefully (final commit, then close(), which leaves the group) when
 * <ul>
 *   <li>FILE.stop exists and no records arrived for --idle-seconds (default 3) since it appeared
 *       or since the last record, whichever is later;</li>
 *   <li>it has processed --exit-after-records records (if given);</li>
 *   <li>it receives SIGTERM (the shutdown hook wakes the consumer, waits for close(), exits 0);</li>
 *   <li>--max-seconds (default 300) pass: exit 0 unless --exit-after-records was not reached.</li>
 * </ul>
 * With --protocol consumer it sets group.protocol=consumer (KIP-848): no
 * partition.assignment.strategy, session or heartbeat settings (those are the broker's); an
 * --assignor is passed as group.remote.assignor. With --protocol classic (default)
 * group.protocol=classic, partition.assignment.strategy from --assignor (default range) and
 * session.timeout.ms from --session-timeout-ms (default 6000).
 * Prints "GroupCheck member OK: ..." on success.
 *
 * <p><b>produce</b>: idempotent, acks=all producer; record i (K &lt;= i &lt; K+N) has key "k&lt;i&gt;",
 * value "v&lt;i&gt;" and goes to partition i mod (partition count), so every step of a test spreads
 * evenly. Waits for every acknowledgement. Prints "GroupCheck produce OK: ..." with the per
 * partition counts.
 *
 * <p><b>committed</b>: Admin listConsumerGroupOffsets + listOffsets(latest). Prints one line
 * "partition P committed C end E" per partition of T (C = -1 when the group has no offset for
 * it), then "GroupCheck committed OK: ...".
 *
 * <p>Failures print "GroupCheck FAILED: reason" on stdout and exit 1; usage errors exit 2.
 */
public final class GroupCheck {

    private static final long OP_TIMEOUT_MS = 30_000;

    static final class CheckFailed extends RuntimeException {
        CheckFailed(String msg) {
            super(msg);
        }
    }

    public static void main(String[] args) {
        if (args.length == 0) {
            usage("missing subcommand");
        }
        Map<String, String> opts = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--") || i + 1 >= args.length) {
                usage("bad argument: " + a);
            }
            opts.put(a.substring(2), args[++i]);
        }
        try {
            switch (args[0]) {
                case "member":
                    member(opts);
                    break;
                case "produce":
                    startWatchdog(120, "produce");
                    produce(opts);
                    break;
                case "committed":
                    startWatchdog(120, "committed");
                    committed(opts);
                    break;
                default:
                    usage("unknown subcommand " + args[0]);
            }
        } catch (CheckFailed e) {
            fail(e.getMessage());
        } catch (Throwable e) {
            System.out.println("GroupCheck FAILED with exception: " + e);
            e.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
        System.out.flush();
        System.exit(0);  // do not wait for lingering client threads
    }

    private static void usage(String why) {
        System.err.println("GroupCheck: " + why + "\nusage: GroupCheck member|produce|committed --option value ..."
                + " (see the class comment in tests/java/src/GroupCheck.java)");
        System.exit(2);
    }

    private static void fail(String msg) {
        System.out.println("GroupCheck FAILED: " + msg);
        System.out.flush();
        System.exit(1);
    }

    private static String req(Map<String, String> opts, String name) {
        String v = opts.get(name);
        if (v == null) {
            usage("--" + name + " is required");
        }
        return v;
    }

    private static void check(boolean ok, String msg) {
        if (!ok) {
            throw new CheckFailed(msg);
        }
    }

    private static void startWatchdog(long timeoutS, String what) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(timeoutS));
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("GroupCheck FAILED: watchdog: " + what + " exceeded " + timeoutS + "s");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        t.setDaemon(true);
        t.start();
    }

    private static void err(String msg) {
        System.err.println(msg);
        System.err.flush();
    }

    private static String partitions(Collection<TopicPartition> tps) {
        TreeSet<Integer> ps = new TreeSet<>();
        for (TopicPartition tp : tps) ps.add(tp.partition());
        return ps.toString().replace(" ", "");
    }

    // ------------------------------------------------------------------------------ member

    private static void member(Map<String, String> opts) throws Exception {
        String bootstrap = req(opts, "bootstrap");
        String group = req(opts, "group");
        String topic = req(opts, "topic");
        Path out = Paths.get(req(opts, "out"));
        Path stopFile = Paths.get(out + ".stop");
        String protocol = opts.getOrDefault("protocol", "classic");
        String assignor = opts.get("assignor");
        String pattern = opts.get("pattern");
        String clientId = opts.getOrDefault("client-id", "groupcheck-" + ProcessHandle.current().pid());
        int sessionTimeoutMs = Integer.parseInt(opts.getOrDefault("session-timeout-ms", "6000"));
        long idleMs = (long) (Double.parseDouble(opts.getOrDefault("idle-seconds", "3")) * 1000);
        long maxSeconds = Long.parseLong(opts.getOrDefault("max-seconds", "300"));
        long exitAfter = Long.parseLong(opts.getOrDefault("exit-after-records", "-1"));
        String reset = opts.getOrDefault("auto-offset-reset", "earliest");
        // close() and the final commit get their own budget on top of max-seconds.
        startWatchdog(maxSeconds + 60, "member " + clientId);

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, reset);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "100");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        switch (protocol) {
            case "classic":
                p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
                String strategy;
                switch (assignor == null ? "range" : assignor) {
                    case "range": strategy = "org.apache.kafka.clients.consumer.RangeAssignor"; break;
                    case "cooperative-sticky":
                        strategy = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"; break;
                    case "roundrobin": strategy = "org.apache.kafka.clients.consumer.RoundRobinAssignor"; break;
                    default: usage("unknown classic assignor " + assignor); return;
                }
                p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, strategy);
                p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.toString(sessionTimeoutMs));
                p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Integer.toString(Math.max(100, Math.min(1000, sessionTimeoutMs / 3))));
                break;
            case "consumer":
                p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
                if (assignor != null) {
                    p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
                }
                break;
            default:
                usage("unknown --protocol " + protocol);
        }

        final String me = "GroupCheck member " + clientId;
        final TreeSet<TopicPartition> owned = new TreeSet<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        final AtomicBoolean terminated = new AtomicBoolean(false);
        final CountDownLatch closed = new CountDownLatch(1);
        final int[] rebalances = {0};
        final int[] hookExitCode = {1};
        long processed = 0;
        long polls = 0;
        int commitsOk = 0;
        int commitsFailed = 0;
        String stopReason;
        long t0 = System.nanoTime();

        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p);
        Thread shutdownHook = new Thread(() -> {
            terminated.set(true);
            err(me + ": SIGTERM/shutdown: waking the consumer to leave the group");
            try {
                consumer.wakeup();
            } catch (Exception ignored) {
                // closed already
            }
            boolean done = false;
            try {
                done = closed.await(45, TimeUnit.SECONDS);
            } catch (InterruptedException ignored) {
                // fall through
            }
            System.out.flush();
            Runtime.getRuntime().halt(done ? hookExitCode[0] : 1);
        }, "shutdown");
        Runtime.getRuntime().addShutdownHook(shutdownHook);

        BufferedWriter w = Files.newBufferedWriter(out, StandardCharsets.UTF_8,
                StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        boolean success = false;
        try {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    rebalances[0]++;
                    // Commit what was processed of the partitions being taken away (the main loop
                    // commits after each poll already; this covers a failed commit in between).
                    if (!parts.isEmpty()) {
                        try {
                            Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                            for (TopicPartition tp : parts) {
                                offs.put(tp, new OffsetAndMetadata(consumer.position(tp, Duration.ofSeconds(5))));
                            }
                            consumer.commitSync(offs, Duration.ofSeconds(10));
                        } catch (Exception e) {
                            err(me + ": commit on revoke failed: " + e);
                        }
                    }
                    owned.removeAll(parts);
                    err(me + ": revoked " + partitions(parts) + "; assignment now " + partitions(owned));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    rebalances[0]++;
                    owned.addAll(parts);
                    err(me + ": assigned " + partitions(parts) + "; assignment now " + partitions(owned));
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    rebalances[0]++;
                    owned.removeAll(parts);
                    err(me + ": lost " + partitions(parts) + "; assignment now " + partitions(owned));
                }
            };
            if (pattern != null) {
                // KIP-848 server-side regular expression (RE2 syntax), matched by the broker.
                consumer.subscribe(new SubscriptionPattern(pattern), listener);
            } else {
                consumer.subscribe(List.of(topic), listener);
            }
            err(me + ": subscribed to " + (pattern != null ? "pattern " + pattern : topic) + " in group " + group + " (protocol " + protocol
                    + (assignor != null ? ", assignor " + assignor : "") + ")");

            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(maxSeconds);
            long lastActivity = System.nanoTime();
            boolean stopSeen = false;
            while (true) {
                if (exitAfter >= 0 && processed >= exitAfter) {
                    stopReason = "processed " + processed + " >= " + exitAfter + " records";
                    break;
                }
                if (System.nanoTime() > deadline) {
                    stopReason = "max-seconds " + maxSeconds;
                    check(exitAfter < 0, me + ": processed only " + processed + " of " + exitAfter
                            + " records in " + maxSeconds + "s (assignment " + partitions(owned) + ")");
                    break;
                }
                if (!stopSeen && Files.exists(stopFile)) {
                    stopSeen = true;
                    lastActivity = System.nanoTime();
                    err(me + ": stop file seen");
                }
                if (stopSeen && System.nanoTime() - lastActivity > TimeUnit.MILLISECONDS.toNanos(idleMs)) {
                    stopReason = "stop-file";
                    break;
                }
                ConsumerRecords<String, String> recs;
                try {
                    recs = consumer.poll(Duration.ofMillis(300));
                } catch (WakeupException e) {
                    stopReason = "SIGTERM";
                    break;
                }
                polls++;
                if (recs.isEmpty()) {
                    continue;
                }
                lastActivity = System.nanoTime();
                for (ConsumerRecord<String, String> r : recs) {
                    w.write(r.partition() + " " + r.offset() + " " + r.value() + "\n");
                    processed++;
                }
                w.flush();
                try {
                    consumer.commitSync(Duration.ofSeconds(15));
                    commitsOk++;
                } catch (WakeupException e) {
                    stopReason = "SIGTERM";
                    break;
                } catch (Exception e) {
                    // e.g. CommitFailedException / RebalanceInProgress: the records will be
                    // processed again by whoever owns the partition next (at-least-once).
                    commitsFailed++;
                    err(me + ": commitSync failed: " + e);
                }
            }
            if (terminated.get()) {
                stopReason = "SIGTERM";
            }
            // Final commit of everything processed, then leave the group.
            try {
                if (!consumer.assignment().isEmpty()) {
                    consumer.commitSync(Duration.ofSeconds(15));
                    commitsOk++;
                }
            } catch (Exception e) {
                commitsFailed++;
                err(me + ": final commitSync failed: " + e);
            }
            err(me + ": stopping (" + stopReason + "), closing the consumer");
            w.close();
            consumer.close(Duration.ofSeconds(30));
            System.out.printf("GroupCheck member OK: %s processed %d records in %d polls, %d commits ok, %d failed, "
                            + "%d rebalance callbacks, stopped by %s after %.1fs%n",
                    clientId, processed, polls, commitsOk, commitsFailed, rebalances[0], stopReason,
                    (System.nanoTime() - t0) / 1e9);
            System.out.flush();
            success = true;
        } finally {
            if (!success) {
                try {
                    w.close();
                } catch (IOException ignored) {
                    // reporting the original failure
                }
                try {
                    consumer.close(Duration.ofSeconds(5));
                } catch (Exception ignored) {
                    // reporting the original failure
                }
            }
            hookExitCode[0] = success ? 0 : 1;
            closed.countDown();
        }
        if (terminated.get()) {
            // The shutdown hook is running and halts the JVM once it sees `closed`.
            Thread.sleep(60_000);
        }
        Runtime.getRuntime().removeShutdownHook(shutdownHook);
    }

    // ------------------------------------------------------------------------------ produce

    private static void produce(Map<String, String> opts) throws Exception {
        String bootstrap = req(opts, "bootstrap");
        String topic = req(opts, "topic");
        int count = Integer.parseInt(req(opts, "count"));
        long start = Long.parseLong(opts.getOrDefault("start", "0"));
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "groupcheck-producer");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        TreeMap<Integer, Integer> perPartition = new TreeMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<PartitionInfo> infos = producer.partitionsFor(topic);
            check(infos != null && !infos.isEmpty(), "no partitions for topic " + topic);
            int n = infos.size();
            List<Future<RecordMetadata>> futures = new ArrayList<>(count);
            for (long i = start; i < start + count; i++) {
                int partition = (int) (i % n);
                futures.add(producer.send(new ProducerRecord<>(topic, partition, "k" + i, "v" + i)));
            }
            producer.flush();
            for (int j = 0; j < futures.size(); j++) {
                RecordMetadata md;
                try {
                    md = futures.get(j).get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
                } catch (Exception e) {
                    throw new CheckFailed("send of v" + (start + j) + " failed: " + e);
                }
                perPartition.merge(md.partition(), 1, Integer::sum);
            }
            System.out.printf("GroupCheck produce OK: %d records v%d..v%d to %s over %d partitions %s%n",
                    count, start, start + count - 1, topic, n, perPartition);
        }
    }

    // ------------------------------------------------------------------------------ committed

    private static void committed(Map<String, String> opts) throws Exception {
        String bootstrap = req(opts, "bootstrap");
        String group = req(opts, "group");
        String topic = req(opts, "topic");
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "groupcheck-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        try (Admin admin = Admin.create(p)) {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                    .get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS).get(topic);
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int i = 0; i < d.partitions().size(); i++) latest.put(new TopicPartition(topic, i), OffsetSpec.latest());
            Map<TopicPartition, ListOffsetsResultInfo> ends = admin.listOffsets(latest).all()
                    .get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            Map<TopicPartition, OffsetAndMetadata> offs = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(OP_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            for (int i = 0; i < d.partitions().size(); i++) {
                TopicPartition tp = new TopicPartition(topic, i);
                OffsetAndMetadata om = offs.get(tp);
                System.out.println("partition " + i + " committed " + (om == null ? -1 : om.offset())
                        + " end " + ends.get(tp).offset());
            }
            System.out.println("GroupCheck committed OK: group " + group + " topic " + topic + " partitions "
                    + d.partitions().size());
        }
    }
}
