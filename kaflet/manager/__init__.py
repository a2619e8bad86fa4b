"""kaflet manager: the management service and web console (Logi-KafkaManager's role).

Applications (the Kafka users of a gateway cluster), their topic permissions and quotas,
accounts with roles, an audit log, and the gateway HTTP contract the brokers pull from
(``/gateway/api/v1/...``); the clusters' brokers, topics, groups and connections
(clusters.py, sampling.py, charts.py). It is a separate service: it talks to brokers only over
the wire (Kafka's admin API), never through the broker's own modules.
"""
