// The Java transactional producer against kaflet: committed and aborted transactions, a
// consume-transform-produce step whose input offsets commit with its output
// (sendOffsetsToTransaction), an aborted one whose offsets do not, and fencing by a second
// producer with the same transactional.id. read_committed and read_uncommitted consumers then read
// the output. It prints what happened as "key value..." lines;
// tests/support/java.py asserts on them.
// Usage: TransactionalCopy <bootstrap> <name prefix> <replication factor>
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionalCopy {
    static final int INPUT = 30;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        short rf = Short.parseShort(args[2]);
        String in = prefix + "-in", out = prefix + "-out", group = prefix + "-copier", txnId = prefix + "-txn";
        try (Admin admin = Admin.create(ClientLogin.admin(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(in, 3, rf), new NewTopic(out, 3, rf))).all().get();
            try (KafkaProducer<String, String> plain = producer(bootstrap, null)) {
                for (int i = 0; i < INPUT; i++) plain.send(new ProducerRecord<>(in, "k" + i, "in-" + i));
                plain.flush();
            }

            Properties cp = consumerProps(bootstrap, "read_committed");
            cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            try (KafkaProducer<String, String> producer = producer(bootstrap, txnId);
                 KafkaConsumer<String, String> consumer =
                     new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
                producer.initTransactions();
                send(producer, out, "committed-first", 10);
                producer.commitTransaction();
                send(producer, out, "aborted-first", 10);
                producer.flush();  // written, then aborted
                producer.abortTransaction();

                // Consume everything, write it transformed, commit the input offsets with the output.
                consumer.subscribe(List.of(in));
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 20000;
                while (batch.size() < INPUT && System.currentTimeMillis() < deadline) {
                    consumer.poll(Duration.ofMillis(200)).forEach(batch::add);
                }
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                producer.beginTransaction();
                for (ConsumerRecord<String, String> r : batch) {
                    producer.send(new ProducerRecord<>(out, r.key(), "copied-" + r.value()));
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                producer.commitTransaction();
                System.out.println("copied " + batch.size());

                // An aborted step: its output is never read committed and its offsets (rewinding
                // the group to 0) are not applied.
                Map<TopicPartition, OffsetAndMetadata> rewind = new HashMap<>();
                next.keySet().forEach(tp -> rewind.put(tp, new OffsetAndMetadata(0)));
                send(producer, out, "aborted-copy", 5);
                producer.sendOffsetsToTransaction(rewind, consumer.groupMetadata());
                // Flushed first: an abort drops the batches not yet sent, and the check below
                // wants the aborted records in the log.
                producer.flush();
                producer.abortTransaction();

                // A second producer with the same transactional.id fences this one.
                send(producer, out, "fenced", 3);
                producer.flush();
                try (KafkaProducer<String, String> successor = producer(bootstrap, txnId)) {
                    successor.initTransactions();
                    try {
                        producer.commitTransaction();
                        System.out.println("fenced no");
                    } catch (Exception e) {
                        System.out.println("fenced " + e.getClass().getSimpleName());
                    }
                    send(successor, out, "successor", 4);
                    successor.commitTransaction();
                }
            }

            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get();
            System.out.println("groupOffsets " + committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum());
        }
        System.out.println("readCommitted " + summary(readAll(bootstrap, out, "read_committed")));
        System.out.println("readUncommitted " + summary(readAll(bootstrap, out, "read_uncommitted")));
    }

    static void send(KafkaProducer<String, String> producer, String topic, String label, int n) {
        producer.beginTransaction();
        for (int i = 0; i < n; i++) producer.send(new ProducerRecord<>(topic, label + i, label + "-" + i));
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(pp);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        if (transactionalId != null) pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        return new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer());
    }

    static Properties consumerProps(String bootstrap, String isolation) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(cp);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return cp;
    }

    // Every record of the topic's partitions up to their end (the last stable offset when read committed).
    static List<String> readAll(String bootstrap, String topic, String isolation) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, isolation),
                 new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps = consumer.partitionsFor(topic).stream()
                .map(p -> new TopicPartition(topic, p.partition())).collect(Collectors.toList());
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 20000;
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))
                   && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) values.add(r.value());
            }
        }
        return values;
    }

    // "<total> <label>=<count>,..." with labels sorted; values are "<label>-<n>".
    static String summary(List<String> values) {
        Map<String, Integer> counts = new java.util.TreeMap<>();
        for (String v : values) counts.merge(v.substring(0, v.lastIndexOf('-')), 1, Integer::sum);
        return values.size() + " distinct=" + new TreeSet<>(values).size() + " " + counts.entrySet().stream()
            .map(e -> e.getKey() + "=" + e.getValue()).collect(Collectors.joining(","));
    }
}
