"""Producer id allocation in blocks of 1000 from /latest_producer_id_block, as Kafka does."""

from __future__ import annotations

import asyncio

from kaflet.metadata.tree import BadVersionError, MetadataTree, NodeExistsError, NoNodeError
from kaflet.metadata.zkdata import (
    LATEST_PRODUCER_ID_BLOCK_PATH,
    next_producer_id_block,
    parse_producer_id_block,
    producer_id_block_json,
)


class ProducerIdManager:
    """Hands out producer ids; claims a new block with a conditional write when one runs out."""

    def __init__(self, tree: MetadataTree, broker_id: int) -> None:
        self.tree = tree
        self.broker_id = broker_id
        self._next = 0
        self._end = -1
        self._lock = asyncio.Lock()

    async def _claim_block(self) -> None:
        while True:
            try:
                data, stat = await self.tree.get(LATEST_PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                try:
                    await self.tree.create(LATEST_PRODUCER_ID_BLOCK_PATH, b"", make_parents=True)
                except NodeExistsError:
                    pass
                continue
            block = next_producer_id_block(parse_producer_id_block(data), self.broker_id)
            try:
                await self.tree.set(LATEST_PRODUCER_ID_BLOCK_PATH, producer_id_block_json(block), stat.version)
            except BadVersionError:
                continue  # another broker claimed the block; read again
            self._next, self._end = block.block_start, block.block_end
            return

    async def next_id(self) -> int:
        """A producer id never handed out before in this cluster."""
        async with self._lock:
            if self._next > self._end:
                await self._claim_block()
            pid = self._next
            self._next += 1
            return pid
