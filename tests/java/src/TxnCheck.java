import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
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
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Transactions with the official Java client (tests/test_transactions.py).
 *
 * <pre>
 * TxnCheck --bootstrap B --topic-prefix P [--timeout-s S] [--transaction-version V]
 * </pre>
 *
 * <ol>
 *   <li><b>commit and abort</b>: one transactional producer commits 30 records over 3
 *       partitions, aborts 30, commits 30 more. A read_committed consumer reads exactly the 60
 *       committed ones, in order per partition; a read_uncommitted one reads all 90. The
 *       producer's epoch (DescribeTransactions) moved by one per commit and abort with
 *       transactions version 2 (KIP-890, the client follows the broker's finalized
 *       {@code transaction.version}: V, default 2), and stayed with version 1.</li>
 *   <li><b>the last stable offset</b>: while a transaction is open (records sent and flushed,
 *       not committed), a read_committed consumer's end offset stays where it was and a
 *       read_uncommitted one's moves; after the commit both pass the records.</li>
 *   <li><b>fencing</b>: a second producer with the same transactional id fences the first,
 *       whose open transaction is aborted and whose commit fails; the second one's
 *       transaction commits, and read_committed sees it and nothing of the first.</li>
 *   <li><b>pipelining</b>: transactions of 100 ms, records sent as fast as the producer
 *       takes them, five requests in flight, for 3 s: each transaction's first batch on a
 *       partition waits for the coordinator's check (KIP-890) while later requests of the
 *       same connection arrive; none may overtake it (an idempotent producer's sequence
 *       would break), and read_committed reads every acknowledged record.</li>
 *   <li><b>consume-transform-produce</b>: a consumer in a group reads 40 records, a
 *       transactional producer writes each transformed and commits the consumer's offsets
 *       with the transaction (sendOffsetsToTransaction, KIP-447 group metadata); one round is
 *       aborted and redone. The output holds each input exactly once, and the group's
 *       committed offsets are the input's end.</li>
 * </ol>
 *
 * Prints "TxnCheck OK: ..." and exits 0 on success; exits 1 on a failed check, 3 when the
 * watchdog fires.
 */
public class TxnCheck {
    static String bootstrap;

    static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("TxnCheck FAILED: " + what);
            System.exit(1);
        }
    }

    static KafkaProducer<String, String> producer(String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 20000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(boolean committed) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, committed ? "read_committed" : "read_uncommitted");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(new TopicPartition(topic, i));
        }
        return out;
    }

    /** Every value a consumer with this isolation reads from the start up to its end offsets. */
    static Map<Integer, List<String>> readAll(String topic, int parts, boolean committed) {
        Map<Integer, List<String>> out = new HashMap<>();
        try (KafkaConsumer<String, String> c = consumer(committed)) {
            List<TopicPartition> tps = partitions(topic, parts);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(20));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    done &= c.position(tp, Duration.ofSeconds(20)) >= end.get(tp);
                }
                if (done) {
                    break;
                }
                check(System.nanoTime() < deadline, "reading " + topic + " to " + end + " timed out");
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    out.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
                }
            }
        }
        return out;
    }

    /** How many records a read_committed consumer reads from the start to its end offsets. */
    static long countAll(String topic, int parts) {
        long n = 0;
        try (KafkaConsumer<String, String> c = consumer(true)) {
            List<TopicPartition> tps = partitions(topic, parts);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(20));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    done &= c.position(tp, Duration.ofSeconds(20)) >= end.get(tp);
                }
                if (done) {
                    return n;
                }
                check(System.nanoTime() < deadline, "counting " + topic + " timed out at " + n);
                n += c.poll(Duration.ofMillis(200)).count();
            }
        }
    }

    static long endOffset(String topic, int partition, boolean committed) {
        try (KafkaConsumer<String, String> c = consumer(committed)) {
            TopicPartition tp = new TopicPartition(topic, partition);
            return c.endOffsets(List.of(tp), Duration.ofSeconds(20)).get(tp);
        }
    }

    static void send(KafkaProducer<String, String> p, String topic, String prefix, int n, int parts) {
        for (int i = 0; i < n; i++) {
            p.send(new ProducerRecord<>(topic, i % parts, "k" + i, prefix + i));
        }
    }

    static int count(Map<Integer, List<String>> read, String prefix) {
        int n = 0;
        for (List<String> vs : read.values()) {
            for (String v : vs) {
                n += v.startsWith(prefix) ? 1 : 0;
            }
        }
        return n;
    }

    static int transactionVersion = 2;

    static short epochOf(String transactionalId) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            return (short) admin.describeTransactions(List.of(transactionalId)).description(transactionalId)
                .get(30, TimeUnit.SECONDS).producerEpoch();
        }
    }

    static void commitAndAbort(String topic) throws Exception {
        short first;
        try (KafkaProducer<String, String> p = producer(topic + "-tx")) {
            p.initTransactions();
            first = epochOf(topic + "-tx");
            p.beginTransaction();
            send(p, topic, "c1-", 30, 3);
            p.commitTransaction();
            p.beginTransaction();
            send(p, topic, "ab-", 30, 3);
            p.flush(); // written before the abort (the client drops what it has not sent)
            p.abortTransaction();
            p.beginTransaction();
            send(p, topic, "c2-", 30, 3);
            p.commitTransaction();
        }
        short last = epochOf(topic + "-tx");
        int bumps = transactionVersion >= 2 ? 3 : 0;
        check(last == first + bumps, "transaction.version " + transactionVersion + ": epoch " + first + " -> " + last
            + " over two commits and an abort, expected " + bumps + " bumps");
        Map<Integer, List<String>> committed = readAll(topic, 3, true);
        check(count(committed, "ab-") == 0, "read_committed read aborted records: " + committed);
        check(count(committed, "c1-") == 30 && count(committed, "c2-") == 30, "read_committed lost records: " + committed);
        for (int part = 0; part < 3; part++) {
            List<String> want = new ArrayList<>();
            for (String prefix : new String[] {"c1-", "c2-"}) {
                for (int i = part; i < 30; i += 3) {
                    want.add(prefix + i);
                }
            }
            check(want.equals(committed.get(part)), "partition " + part + ": " + committed.get(part) + " != " + want);
        }
        Map<Integer, List<String>> all = readAll(topic, 3, false);
        check(count(all, "ab-") == 30 && count(all, "c1-") + count(all, "c2-") == 60, "read_uncommitted: " + all);
    }

    static void lastStableOffset(String topic) {
        long before = endOffset(topic, 0, true);
        try (KafkaProducer<String, String> p = producer(topic + "-lso")) {
            p.initTransactions();
            p.beginTransaction();
            send(p, topic, "open-", 3, 1);
            p.flush();
            long stable = endOffset(topic, 0, true);
            long written = endOffset(topic, 0, false);
            check(stable == before, "an open transaction did not hold the last stable offset: " + stable + " != " + before);
            check(written >= before + 3, "the high watermark did not move: " + written);
            p.commitTransaction();
        }
        long after = endOffset(topic, 0, true);
        check(after >= before + 4, "after the commit the stable offset is " + after + ", was " + before);
    }

    static void fencing(String topic) {
        String id = topic + "-fenced";
        KafkaProducer<String, String> zombie = producer(id);
        zombie.initTransactions();
        zombie.beginTransaction();
        send(zombie, topic, "zombie-", 6, 3);
        zombie.flush();
        try (KafkaProducer<String, String> next = producer(id)) {
            next.initTransactions();
            boolean failed = false;
            try {
                send(zombie, topic, "zombie-late-", 3, 3);
                zombie.commitTransaction();
            } catch (Exception e) {
                failed = true;
                System.err.println("TxnCheck: the fenced producer's commit failed as it must: " + e);
            }
            check(failed, "a fenced producer committed");
            next.beginTransaction();
            send(next, topic, "next-", 6, 3);
            next.commitTransaction();
        }
        try {
            zombie.close(Duration.ofSeconds(5));
        } catch (Exception e) {
            // A fenced producer may refuse to close cleanly.
        }
        Map<Integer, List<String>> committed = readAll(topic, 3, true);
        check(count(committed, "zombie-") == 0, "read_committed read a fenced producer's records: " + committed);
        check(count(committed, "next-") == 6, "the new instance's records: " + committed);
    }

    static void consumeTransformProduce(String in, String out) throws Exception {
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(props(), new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < 40; i++) {
                plain.send(new ProducerRecord<>(in, i % 3, "k" + i, "in-" + i));
            }
        }
        String group = in + "-group";
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 7);
        int done = 0;
        boolean aborted = false;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer());
             KafkaProducer<String, String> p = producer(out + "-tx")) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            while (done < 40) {
                check(System.nanoTime() < deadline, "consume-transform-produce stalled at " + done + " of 40");
                var records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets = new HashMap<>();
                p.beginTransaction();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>(out, r.partition(), r.key(), r.value().replace("in-", "out-")));
                    offsets.put(new TopicPartition(r.topic(), r.partition()),
                        new org.apache.kafka.clients.consumer.OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                if (!aborted) {
                    // The first round is aborted: its output and offsets vanish, and the
                    // consumer goes back to the last committed offsets to redo it.
                    p.flush();
                    p.abortTransaction();
                    aborted = true;
                    for (TopicPartition tp : c.assignment()) {
                        var committed = c.committed(java.util.Set.of(tp)).get(tp);
                        c.seek(tp, committed == null ? 0 : committed.offset());
                    }
                    continue;
                }
                p.commitTransaction();
                done += records.count();
            }
        }
        Map<Integer, List<String>> output = readAll(out, 3, true);
        check(count(output, "out-") == 40, "the output does not hold each input once: " + output);
        java.util.Set<String> distinct = new java.util.HashSet<>();
        for (List<String> vs : output.values()) {
            distinct.addAll(vs);
        }
        check(distinct.size() == 40, "duplicates in the output: " + output);
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            var committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            long total = 0;
            for (var e : committed.entrySet()) {
                total += e.getValue().offset();
            }
            check(total == 40, "the group's committed offsets add up to " + total + ", not 40: " + committed);
        }
    }

    static void pipelined(String topic) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-tx");
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, 131072);
        byte[] value = new byte[512];
        java.util.concurrent.atomic.AtomicLong acked = new java.util.concurrent.atomic.AtomicLong();
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(p, new StringSerializer(),
                new org.apache.kafka.common.serialization.ByteArraySerializer())) {
            producer.initTransactions();
            // Transactions of 100 ms each, records sent as fast as the producer takes them
            // (the sticky partitioner moves between partitions batch by batch), for 3 s.
            long stop = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
            while (System.nanoTime() < stop) {
                producer.beginTransaction();
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(100);
                while (System.nanoTime() < until) {
                    producer.send(new ProducerRecord<>(topic, value), (m, e) -> {
                        if (e == null) {
                            acked.incrementAndGet();
                        }
                    });
                }
                producer.commitTransaction();
            }
        }
        long n = countAll(topic, 12);
        check(n == acked.get() && n > 0, "pipelined transactions: read " + n + " of " + acked.get());
    }

    static Properties props() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return p;
    }

    public static void main(String[] args) throws Exception {
        String prefix = "txncheck";
        int timeoutS = 300;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--bootstrap" -> bootstrap = args[i + 1];
                case "--topic-prefix" -> prefix = args[i + 1];
                case "--timeout-s" -> timeoutS = Integer.parseInt(args[i + 1]);
                case "--transaction-version" -> transactionVersion = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException(args[i]);
            }
        }
        final int limit = timeoutS;
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(limit * 1000L);
                System.err.println("TxnCheck: watchdog fired after " + limit + "s");
                Runtime.getRuntime().halt(3);
            } catch (InterruptedException e) {
                // done in time
            }
        });
        watchdog.setDaemon(true);
        watchdog.start();
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        String[] topics = {prefix + "-commit", prefix + "-lso", prefix + "-fence", prefix + "-in", prefix + "-out",
            prefix + "-pipe"};
        try (Admin admin = Admin.create(ap)) {
            Collection<NewTopic> nt = new ArrayList<>();
            for (String t : topics) {
                nt.add(new NewTopic(t, t.endsWith("-pipe") ? 12 : 3, (short) -1));
            }
            admin.createTopics(nt).all().get(30, TimeUnit.SECONDS);
        }
        commitAndAbort(topics[0]);
        System.out.println("TxnCheck: commit and abort OK");
        lastStableOffset(topics[1]);
        System.out.println("TxnCheck: last stable offset OK");
        fencing(topics[2]);
        System.out.println("TxnCheck: fencing OK");
        pipelined(topics[5]);
        System.out.println("TxnCheck: pipelining OK");
        consumeTransformProduce(topics[3], topics[4]);
        System.out.println("TxnCheck: consume-transform-produce OK");
        System.out.println("TxnCheck OK: commit/abort, last stable offset, fencing, pipelining, consume-transform-produce");
        System.exit(0);
    }
}
