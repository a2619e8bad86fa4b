// An idempotent producer (the Java client's default: enable.idempotence, acks=all) sending one
// record every few milliseconds for SECONDS seconds to one topic, then flushing. Prints
// "acked <value> <offset>" or "failed <value> <error class>" per record and "done <sent>" at the
// end; tests/integration/test_gateway_proxy.py moves the cluster under it.
// Usage: ProduceSteadily <bootstrap> <topic> <seconds>
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class ProduceSteadily {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        long until = System.nanoTime() + Long.parseLong(args[2]) * 1_000_000_000L;
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ClientLogin.apply(pp);
        // Nothing but the defaults that matter here, spelled out: idempotent, acks=all, retries.
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        pp.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "45000");
        int sent = 0;
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            while (System.nanoTime() < until) {
                String value = "j" + sent++;
                producer.send(new ProducerRecord<>(topic, value), (md, exc) -> {
                    synchronized (System.out) {
                        if (exc == null) {
                            System.out.println("acked " + value + " " + md.offset());
                        } else {
                            System.out.println("failed " + value + " " + exc.getClass().getSimpleName());
                        }
                    }
                });
                Thread.sleep(10);
            }
            producer.flush();
        }
        System.out.println("done " + sent);
    }
}
