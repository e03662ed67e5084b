import java.io.FileInputStream;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * What the Java client is allowed to do, with the security settings of a client.properties
 * file: produces one record to TOPIC (idempotent, acks=all), then reads in consumer group
 * GROUP until it gets a record. Prints one line per step, "produce: OK" or "produce: " and
 * the simple name of the exception that stopped it (TopicAuthorizationException, ...), and
 * the same for "consume:". Exits 0 whatever the outcomes; the caller checks them.
 *
 * Usage: AclCheck BOOTSTRAP CONFIG_FILE TOPIC GROUP
 */
public class AclCheck {
    public static void main(String[] args) throws Exception {
        Properties base = new Properties();
        try (FileInputStream in = new FileInputStream(args[1])) {
            base.load(in);
        }
        base.put("bootstrap.servers", args[0]);
        String topic = args[2];
        String group = args[3];

        Properties pp = new Properties();
        pp.putAll(base);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        String produced;
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            p.send(new ProducerRecord<>(topic, "k", "from-java")).get(30, TimeUnit.SECONDS);
            produced = "OK";
        } catch (ExecutionException e) {
            produced = e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            produced = e.getClass().getSimpleName();
        }
        System.out.println("produce: " + produced);

        Properties cp = new Properties();
        cp.putAll(base);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        String consumed = "no record within 30 s";
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (System.nanoTime() < deadline) {
                ConsumerRecords<String, String> got = c.poll(Duration.ofMillis(500));
                if (!got.isEmpty()) {
                    c.commitSync();
                    consumed = "OK";
                    break;
                }
            }
        } catch (Exception e) {
            consumed = e.getClass().getSimpleName();
        }
        System.out.println("consume: " + consumed);
    }
}
