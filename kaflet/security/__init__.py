"""Authentication (TLS contexts and principals, SASL mechanisms and credentials) and authorization (ACLs).

The network layer only sees two small interfaces from here: an `ssl.SSLContext` per TLS listener
and a `SaslSession` per SASL connection, created by an `Authenticator`. Kafka's behaviour is the
first `Authenticator`; the Logi-Kafka gateway will plug in a second one (shared/gateway-spec.md).

Authorization is the `Authorizer` interface in `authorizer.py` (Kafka's ACL model is in `acl.py`);
the broker's handlers call it, and the gateway's authorizer will be a second implementation.
"""
