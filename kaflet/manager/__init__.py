"""kaflet manager: the management service and console for kaflet (and Kafka) clusters."""
