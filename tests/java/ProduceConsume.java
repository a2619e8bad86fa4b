// The Java producer and consumer against kaflet: an idempotent producer writes COUNT records with
// each codec (one topic of 3 partitions per codec), then two consumers of one classic group with
// the given assignor read them all back, committing as they go. It prints what happened as
// "key value..." lines; tests/integration/test_java_client.py asserts on them.
// Usage: ProduceConsume <bootstrap> <topic prefix> <range|cooperative-sticky> <count>
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ProduceConsume {
    static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1], assignor = args[2];
        int count = Integer.parseInt(args[3]);
        List<String> topics = CODECS.stream().map(c -> prefix + "-" + c).collect(Collectors.toList());
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(ap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(topics.stream().map(t -> new NewTopic(t, 3, (short) 1)).collect(Collectors.toList()))
                .all().get();
        }
        for (String codec : CODECS) {
            Properties pp = new Properties();
            pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            ClientLogin.apply(pp);
            pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            pp.put(ProducerConfig.ACKS_CONFIG, "all");
            pp.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
            try (KafkaProducer<String, String> producer =
                     new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(prefix + "-" + codec, "k" + i, codec + "-" + i));
                }
                producer.flush();
            }
            System.out.println("produced " + prefix + "-" + codec + " " + count);
        }

        String strategy = assignor.equals("range") ? RangeAssignor.class.getName()
            : CooperativeStickyAssignor.class.getName();
        Map<String, List<String>> values = new ConcurrentHashMap<>();
        topics.forEach(t -> values.put(t, java.util.Collections.synchronizedList(new ArrayList<>())));
        AtomicInteger seen = new AtomicInteger();
        int total = count * CODECS.size();
        List<Thread> members = new ArrayList<>();
        List<Set<TopicPartition>> owned = new ArrayList<>();
        // Both members note what they own before either leaves (a leave rebalances the other).
        CountDownLatch done = new CountDownLatch(2);
        for (int m = 0; m < 2; m++) {
            Set<TopicPartition> atEnd = ConcurrentHashMap.newKeySet();
            owned.add(atEnd);
            int member = m;
            Thread t = new Thread(() -> consume(bootstrap, prefix + "-group", strategy, topics, member, atEnd, values,
                                               seen, total, done));
            t.start();
            members.add(t);
        }
        for (Thread t : members) t.join();
        for (String t : topics) {
            List<String> got = new ArrayList<>(values.get(t));
            TreeSet<String> distinct = new TreeSet<>(got);
            MessageDigest sha = MessageDigest.getInstance("SHA-256");
            sha.update(String.join("\n", distinct).getBytes(StandardCharsets.UTF_8));
            System.out.println("consumed " + t + " " + got.size() + " distinct " + distinct.size() + " sha256 "
                + HexFormat.of().formatHex(sha.digest()));
        }
        for (int m = 0; m < owned.size(); m++) {
            System.out.println("owned " + m + " " + owned.get(m).stream().map(TopicPartition::toString).sorted()
                .collect(Collectors.joining(",")));
        }
    }

    static void consume(String bootstrap, String group, String strategy, List<String> topics, int member,
                        Set<TopicPartition> atEnd, Map<String, List<String>> values, AtomicInteger seen, int total,
                        CountDownLatch done) {
        Set<TopicPartition> mine = ConcurrentHashMap.newKeySet();
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(cp);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, strategy);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "member-" + member);
        long deadline = System.currentTimeMillis() + 25000;
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(topics, new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    mine.removeAll(partitions);
                    System.out.println("revoked " + member + " " + partitions.size());
                }
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    mine.addAll(partitions);
                    System.out.println("assigned " + member + " " + partitions.size());
                }
            });
            while (seen.get() < total && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    values.get(r.topic()).add(r.value());
                    seen.incrementAndGet();
                }
                consumer.commitSync();
            }
            atEnd.addAll(mine);
            done.countDown();
            try {
                done.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
