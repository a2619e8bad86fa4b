"""Client quotas: byte rates and request time per user, client id and (user, client id).

One job per module:

- `entity`: quota entities, config keys and Kafka's precedence order;
- `rate`: the windowed rate and the throttle time it implies;
- `manager`: the `QuotaManager` interface and Kafka's implementation;
- `store`: quota configs in the metadata tree (/config/users, /config/clients, /config/ips) and
  the DescribeClientQuotas / AlterClientQuotas semantics;
- `enforcement`: what happens around each request (record, throttle_time_ms, mute).
"""
