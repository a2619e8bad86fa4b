// Static membership (group.instance.id) with the classic protocol against kaflet: three static
// members of a range group settle; one is closed (a static member sends no LeaveGroup) and started
// again with the same instance id within the session timeout; it must get its partitions back
// with no rebalance of the others. A dynamic member joining afterwards does rebalance them, which
// shows the check can see a rebalance; a second consumer with a live member's instance id fences
// that member. One thread polls every consumer in turn. It prints what
// happened as "key value..." lines; tests/integration/test_java_client_wide.py asserts on them.
// Usage: StaticMembers <bootstrap> <name prefix>
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class StaticMembers {
    static final int PARTITIONS = 6;

    /** One consumer and the rebalance callbacks it has seen. */
    static final class Member {
        final KafkaConsumer<String, String> consumer;
        final AtomicInteger callbacks = new AtomicInteger();

        Member(String bootstrap, String group, String instanceId, String topic) {
            Properties cp = new Properties();
            cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            ClientLogin.apply(cp);
            cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            if (instanceId != null) cp.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
            cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
            cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            cp.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, RangeAssignor.class.getName());
            cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            consumer = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer());
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    callbacks.incrementAndGet();
                }
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    callbacks.incrementAndGet();
                }
            });
        }

        String owned() {
            return consumer.assignment().stream().map(tp -> String.valueOf(tp.partition())).sorted()
                .collect(Collectors.joining(","));
        }

        int generation() {
            return consumer.groupMetadata().generationId();
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        String topic = prefix + "-static", group = prefix + "-group";
        try (Admin admin = Admin.create(ClientLogin.admin(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
            List<Member> members = new ArrayList<>();
            for (int i = 0; i < 3; i++) members.add(new Member(bootstrap, group, prefix + "-i" + i, topic));
            pollUntilSettled(members, 3);
            System.out.println("settled gen=" + members.get(0).generation());
            for (int i = 0; i < 3; i++) System.out.println("owned " + i + " " + members.get(i).owned());
            String before = members.get(2).owned(), oldMemberId = members.get(2).consumer.groupMetadata().memberId();
            int generation = members.get(0).generation();
            members.forEach(m -> m.callbacks.set(0));

            members.get(2).consumer.close();
            members.set(2, new Member(bootstrap, group, prefix + "-i2", topic));
            long deadline = System.currentTimeMillis() + 20000;
            while (members.get(2).consumer.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                pollAll(members);
            }
            // Long enough for several heartbeats: a rebalance would reach the others by now.
            for (int round = 0; round < 15; round++) pollAll(members);
            Member back = members.get(2);
            System.out.println("restarted sameAssignment=" + back.owned().equals(before) + " newMemberId="
                + !back.consumer.groupMetadata().memberId().equals(oldMemberId) + " sameGeneration="
                + (back.generation() == generation));
            System.out.println("others callbacks=" + members.get(0).callbacks.get() + "," + members.get(1).callbacks.get()
                + " sameGeneration=" + (members.get(0).generation() == generation
                                        && members.get(1).generation() == generation));
            describe(admin, group, "describedAfterRestart");

            members.add(new Member(bootstrap, group, null, topic));
            pollUntilSettled(members, 4);
            System.out.println("dynamicJoined rebalanced=" + (members.get(0).generation() > generation)
                + " ownedCounts=" + members.stream().map(m -> String.valueOf(m.consumer.assignment().size()))
                    .sorted().collect(Collectors.joining(",")));

            // A second consumer with a live member's instance id takes its place and its partitions;
            // the first is fenced.
            Member first = members.remove(0);
            String firstOwned = first.owned();
            Member twin = new Member(bootstrap, group, prefix + "-i0", topic);
            members.add(twin);
            deadline = System.currentTimeMillis() + 20000;
            while (twin.consumer.assignment().isEmpty() && System.currentTimeMillis() < deadline) pollAll(members);
            String fenced = "notFenced";
            deadline = System.currentTimeMillis() + 10000;
            try {
                while (System.currentTimeMillis() < deadline) {
                    first.consumer.poll(Duration.ofMillis(100));
                    pollAll(members);
                }
            } catch (KafkaException e) {
                fenced = e.getClass().getSimpleName();
            }
            System.out.println("twin sameAssignment=" + twin.owned().equals(firstOwned) + " first=" + fenced);
            try {
                first.consumer.close();
            } catch (KafkaException e) {
                // A fenced member may report the fencing again as it closes.
            }
            for (Member m : members) m.consumer.close();
        }
    }

    static void pollAll(List<Member> members) {
        for (Member m : members) m.consumer.poll(Duration.ofMillis(100));
    }

    // Polls until every partition is owned once, all members at one generation, for 10 rounds running.
    static void pollUntilSettled(List<Member> members, int count) {
        long deadline = System.currentTimeMillis() + 25000;
        int steady = 0;
        while (steady < 10) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("group did not settle");
            pollAll(members);
            TreeSet<Integer> gens = new TreeSet<>();
            int owned = 0;
            TreeSet<TopicPartition> all = new TreeSet<>((a, b) -> Integer.compare(a.partition(), b.partition()));
            for (Member m : members) {
                gens.add(m.generation());
                owned += m.consumer.assignment().size();
                all.addAll(m.consumer.assignment());
            }
            boolean settled = gens.size() == 1 && owned == PARTITIONS && all.size() == PARTITIONS
                && members.stream().noneMatch(m -> m.consumer.assignment().isEmpty()) && members.size() == count;
            steady = settled ? steady + 1 : 0;
        }
    }

    static void describe(Admin admin, String group, String key) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        Map<String, String> byInstance = new TreeMap<>();
        for (MemberDescription m : d.members()) {
            byInstance.put(m.groupInstanceId().orElse("none"), m.assignment().topicPartitions().stream()
                .map(tp -> String.valueOf(tp.partition())).sorted().collect(Collectors.joining(",")));
        }
        System.out.println(key + " state=" + d.groupState() + " members=" + byInstance.entrySet().stream()
            .map(e -> e.getKey() + ":" + e.getValue()).collect(Collectors.joining(";")));
    }
}
