// The Java Admin client's security calls against kaflet: ACLs (create, describe and delete with
// filters), client quotas, SCRAM credentials, then producers logging in with SCRAM-SHA-256 and
// SCRAM-SHA-512 using the credentials it just made. The Admin logs in as a super user
// (ClientLogin). It prints what the broker answered as "key value..." lines;
// tests/integration/test_java_client_wide.py asserts on them.
// Usage: AdminSecurity <bootstrap> <name prefix>
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminSecurity {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        try (Admin admin = Admin.create(ClientLogin.admin(bootstrap))) {
            acls(admin, prefix);
            quotas(admin, prefix);
            scram(admin, bootstrap, prefix);
        }
    }

    static void acls(Admin admin, String prefix) throws Exception {
        String topic = prefix + "-t", alice = "User:" + prefix + "-alice", bob = "User:" + prefix + "-bob";
        admin.createAcls(List.of(
            new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                           new AccessControlEntry(alice, "*", AclOperation.READ, AclPermissionType.ALLOW)),
            new AclBinding(new ResourcePattern(ResourceType.TOPIC, prefix + "-", PatternType.PREFIXED),
                           new AccessControlEntry(alice, "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)),
            new AclBinding(new ResourcePattern(ResourceType.GROUP, prefix + "-g", PatternType.LITERAL),
                           new AccessControlEntry(bob, "10.0.0.1", AclOperation.READ, AclPermissionType.DENY))))
            .all().get();
        // MATCH: the literal ACL on the name and the prefixed one that covers it.
        System.out.println("aclMatch " + acls(admin, new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH), AccessControlEntryFilter.ANY)));
        System.out.println("aclPrefixed " + acls(admin, new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.ANY, null, PatternType.PREFIXED),
            new AccessControlEntryFilter(alice, null, AclOperation.ANY, AclPermissionType.ANY))));
        System.out.println("aclDeny " + acls(admin, new AclBindingFilter(ResourcePatternFilter.ANY,
            new AccessControlEntryFilter(bob, "10.0.0.1", AclOperation.ANY, AclPermissionType.DENY))));
        Collection<AclBinding> deleted = admin.deleteAcls(List.of(new AclBindingFilter(
            new ResourcePatternFilter(ResourceType.TOPIC, topic, PatternType.MATCH),
            new AccessControlEntryFilter(alice, null, AclOperation.ANY, AclPermissionType.ALLOW)))).all().get();
        System.out.println("aclDeleted " + render(deleted));
        System.out.println("aclLeftForAlice " + acls(admin, new AclBindingFilter(ResourcePatternFilter.ANY,
            new AccessControlEntryFilter(alice, null, AclOperation.ANY, AclPermissionType.ANY))));
        System.out.println("aclLeftForBob " + acls(admin, new AclBindingFilter(ResourcePatternFilter.ANY,
            new AccessControlEntryFilter(bob, null, AclOperation.ANY, AclPermissionType.ANY))));
    }

    static String acls(Admin admin, AclBindingFilter filter) throws Exception {
        return render(admin.describeAcls(filter).values().get());
    }

    // "<type>:<pattern>:<name>:<principal>:<host>:<op>:<permission>,..." sorted; "none" for no ACL.
    static String render(Collection<AclBinding> bindings) {
        TreeSet<String> out = new TreeSet<>();
        for (AclBinding b : bindings) {
            out.add(b.pattern().resourceType() + ":" + b.pattern().patternType() + ":" + b.pattern().name() + ":"
                + b.entry().principal() + ":" + b.entry().host() + ":" + b.entry().operation() + ":"
                + b.entry().permissionType());
        }
        return out.isEmpty() ? "none" : String.join(",", out);
    }

    static void quotas(Admin admin, String prefix) throws Exception {
        String user = prefix + "-quser", client = prefix + "-client";
        ClientQuotaEntity userAndClient = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, user,
                                                                       ClientQuotaEntity.CLIENT_ID, client));
        ClientQuotaEntity userOnly = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, user));
        admin.alterClientQuotas(List.of(
            new ClientQuotaAlteration(userAndClient, List.of(
                new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                new ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0))),
            new ClientQuotaAlteration(userOnly, List.of(
                new ClientQuotaAlteration.Op("request_percentage", 50.0))))).all().get();
        ClientQuotaFilter ofUser = ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntity(
            ClientQuotaEntity.USER, user)));
        System.out.println("quotas " + quotas(admin, ofUser));
        System.out.println("quotasUserOnly " + quotas(admin, ClientQuotaFilter.containsOnly(List.of(
            ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, user)))));
        // A null value removes the quota; an entity with none left is no longer described.
        admin.alterClientQuotas(List.of(
            new ClientQuotaAlteration(userAndClient, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", null))),
            new ClientQuotaAlteration(userOnly, List.of(new ClientQuotaAlteration.Op("request_percentage", null)))))
            .all().get();
        System.out.println("quotasAfterRemoval " + quotas(admin, ofUser));
        try {
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(userOnly, List.of(
                new ClientQuotaAlteration.Op("no_such_quota", 1.0))))).all().get();
            System.out.println("badQuota accepted");
        } catch (ExecutionException e) {
            System.out.println("badQuota " + e.getCause().getClass().getSimpleName());
        }
    }

    // "<entity>=<key>=<value>;..." sorted, entities as "user:<u>/client-id:<c>"; "none" when empty.
    static String quotas(Admin admin, ClientQuotaFilter filter) throws Exception {
        TreeSet<String> out = new TreeSet<>();
        for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : admin.describeClientQuotas(filter).entities().get()
                 .entrySet()) {
            String entity = new TreeMap<>(e.getKey().entries()).entrySet().stream()
                .map(kv -> kv.getKey() + ":" + kv.getValue()).collect(Collectors.joining("/"));
            for (Map.Entry<String, Double> q : e.getValue().entrySet()) {
                out.add(entity + "=" + q.getKey() + "=" + q.getValue().longValue());
            }
        }
        return out.isEmpty() ? "none" : String.join(";", out);
    }

    static void scram(Admin admin, String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-scram", u256 = prefix + "-s256", u512 = prefix + "-s512";
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        List<UserScramCredentialAlteration> upserts = List.of(
            new UserScramCredentialUpsertion(u256, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), "p256"),
            new UserScramCredentialUpsertion(u512, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), "p512"));
        admin.alterUserScramCredentials(upserts).all().get();
        Map<String, UserScramCredentialsDescription> described =
            admin.describeUserScramCredentials(List.of(u256, u512)).all().get();
        for (String user : List.of(u256, u512)) {
            System.out.println("scramDescribed " + user + " " + described.get(user).credentialInfos().stream()
                .map(i -> i.mechanism() + ":" + i.iterations()).sorted().collect(Collectors.joining(",")));
        }
        // users() leaves out a user without credentials (the broker's RESOURCE_NOT_FOUND for it);
        // description(user) fails with it.
        System.out.println("scramUsers " + admin.describeUserScramCredentials(List.of(u256, prefix + "-nobody"))
            .users().get().stream().sorted().collect(Collectors.joining(",")));
        try {
            admin.describeUserScramCredentials(List.of(prefix + "-nobody")).description(prefix + "-nobody").get();
            System.out.println("scramUnknown found");
        } catch (ExecutionException e) {
            System.out.println("scramUnknown " + e.getCause().getClass().getSimpleName());
        }
        for (String user : List.of(u256, u512)) {
            for (AclOperation op : List.of(AclOperation.WRITE, AclOperation.DESCRIBE)) {
                admin.createAcls(List.of(new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry("User:" + user, "*", op, AclPermissionType.ALLOW)))).all().get();
            }
        }
        System.out.println("scramProduce SCRAM-SHA-256 " + produce(bootstrap, "SCRAM-SHA-256", u256, "p256", topic));
        System.out.println("scramProduce SCRAM-SHA-512 " + produce(bootstrap, "SCRAM-SHA-512", u512, "p512", topic));
        System.out.println("scramWrongPassword " + produce(bootstrap, "SCRAM-SHA-256", u256, "wrong", topic));
        // A user's credential holds for its own mechanism only.
        System.out.println("scramWrongMechanism " + produce(bootstrap, "SCRAM-SHA-512", u256, "p256", topic));
        admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(u512, ScramMechanism.SCRAM_SHA_512)))
            .all().get();
        System.out.println("scramAfterDeletion " + produce(bootstrap, "SCRAM-SHA-512", u512, "p512", topic));
        System.out.println("scramRead " + readAll(bootstrap, topic));
    }

    // "ok" when the record was written, else the simple name of what the send failed with.
    static String produce(String bootstrap, String mechanism, String user, String password, String topic) {
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put("security.protocol", "SASL_PLAINTEXT");
        pp.put("sasl.mechanism", mechanism);
        pp.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
            + user + "\" password=\"" + password + "\";");
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "10000");
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            producer.send(new ProducerRecord<>(topic, user, mechanism)).get();
            return "ok";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    // The topic's records as "<key>=<value>,..." in offset order, read by the super user.
    static String readAll(String bootstrap, String topic) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(cp);
        TopicPartition tp = new TopicPartition(topic, 0);
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + 15000;
            while (consumer.position(tp) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    out.add(r.key() + "=" + r.value());
                }
            }
        }
        return String.join(",", out);
    }
}
