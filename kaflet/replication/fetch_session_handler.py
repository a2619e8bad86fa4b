"""The follower's side of an incremental fetch session (KIP-227; Kafka's FetchSessionHandler).

A fetcher follows many partitions of one leader and fetches them all on every round trip. In a
session the leader remembers the partitions and what it last answered for them, so after a first
full fetch each request names only the partitions whose fetch position or limits changed (and
those to forget), and each response carries only the partitions with news: records, a moved high
watermark or log start offset, an error. A round trip that moves one partition of a thousand
then costs one partition each way instead of a thousand.

``build`` takes the partitions ready to fetch, in fetch order, and says what to send;
``handle_response`` and ``handle_error`` move the session on as Kafka does:

* a full response with a session id opens the session (next epoch 1); one without keeps
  fetching sessionless (full every time: the leader has no slot for us);
* an incremental response with the session id continues it (next epoch), one with id 0 means
  the leader closed it (full next);
* FETCH_SESSION_ID_NOT_FOUND starts afresh; any other error, a response that does not match
  the request (partitions missing from a full answer, or not in the session) or a failed
  connection closes the session and opens a new one with the next full fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from kaflet.protocol.errors import ErrorCode, error_name
from kaflet.protocol.fetch import INITIAL_EPOCH, INVALID_SESSION_ID, FetchPartition, next_epoch

log = logging.getLogger("kaflet.fetcher")

TopicPartition = tuple[str, int]


class FetchMetadata(NamedTuple):
    """A request's session id and epoch (Kafka's FetchMetadata)."""

    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        """A full fetch: every partition is sent (epoch 0 opens a session)."""
        return self.epoch == INITIAL_EPOCH

    def next_close_existing(self) -> FetchMetadata:
        """A full fetch that closes this session and opens a new one."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, next_epoch(self.epoch))


#: No session yet: the next fetch is full and asks for one.
INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


class FetchRequestData(NamedTuple):
    """What one fetch request carries: ``to_send`` (every partition when full, else the added
    and changed ones) and ``to_forget`` under ``metadata``'s session id and epoch."""

    to_send: dict[TopicPartition, FetchPartition]
    to_forget: list[TopicPartition]
    metadata: FetchMetadata


class FetchSessionHandler:
    """One fetcher's session with one leader."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.next_metadata = INITIAL
        #: The partitions the leader holds in the session, as last sent (fetch order).
        self.session_partitions: dict[TopicPartition, FetchPartition] = {}

    def build(self, ready: Mapping[TopicPartition, FetchPartition]) -> FetchRequestData:
        """The next request for the partitions ``ready`` to fetch; the session is updated as if
        the leader accepts it (a failure resets it through ``handle_*``)."""
        metadata = self.next_metadata
        if metadata.is_full:
            self.session_partitions = dict(ready)
            return FetchRequestData(dict(ready), [], metadata)
        session = self.session_partitions
        if len(session) == len(ready) and session.keys() == ready.keys():
            to_forget: list[TopicPartition] = []  # the usual case, one set comparison in C
        else:
            to_forget = [tp for tp in session if tp not in ready]
            for tp in to_forget:
                del session[tp]
        to_send = {tp: data for tp, data in ready.items() if session.get(tp) != data}
        session.update(to_send)
        return FetchRequestData(to_send, to_forget, metadata)

    def handle_response(self, error_code: int, session_id: int, partitions: Iterable[TopicPartition],
                        throttle_time_ms: int = 0) -> bool:
        """Move the session on after a response; False if its partitions must not be used."""
        metadata = self.next_metadata
        if error_code != ErrorCode.NONE:
            log.info("%s: the leader could not use fetch session %d epoch %d: %s", self.name,
                     metadata.session_id, metadata.epoch, error_name(error_code))
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.next_metadata = INITIAL
            else:
                self.next_metadata = metadata.next_close_existing()
            return False
        answered = set(partitions)
        if metadata.is_full:
            if not answered and throttle_time_ms > 0:
                # A throttled full fetch is answered without partitions (KIP-219): try again.
                self.next_metadata = INITIAL
                return False
            missing = self.session_partitions.keys() - answered
            extra = answered - self.session_partitions.keys()
            if missing or extra:
                log.info("%s: invalid full fetch response: %d partitions missing, %d not asked for", self.name,
                         len(missing), len(extra))
                self.next_metadata = INITIAL
                return False
            self.next_metadata = INITIAL if session_id == INVALID_SESSION_ID else FetchMetadata(session_id, 1)
            return True
        extra = answered - self.session_partitions.keys()
        if extra:
            log.info("%s: invalid incremental fetch response: %d partitions not in session %d", self.name,
                     len(extra), metadata.session_id)
            self.next_metadata = metadata.next_close_existing()
            return False
        # Id 0: the leader closed the session; the next fetch is full.
        self.next_metadata = INITIAL if session_id == INVALID_SESSION_ID else metadata.next_incremental()
        return True

    def handle_error(self) -> None:
        """The request failed (connection lost, timeout): the next fetch is full and replaces
        the session, whose state at the leader is unknown."""
        self.next_metadata = self.next_metadata.next_close_existing()
