import java.io.FileInputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client over a TLS listener, with the security settings of a client.properties
 * file: creates a topic, produces records with an idempotent acks=all producer, reads them
 * back, and prints the brokers the cluster describes (host:port, as the listener the client
 * came through advertises them). Prints "TlsCheck OK" at the end; any failure is an
 * exception and a non-zero exit.
 *
 * Usage: TlsCheck BOOTSTRAP CONFIG_FILE TOPIC RECORDS
 */
public class TlsCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        Properties base = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            base.load(in);
        }
        base.put("bootstrap.servers", bootstrap);
        String topic = args[2];
        int records = Integer.parseInt(args[3]);

        List<String> nodes = new ArrayList<>();
        try (Admin admin = Admin.create(base)) {
            for (Node n : admin.describeCluster().nodes().get(60, TimeUnit.SECONDS)) {
                nodes.add(n.host() + ":" + n.port());
            }
            Collections.sort(nodes);
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(60, TimeUnit.SECONDS);
        }

        Properties pp = new Properties();
        pp.putAll(base);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < records; i++) {
                p.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get(60, TimeUnit.SECONDS);
            }
        }

        Properties cp = new Properties();
        cp.putAll(base);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        int seen = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (seen < records && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (!r.value().equals("v" + seen) || r.offset() != seen) {
                        throw new IllegalStateException("record " + seen + " came back as " + r.value() + " at " + r.offset());
                    }
                    seen++;
                }
            }
        }
        if (seen != records) {
            throw new IllegalStateException("read back " + seen + " of " + records + " records");
        }
        System.out.println("TlsCheck OK: " + records + " records, nodes=" + String.join(",", nodes));
    }
}
