// The Java consumer with KIP-848's protocol (group.protocol=consumer) against kaflet: a producer
// keeps writing COUNT records to a 6-partition topic while MEMBERS consumers join one by one,
// each committing after every poll. Each member's rebalance callbacks go to one ownership map
// that notes any partition given while another member holds it. Prints "key value..." lines;
// tests/integration/test_java_client.py asserts on them.
// Usage: ConsumerProtocol <bootstrap> <topic> <members> <count>
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConsumerProtocol {
    static final Map<Integer, Integer> OWNER = new ConcurrentHashMap<>();
    static final List<String> VIOLATIONS = java.util.Collections.synchronizedList(new ArrayList<>());
    static final Map<String, Integer> SEEN = new ConcurrentHashMap<>();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int members = Integer.parseInt(args[2]), count = Integer.parseInt(args[3]);
        String group = topic + "-group";
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(ap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 6, (short) 1))).all().get();
            Thread producer = new Thread(() -> produce(bootstrap, topic, count));
            producer.start();
            AtomicBoolean stop = new AtomicBoolean();
            List<Thread> threads = new ArrayList<>();
            List<Set<Integer>> owned = new ArrayList<>();
            for (int m = 0; m < members; m++) {
                Set<Integer> mine = ConcurrentHashMap.newKeySet();
                owned.add(mine);
                int member = m;
                Thread t = new Thread(() -> consume(bootstrap, group, topic, member, mine, stop));
                t.start();
                threads.add(t);
                Thread.sleep(3000);
            }
            producer.join();
            long deadline = System.currentTimeMillis() + 60000;
            while (SEEN.size() < count && System.currentTimeMillis() < deadline) Thread.sleep(100);
            // Everyone has settled: describe the group as the Admin client sees it.
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
            System.out.println("described " + d.type() + " " + d.groupState() + " " + d.members().size());
            for (int m = 0; m < members; m++) {
                System.out.println("owned " + m + " " + owned.get(m).stream().sorted().map(String::valueOf)
                    .collect(Collectors.joining(",")));
            }
            stop.set(true);
            for (Thread t : threads) t.join();
        }
        int duplicates = (int) SEEN.values().stream().filter(n -> n > 1).count();
        System.out.println("consumed " + SEEN.size() + " duplicates " + duplicates);
        System.out.println("violations " + VIOLATIONS.size() + " " + String.join(";", VIOLATIONS));
    }

    static void produce(String bootstrap, String topic, int count) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(pp);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, i % 6, "k" + i, "v" + i));
                if (i % 50 == 0) Thread.sleep(20);
            }
            producer.flush();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        System.out.println("produced " + count);
    }

    static void consume(String bootstrap, String group, String topic, int member, Set<Integer> mine,
                        AtomicBoolean stop) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(cp);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-" + member);
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions) {
                        mine.remove(tp.partition());
                        OWNER.remove(tp.partition(), member);
                    }
                    System.out.println("revoked " + member + " " + names(partitions));
                }
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions) {
                        Integer other = OWNER.put(tp.partition(), member);
                        if (other != null && other != member) {
                            VIOLATIONS.add(tp.partition() + ":" + other + "->" + member);
                        }
                        mine.add(tp.partition());
                    }
                    System.out.println("assigned " + member + " " + names(partitions));
                }
            });
            while (!stop.get()) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    SEEN.merge(r.value(), 1, Integer::sum);
                }
                consumer.commitSync();
            }
        }
    }

    static String names(Collection<TopicPartition> partitions) {
        TreeSet<Integer> sorted = new TreeSet<>();
        partitions.forEach(tp -> sorted.add(tp.partition()));
        return sorted.isEmpty() ? "-" : sorted.stream().map(String::valueOf).collect(Collectors.joining(","));
    }
}
