// The Java Admin client's views of a broker's state against kaflet: log dirs, producers, open
// transactions, a group's committed offsets (list, alter, delete), leader elections and
// incremental config changes. It prints what the broker answered as "key value..." lines;
// tests/integration/test_java_client_wide.py asserts on them.
// Usage: AdminState <bootstrap> <name prefix>
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminState {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        String topic = prefix + "-state";
        TopicPartition p0 = new TopicPartition(topic, 0), p1 = new TopicPartition(topic, 1);
        try (Admin admin = Admin.create(ClientLogin.admin(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            int broker = admin.describeCluster().controller().get().id();
            try (KafkaProducer<String, String> producer = producer(bootstrap, null)) {
                // One send at a time: five batches, sequences 0 to 4.
                for (int i = 0; i < 5; i++) producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)).get();
            }
            logDirs(admin, broker, p0, p1);
            for (ProducerState s : admin.describeProducers(List.of(p0)).partitionResult(p0).get().activeProducers()) {
                System.out.println("producer " + p0 + " id=" + (s.producerId() >= 0) + " epoch=" + s.producerEpoch()
                    + " lastSequence=" + s.lastSequence() + " inTransaction=" + s.currentTransactionStartOffset().isPresent());
            }
            transactions(admin, bootstrap, prefix, p1);
            groupOffsets(admin, bootstrap, prefix, p0, p1);
            Map<TopicPartition, Optional<Throwable>> elected = admin.electLeaders(ElectionType.PREFERRED,
                Set.of(p0, new TopicPartition(prefix + "-missing", 0))).partitions().get();
            TreeMap<String, String> outcomes = new TreeMap<>();
            elected.forEach((tp, error) -> outcomes.put(tp.toString(),
                error.map(t -> t.getClass().getSimpleName()).orElse("elected")));
            outcomes.forEach((tp, outcome) -> System.out.println("elect " + tp + " " + outcome));
            configs(admin, topic);
        }
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(pp);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        if (transactionalId != null) pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        return new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer());
    }

    static void logDirs(Admin admin, int broker, TopicPartition p0, TopicPartition p1) throws Exception {
        Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(broker)).allDescriptions().get().get(broker);
        System.out.println("logDirs " + dirs.size());
        for (Map.Entry<String, LogDirDescription> d : dirs.entrySet()) {
            LogDirDescription desc = d.getValue();
            System.out.println("logDir error=" + (desc.error() == null ? "none" : desc.error().getClass().getSimpleName())
                + " total=" + (desc.totalBytes().orElse(-1) > 0) + " usable=" + (desc.usableBytes().orElse(-1) > 0));
            for (TopicPartition tp : List.of(p0, p1)) {
                ReplicaInfo r = desc.replicaInfos().get(tp);
                if (r != null) {
                    System.out.println("replica " + tp + " size=" + r.size() + " lag=" + r.offsetLag()
                        + " future=" + r.isFuture());
                }
            }
        }
    }

    static void transactions(Admin admin, String bootstrap, String prefix, TopicPartition tp) throws Exception {
        String txnId = prefix + "-txn";
        try (KafkaProducer<String, String> producer = producer(bootstrap, txnId)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) producer.send(new ProducerRecord<>(tp.topic(), tp.partition(), "t" + i, "t" + i));
            producer.flush();
            ListTransactionsOptions ongoing = new ListTransactionsOptions().filterStates(List.of(TransactionState.ONGOING));
            Collection<TransactionListing> listed = admin.listTransactions(ongoing).all().get();
            long producerId = -1;
            for (TransactionListing l : listed) {
                if (l.transactionalId().equals(txnId)) {
                    producerId = l.producerId();
                    System.out.println("listed " + l.transactionalId() + " " + l.state());
                }
            }
            TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId).get();
            System.out.println("described " + d.state() + " sameProducer=" + (d.producerId() == producerId)
                + " timeoutMs=" + d.transactionTimeoutMs() + " started=" + d.transactionStartTimeMs().isPresent()
                + " partitions=" + d.topicPartitions().stream().map(TopicPartition::toString).sorted()
                    .collect(Collectors.joining(",")));
            for (ProducerState s : admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers()) {
                System.out.println("txnProducer sameProducer=" + (s.producerId() == producerId)
                    + " txnStart=" + s.currentTransactionStartOffset().orElse(-1));
            }
            producer.commitTransaction();
            TransactionDescription after = admin.describeTransactions(List.of(txnId)).description(txnId).get();
            boolean stillListed = admin.listTransactions(ongoing).all().get().stream()
                .anyMatch(l -> l.transactionalId().equals(txnId));
            System.out.println("committed " + after.state() + " partitions=" + after.topicPartitions().size()
                + " stillOngoing=" + stillListed);
            // A filter by producer id finds it in any state.
            Collection<TransactionListing> byProducer = admin.listTransactions(
                new ListTransactionsOptions().filterProducerIds(Set.of(producerId))).all().get();
            System.out.println("byProducerId " + byProducer.stream().map(TransactionListing::transactionalId)
                .collect(Collectors.joining(",")));
        }
    }

    static void groupOffsets(Admin admin, String bootstrap, String prefix, TopicPartition p0, TopicPartition p1)
            throws Exception {
        String group = prefix + "-group";
        admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(2, "two"),
                                                      p1, new OffsetAndMetadata(1, "one"))).all().get();
        System.out.println("groupOffsets " + offsets(admin, group));
        admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all().get();
        System.out.println("groupOffsetsAfterDelete " + offsets(admin, group));
        // While a member is subscribed to the topic its offsets stay; Kafka refuses the deletion.
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(cp);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(p1.topic()));
            long deadline = System.currentTimeMillis() + 20000;
            while (consumer.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(100));
            }
            OffsetAndMetadata seen = consumer.committed(Set.of(p1)).get(p1);
            System.out.println("memberSees " + p1 + "=" + seen.offset() + ":" + seen.metadata() + " assigned="
                + consumer.assignment().size());
            try {
                admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all().get();
                System.out.println("deleteWhileSubscribed ok");
            } catch (ExecutionException e) {
                System.out.println("deleteWhileSubscribed " + e.getCause().getClass().getSimpleName());
            }
            try {
                admin.alterConsumerGroupOffsets(group, Map.of(p1, new OffsetAndMetadata(0))).all().get();
                System.out.println("alterWhileActive ok");
            } catch (ExecutionException e) {
                System.out.println("alterWhileActive " + e.getCause().getClass().getSimpleName());
            }
        }
    }

    // "<partition>=<offset>:<metadata>,..." sorted.
    static String offsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> m = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
            .get();
        TreeSet<String> out = new TreeSet<>();
        m.forEach((tp, o) -> out.add(tp + "=" + o.offset() + ":" + o.metadata()));
        return out.isEmpty() ? "none" : String.join(",", out);
    }

    static void configs(Admin admin, String topic) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        admin.incrementalAlterConfigs(Map.of(r, List.of(
            new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND),
            new AlterConfigOp(new ConfigEntry("max.message.bytes", "200000"), AlterConfigOp.OpType.SET)))).all().get();
        System.out.println("configSet " + config(admin, r));
        admin.incrementalAlterConfigs(Map.of(r, List.of(
            new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT),
            new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all().get();
        System.out.println("configChanged " + config(admin, r));
        for (AlterConfigOp bad : List.of(
                new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", "1"), AlterConfigOp.OpType.APPEND),
                new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET))) {
            try {
                admin.incrementalAlterConfigs(Map.of(r, List.of(bad))).all().get();
                System.out.println("configRefused " + bad.configEntry().name() + ":" + bad.opType() + " accepted");
            } catch (ExecutionException e) {
                System.out.println("configRefused " + bad.configEntry().name() + ":" + bad.opType() + " "
                    + e.getCause().getClass().getSimpleName());
            }
        }
        System.out.println("configAfterRefusals " + config(admin, r));
    }

    // "<name>=<value>:<source>,..." for the three configs the program changes.
    static String config(Admin admin, ConfigResource r) throws Exception {
        Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
        return List.of("cleanup.policy", "max.message.bytes", "retention.ms").stream()
            .map(n -> n + "=" + c.get(n).value() + ":" + c.get(n).source()).collect(Collectors.joining(","));
    }
}
