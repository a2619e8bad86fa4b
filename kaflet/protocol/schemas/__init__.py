"""Message definitions, in Kafka's message-JSON form, for the APIs kafka-python's codec lacks.

The controller-to-broker APIs of a ZooKeeper-mode cluster: kaflet's controller only talks to
kaflet brokers, so each file describes just the one version kaflet speaks (the newest one of the
ZooKeeper era, Kafka 2.8). And KIP-848's ConsumerGroupHeartbeat (v0-v1) and
ConsumerGroupDescribe (v0), with the versions Kafka 4.x serves. Loaded by
kaflet.protocol.inter_broker.
"""
