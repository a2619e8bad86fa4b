"""Sequential change notifications, read the way Kafka's change-notification listeners do.

Config, ACL and token changes are announced by persistent sequential znodes under a
`.../changes` path; every broker processes the ones newer than the last it saw, in sequence
order, and any broker deletes those older than 15 minutes.
"""

from __future__ import annotations

import contextlib
import time

from kaflet.metadata.tree import MetadataTree, NoNodeError

#: Kafka's listeners delete change notifications older than this (15 minutes).
NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000


def sequence_of(node: str, prefix: str) -> int | None:
    """The sequence number of a notification node named `<prefix><10 digits>`, else None."""
    if not node.startswith(prefix):
        return None
    try:
        return int(node[len(prefix):])
    except ValueError:
        return None


def pending(names: list[str], prefix: str, last_seq: int) -> list[tuple[int, str]]:
    """(sequence, node) of the notifications after `last_seq`, oldest first."""
    return sorted((s, n) for n in names if (s := sequence_of(n, prefix)) is not None and s > last_seq)


async def purge_expired(tree: MetadataTree, parent: str, names: list[str], now_ms: int | None = None) -> None:
    """Delete the notifications under `parent` created more than 15 minutes ago."""
    cutoff = (int(time.time() * 1000) if now_ms is None else now_ms) - NOTIFICATION_EXPIRY_MS
    for node in names:
        path = f"{parent}/{node}"
        got = await tree.get_or_none(path)
        if got is not None and got[1].ctime < cutoff:
            with contextlib.suppress(NoNodeError):
                await tree.delete(path)


def latest_sequence(names: list[str], prefix: str) -> int:
    """The highest sequence among `names` (-1 when there is none): the notifications already
    reflected by state read at start-up."""
    return max((s for n in names if (s := sequence_of(n, prefix)) is not None), default=-1)
