"""The group coordinator: consumer groups and committed offsets, stored in __consumer_offsets.

Modules: `hashing` (which __consumer_offsets partition owns a group), `schemas` (the record
formats of that topic), `member` and `group` (a group's members and state machine, pure),
`store` (reading and writing the partitions), `coordinator` (the protocol's rules and timers).
"""
