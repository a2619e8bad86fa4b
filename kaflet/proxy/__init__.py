"""`kaflet gateway`: the separate gateway process (the seeds' Kafka-Gateway), one address for
every cluster the management service knows; kaflet/gateway/ is the part embedded in the brokers."""
