"""Authentication: TLS contexts and principals, SASL mechanisms (PLAIN, SCRAM) and their credentials.

The network layer only sees two small interfaces from here: an `ssl.SSLContext` per TLS listener
and a `SaslSession` per SASL connection, created by an `Authenticator`. Kafka's behaviour is the
first `Authenticator`; the Logi-Kafka gateway will plug in a second one (shared/gateway-spec.md).
"""
