import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.InvalidRecordException;
import org.apache.kafka.common.errors.InvalidTimestampException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.storage.internals.log.LogConfig;

/**
 * Every topic config Apache Kafka defines (its own LogConfig, so none is missed), checked
 * against a broker with Kafka's own definitions:
 *
 *   defs                 prints name=value, a valid value other than the default for each
 *                        config (for kafka-topics.sh --config in tests/test_topic_configs.py)
 *   broker-defs          prints name, type and default of every broker config Kafka defines
 *                        (KafkaConfig), tab-separated (scripts/gen-kafka-settings.py)
 *   check BOOTSTRAP      with the Java AdminClient, producer and consumer:
 *     1. a new topic describes every config with Kafka's default, type and DEFAULT_CONFIG;
 *     2. for each config and a set of values (the default, range ends and one past them, the
 *        allowed strings, malformed ones), the broker accepts exactly what Kafka's validator
 *        accepts (IncrementalAlterConfigs with validateOnly), remote.storage.enable=true
 *        refused as by a broker without tiered storage;
 *     3. a topic created with every config set describes each as DYNAMIC_TOPIC_CONFIG;
 *     4. KIP-467: a batch with a keyless record on a compacted topic, and one with a record
 *        older than message.timestamp.before.max.ms, fail with the bad record's own error
 *        (InvalidRecordException, InvalidTimestampException) and the others with Kafka's
 *        "part of a batch" error;
 *     5. topics with compression.type gzip, lz4, zstd and uncompressed take uncompressed
 *        and snappy batches and give back every record.
 * Prints "ConfigCheck OK: ..." and exits 0, or names every mismatch and exits 1.
 */
public class ConfigCheck {
    static final List<String> failures = new ArrayList<>();

    static void check(boolean ok, String what) {
        if (!ok) {
            failures.add(what);
            System.out.println("MISMATCH " + what);
        }
    }

    static ConfigDef.ConfigKey key(String name) {
        return LogConfig.configKeys().get(name);
    }

    static String defaultOf(String name) {
        ConfigDef.ConfigKey k = key(name);
        return k.hasDefault() ? ConfigDef.convertToString(k.defaultValue, k.type) : null;
    }

    /** Kafka's verdict on one value, as a broker without tiered storage gives it. */
    static boolean kafkaAccepts(String name, String value) {
        ConfigDef.ConfigKey k = key(name);
        try {
            Object parsed = ConfigDef.parseType(name, value, k.type);
            if (k.validator != null) {
                k.validator.ensureValid(name, parsed);
            }
        } catch (ConfigException e) {
            return false;
        }
        return !(name.equals("remote.storage.enable") && value.trim().equalsIgnoreCase("true"));
    }

    /** The numbers in a validator's description: "[1,...]", "[0,...,1]", "[1,...,9] or -1". */
    static List<String> bounds(String name) {
        ConfigDef.ConfigKey k = key(name);
        List<String> out = new ArrayList<>();
        if (k.validator == null) {
            return out;
        }
        for (String part : k.validator.toString().split("[\\[\\],]| or ")) {
            String p = part.trim();
            if (p.matches("-?[0-9.]+")) {
                out.add(p);
            }
        }
        return out;
    }

    /** The allowed strings of a ValidString or ValidList validator. */
    static List<String> allowed(String name) {
        ConfigDef.ConfigKey k = key(name);
        List<String> out = new ArrayList<>();
        String v = k.validator == null ? "" : k.validator.toString();
        if ((k.type == ConfigDef.Type.STRING || k.type == ConfigDef.Type.LIST) && v.startsWith("[") && !v.contains("partitionId")) {
            for (String s : v.substring(1, v.length() - 1).split(",")) {
                out.add(s.trim());
            }
        }
        return out;
    }

    /** A valid value other than the default, chosen from the definition. */
    static String other(String name) {
        ConfigDef.ConfigKey k = key(name);
        String def = defaultOf(name);
        switch (k.type) {
            case BOOLEAN:
                return name.startsWith("remote.") ? "false" : String.valueOf(!Boolean.parseBoolean(def));
            case STRING:
                for (String a : allowed(name)) {
                    if (!a.equals(def)) {
                        return a;
                    }
                }
                return def;
            case LIST:
                return name.equals("cleanup.policy") ? "compact" : "0:0";
            default:
                List<String> b = bounds(name);
                if (b.isEmpty()) {
                    return "1000";
                }
                String min = b.get(0);
                if (!min.equals(def)) {
                    return min;
                }
                return k.type == ConfigDef.Type.DOUBLE ? "0.25" : String.valueOf(Long.parseLong(min) + 1);
        }
    }

    /** Values to compare verdicts on: the default, the chosen value, range ends and one past them, allowed and malformed strings. */
    static Set<String> candidates(String name) {
        Set<String> out = new LinkedHashSet<>();
        String def = defaultOf(name);
        if (def != null) {
            out.add(def);
        }
        out.add(other(name));
        for (String b : bounds(name)) {
            out.add(b);
            if (b.matches("-?[0-9]+")) {
                long n = Long.parseLong(b);
                out.add(String.valueOf(n - 1));
                out.add(String.valueOf(n + 1));
            }
        }
        out.addAll(allowed(name));
        out.addAll(Arrays.asList("", "abc", " 5 ", "-1", "0", "-2", "1.5", "-0.1", "true", "TRUE", "no",
                "2147483648", "9223372036854775807", "9223372036854775808", "compact,delete", "compact,",
                "compact,compact", "delete, compact", "*", "0:1,1:2", "0:1,x", "producer", "Producer", "gzip",
                "CreateTime", "LogAppendTime"));
        return out;
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 30000);
        return Admin.create(p);
    }

    static Config describe(Admin admin, String topic) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return admin.describeConfigs(List.of(r)).all().get(60, TimeUnit.SECONDS).get(r);
    }

    public static void main(String[] args) throws Exception {
        List<String> names = new ArrayList<>(LogConfig.nonInternalConfigNames());
        names.sort(null);
        if (args.length == 1 && args[0].equals("broker-defs")) {
            // Kafka's broker configs (KafkaConfig), for scripts/gen-kafka-settings.py.
            ConfigDef broker = kafka.server.KafkaConfig.configDef();
            List<String> all = new ArrayList<>(broker.names());
            all.sort(null);
            for (String n : all) {
                ConfigDef.ConfigKey k = broker.configKeys().get(n);
                if (k.internalConfig) {
                    continue;
                }
                String def = k.hasDefault() && k.defaultValue != null ? ConfigDef.convertToString(k.defaultValue, k.type) : "";
                System.out.println(n + "\t" + k.type + "\t" + def.replace("\t", " ").replace("\n", " "));
            }
            return;
        }
        if (args.length == 1 && args[0].equals("defs")) {
            for (String n : names) {
                System.out.println(n + "=" + other(n));
            }
            return;
        }
        String bootstrap = args[1];
        String run = Long.toString(System.nanoTime(), 36);
        int compared = 0;
        int accepted = 0;
        try (Admin admin = admin(bootstrap)) {
            // 1. Defaults.
            String plain = "cfg-plain-" + run;
            admin.createTopics(List.of(new NewTopic(plain, 1, (short) 1))).all().get(60, TimeUnit.SECONDS);
            Config cfg = describe(admin, plain);
            for (String n : names) {
                ConfigEntry e = cfg.get(n);
                check(e != null, "DescribeConfigs lists " + n);
                if (e == null) {
                    continue;
                }
                check(String.valueOf(defaultOf(n)).equals(e.value()), n + " default: Kafka " + defaultOf(n) + ", broker " + e.value());
                check(e.source() == ConfigEntry.ConfigSource.DEFAULT_CONFIG, n + " source " + e.source());
                check(e.type().name().equals(key(n).type.name()), n + " type: Kafka " + key(n).type + ", broker " + e.type());
            }
            // 2. The same verdicts as Kafka's validators.
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, plain);
            for (String n : names) {
                for (String v : candidates(n)) {
                    boolean kafka = kafkaAccepts(n, v);
                    boolean broker;
                    String why = "";
                    try {
                        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(n, v), AlterConfigOp.OpType.SET);
                        admin.incrementalAlterConfigs(Map.of(res, List.of(op)), new AlterConfigsOptions().validateOnly(true))
                                .all().get(60, TimeUnit.SECONDS);
                        broker = true;
                    } catch (ExecutionException e) {
                        broker = false;
                        why = ": " + e.getCause();
                    }
                    compared++;
                    accepted += broker ? 1 : 0;
                    check(kafka == broker, n + "=\"" + v + "\": Kafka " + (kafka ? "accepts" : "refuses") + ", broker "
                            + (broker ? "accepts" : "refuses") + why);
                }
            }
            // 3. Every config set at once.
            String all = "cfg-all-" + run;
            Map<String, String> every = new HashMap<>();
            for (String n : names) {
                every.put(n, other(n));
            }
            admin.createTopics(List.of(new NewTopic(all, 1, (short) 1).configs(every))).all().get(60, TimeUnit.SECONDS);
            Config set = describe(admin, all);
            for (String n : names) {
                ConfigEntry e = set.get(n);
                check(e != null && every.get(n).equals(e.value()) && e.source() == ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
                        n + " set to " + every.get(n) + " describes as " + e);
            }
            // 4. Per-record errors.
            String compacted = "cfg-compact-" + run;
            String recent = "cfg-recent-" + run;
            admin.createTopics(List.of(
                    new NewTopic(compacted, 1, (short) 1).configs(Map.of("cleanup.policy", "compact")),
                    new NewTopic(recent, 1, (short) 1).configs(Map.of("message.timestamp.before.max.ms", "3600000"))))
                    .all().get(60, TimeUnit.SECONDS);
            long now = System.currentTimeMillis();
            recordErrors(bootstrap, compacted, new Long[] {now, now, now, now}, new boolean[] {true, true, false, true},
                    2, InvalidRecordException.class, "Compacted topic cannot accept message without key");
            recordErrors(bootstrap, recent, new Long[] {now, now - 7_200_000L, now}, new boolean[] {true, true, true},
                    1, InvalidTimestampException.class, "is out of range");
            // 5. Recompression.
            for (String codec : List.of("gzip", "lz4", "zstd", "uncompressed")) {
                String t = "cfg-" + codec + "-" + run;
                admin.createTopics(List.of(new NewTopic(t, 1, (short) 1).configs(Map.of("compression.type", codec))))
                        .all().get(60, TimeUnit.SECONDS);
                roundTrip(bootstrap, t, "none");
                roundTrip(bootstrap, t, "snappy");
            }
        }
        if (!failures.isEmpty()) {
            System.out.println("ConfigCheck FAILED: " + failures.size() + " mismatches");
            System.exit(1);
        }
        System.out.println("ConfigCheck OK: " + names.size() + " configs, " + compared + " values compared ("
                + accepted + " accepted, " + (compared - accepted) + " refused, as by Kafka's validators)");
        System.exit(0);
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, String codec, int lingerMs) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, lingerMs);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.RETRIES_CONFIG, 0);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 60000);
        return new KafkaProducer<>(p);
    }

    /** Sends one batch; the record at `bad` must fail with `badType` (message containing
     * `badText`), every other one with Kafka's "part of a batch" KafkaException. */
    static void recordErrors(String bootstrap, String topic, Long[] timestamps, boolean[] keyed, int bad,
            Class<?> badType, String badText) throws Exception {
        List<Future<?>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> p = producer(bootstrap, "none", 1000)) {
            for (int i = 0; i < timestamps.length; i++) {
                byte[] k = keyed[i] ? ("k" + i).getBytes() : null;
                sent.add(p.send(new ProducerRecord<>(topic, 0, timestamps[i], k, ("v" + i).getBytes())));
            }
            p.flush();
        }
        for (int i = 0; i < sent.size(); i++) {
            Throwable cause = null;
            try {
                sent.get(i).get(60, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                cause = e.getCause();
            }
            if (i == bad) {
                check(badType.isInstance(cause) && String.valueOf(cause.getMessage()).contains(badText),
                        topic + " record " + i + " fails with " + badType.getSimpleName() + " \"" + badText + "\": got " + cause);
            } else {
                check(cause instanceof KafkaException && String.valueOf(cause.getMessage()).contains("part of a batch"),
                        topic + " record " + i + " fails as part of the batch: got " + cause);
            }
        }
    }

    static void roundTrip(String bootstrap, String topic, String codec) throws Exception {
        int n = 500;
        long base;
        try (KafkaProducer<byte[], byte[]> p = producer(bootstrap, codec, 20)) {
            List<Future<org.apache.kafka.clients.producer.RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                sent.add(p.send(new ProducerRecord<>(topic, 0, ("k" + i).getBytes(), ("value-" + codec + "-" + i).getBytes())));
            }
            p.flush();
            base = sent.get(0).get(60, TimeUnit.SECONDS).offset();
            for (Future<?> f : sent) {
                f.get(60, TimeUnit.SECONDS);
            }
        }
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seek(tp, base);
            long deadline = System.currentTimeMillis() + 60_000;
            while (got.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(java.time.Duration.ofMillis(500))) {
                    got.add(new String(r.value()));
                }
            }
        }
        boolean ok = got.size() >= n;
        for (int i = 0; ok && i < n; i++) {
            ok = got.get(i).equals("value-" + codec + "-" + i);
        }
        check(ok, topic + ": " + n + " records produced with " + codec + " read back in order (got " + got.size() + ")");
    }
}
