// The Java Admin client against kaflet: topics by name and by id, configs, offsets, the cluster.
// It prints what the broker answered as "key value..." lines; tests/integration/test_java_client.py
// asserts on them. Usage: AdminCheck <bootstrap> <topic prefix> <replication factor>
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        short rf = Short.parseShort(args[2]);
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(props);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        try (Admin admin = Admin.create(props)) {
            String paged = prefix + "-paged", single = prefix + "-single";
            CreateTopicsResult created = admin.createTopics(List.of(
                new NewTopic(paged, 3, rf).configs(Map.of("retention.ms", "3600000")),
                new NewTopic(single, 1, rf)));
            created.all().get();
            System.out.println("created " + paged + " " + created.topicId(paged).get());
            System.out.println("created " + single + " " + created.topicId(single).get());

            // By name (DescribeTopicPartitions, two partitions a page) and by id (Metadata by id).
            DescribeTopicsOptions options = new DescribeTopicsOptions().includeAuthorizedOperations(true)
                .partitionSizeLimitPerResponse(2);
            Map<String, TopicDescription> byName = untilDescribed(admin, List.of(paged, single), options);
            for (TopicDescription d : byName.values()) {
                System.out.println("byName " + describe(d));
            }
            List<Uuid> ids = byName.values().stream().map(TopicDescription::topicId).collect(Collectors.toList());
            Map<Uuid, TopicDescription> byId = admin.describeTopics(TopicCollection.ofTopicIds(ids), options)
                .allTopicIds().get();
            for (TopicDescription d : byId.values()) {
                System.out.println("byId " + describe(d));
            }
            try {
                admin.describeTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).allTopicIds().get();
                System.out.println("unknownId found");
            } catch (ExecutionException e) {
                System.out.println("unknownId " + e.getCause().getClass().getSimpleName());
            }

            ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, paged);
            Config topicConfig = admin.describeConfigs(List.of(topicResource)).all().get().get(topicResource);
            System.out.println("topicConfig retention.ms " + topicConfig.get("retention.ms").value() + " "
                + topicConfig.get("retention.ms").source());
            DescribeClusterResult cluster = admin.describeCluster();
            Collection<Node> nodes = cluster.nodes().get();
            String someBroker = String.valueOf(nodes.iterator().next().id());
            ConfigResource brokerResource = new ConfigResource(ConfigResource.Type.BROKER, someBroker);
            Config brokerConfig = admin.describeConfigs(List.of(brokerResource)).all().get().get(brokerResource);
            System.out.println("brokerConfig log.retention.hours " + brokerConfig.get("log.retention.hours").value());
            System.out.println("cluster " + cluster.clusterId().get() + " controller " + cluster.controller().get().id()
                + " nodes " + nodes.stream().map(n -> String.valueOf(n.id())).sorted().collect(Collectors.joining(",")));

            Properties pp = new Properties();
            pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            ClientLogin.apply(pp);
            try (KafkaProducer<String, String> producer =
                     new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < 5; i++) {
                    producer.send(new ProducerRecord<>(paged, 0, 1_000_000L + i * 10, "k" + i, "v" + i)).get();
                }
            }
            TopicPartition tp = new TopicPartition(paged, 0);
            System.out.println("offsets earliest " + offset(admin, tp, OffsetSpec.earliest())
                + " latest " + offset(admin, tp, OffsetSpec.latest())
                + " maxTimestamp " + offset(admin, tp, OffsetSpec.maxTimestamp())
                + " forTimestamp " + offset(admin, tp, OffsetSpec.forTimestamp(1_000_015L)));

            // Deleted by name and by id; each then unknown by name.
            admin.deleteTopics(List.of(paged)).all().get();
            admin.deleteTopics(TopicCollection.ofTopicIds(List.of(byName.get(single).topicId()))).all().get();
            for (String name : List.of(paged, single)) {
                System.out.println("deleted " + name + " " + untilGone(admin, name));
            }
        }
    }

    static Map<String, TopicDescription> untilDescribed(Admin admin, List<String> names, DescribeTopicsOptions options)
            throws Exception {
        long deadline = System.currentTimeMillis() + 20000;
        while (true) {
            try {
                return admin.describeTopics(TopicCollection.ofTopicNames(names), options).allTopicNames().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof UnknownTopicOrPartitionException) || System.currentTimeMillis() > deadline)
                    throw e;
                Thread.sleep(100);
            }
        }
    }

    static String untilGone(Admin admin, String name) throws Exception {
        long deadline = System.currentTimeMillis() + 20000;
        while (System.currentTimeMillis() < deadline) {
            try {
                admin.describeTopics(List.of(name)).allTopicNames().get();
                Thread.sleep(100);
            } catch (ExecutionException e) {
                return e.getCause().getClass().getSimpleName();
            }
        }
        return "still-there";
    }

    static long offset(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        ListOffsetsResult.ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get();
        return info.offset();
    }

    // "<name> <id> internal=<b> ops=<sorted ops> partitions=<p>:<leader>:<replicas>:<isr>;..."
    static String describe(TopicDescription d) {
        List<String> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            parts.add(p.partition() + ":" + (p.leader() == null ? -1 : p.leader().id()) + ":" + ids(p.replicas())
                + ":" + ids(p.isr()));
        }
        Set<String> ops = new TreeSet<>();
        if (d.authorizedOperations() != null) d.authorizedOperations().forEach(op -> ops.add(op.name()));
        return d.name() + " " + d.topicId() + " internal=" + d.isInternal() + " ops=" + String.join(",", ops)
            + " partitions=" + String.join(";", parts);
    }

    static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> String.valueOf(n.id())).collect(Collectors.joining(","));
    }
}
