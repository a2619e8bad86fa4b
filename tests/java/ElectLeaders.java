// Admin.electLeaders against a kaflet cluster: a preferred election for a partition led by a
// replica other than its first, and for one already led by its first; an unclean election where
// the leader is alive. It prints the leaders before and after and each partition's outcome as
// "key value..." lines; tests/cluster/test_java_client_cluster.py asserts on them.
// Usage: ElectLeaders <bootstrap> <topic of two partitions>
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class ElectLeaders {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        TopicPartition p0 = new TopicPartition(topic, 0), p1 = new TopicPartition(topic, 1);
        try (Admin admin = Admin.create(ClientLogin.admin(bootstrap))) {
            System.out.println("before " + leaders(admin, topic));
            print("preferred", admin.electLeaders(ElectionType.PREFERRED, Set.of(p0, p1)).partitions().get());
            // The answer comes once the controller has decided; the brokers learn it just after.
            // One description is both tested and printed: two calls may reach two brokers, one of
            // them not yet told.
            long deadline = System.currentTimeMillis() + 15000;
            TopicDescription after = describe(admin, topic);
            while (!onFirstReplicas(after) && System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
                after = describe(admin, topic);
            }
            System.out.println("after " + leaders(after));
            print("unclean", admin.electLeaders(ElectionType.UNCLEAN, Set.of(p0)).partitions().get());
        }
    }

    static void print(String kind, Map<TopicPartition, Optional<Throwable>> outcomes) {
        TreeMap<String, String> sorted = new TreeMap<>();
        outcomes.forEach((tp, error) -> sorted.put(tp.toString(),
            error.map(t -> t.getClass().getSimpleName()).orElse("elected")));
        sorted.forEach((tp, outcome) -> System.out.println(kind + " " + tp + " " + outcome));
    }

    static TopicDescription describe(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
    }

    // "<partition>:<leader>/<first replica>,..."
    static String leaders(Admin admin, String topic) throws Exception {
        return leaders(describe(admin, topic));
    }

    static String leaders(TopicDescription description) {
        return description.partitions().stream()
            .map(p -> p.partition() + ":" + p.leader().id() + "/" + p.replicas().get(0).id())
            .collect(Collectors.joining(","));
    }

    static boolean onFirstReplicas(TopicDescription description) {
        for (TopicPartitionInfo p : description.partitions()) {
            if (p.leader() == null || p.leader().id() != p.replicas().get(0).id()) return false;
        }
        return true;
    }
}
