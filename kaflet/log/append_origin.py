"""Who is appending to a log, which decides how much of the producer state is checked (Kafka's
AppendOrigin)."""

from __future__ import annotations

import enum


class AppendOrigin(enum.Enum):
    """The source of an append (Kafka's AppendOrigin).

    * ``CLIENT``: a Produce request; full producer checks (epoch, sequence, duplicates).
    * ``COORDINATOR``: the group or transaction coordinator writing its own topic; its batches
      carry no sequence of the producer's, so only the producer epoch is checked.
    * ``REPLICATION``: a follower copying its leader; the leader checked the batches, so a stale
      epoch is not refused.
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
