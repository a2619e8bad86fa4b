import java.util.Properties;

/** The login the programs use when the test asks for one (a gateway's SASL/PLAIN user). */
final class ClientLogin {
    private ClientLogin() {}

    /** Adds SASL_PLAINTEXT with PLAIN when KAFLET_SASL_USERNAME is set; otherwise PLAINTEXT as before. */
    static Properties apply(Properties props) {
        String user = System.getenv("KAFLET_SASL_USERNAME");
        if (user != null && !user.isEmpty()) {
            String password = System.getenv().getOrDefault("KAFLET_SASL_PASSWORD", "");
            props.put("security.protocol", "SASL_PLAINTEXT");
            props.put("sasl.mechanism", "PLAIN");
            props.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                + user + "\" password=\"" + password + "\";");
        }
        return props;
    }

    /** An Admin's properties with the login applied and timeouts that outlast a slow test machine. */
    static Properties admin(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("request.timeout.ms", "15000");
        props.put("default.api.timeout.ms", "20000");
        return apply(props);
    }
}
