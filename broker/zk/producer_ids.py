"""Producer ids for InitProducerId, from blocks claimed in `/latest_producer_id_block` (Kafka's layout).

Kafka 2.8's ProducerIdManager: the znode holds the last block any broker claimed,
`{"version":1,"broker":B,"block_start":"S","block_end":"E"}` (both ends inclusive, 1000 ids).
A broker claims the next block by reading the znode and writing the block after it with a
conditional set on the version it read; losing that race (BadVersion) means another broker
claimed first, so it reads again and claims the block after that one. Two brokers therefore
never hand out the same id, across restarts too (a restarted broker claims a fresh block and the
unused rest of its old one is never handed out, as in Kafka).

The znode is created empty with Kafka's persistent paths at start; empty (or missing) means no
block was ever claimed, and the first block is 0..999.
"""

from __future__ import annotations

import asyncio

import structlog

from broker.zk import layout as L
from broker.zk.client import BadVersionError, NodeExistsError, NoNodeError, ZkClient

log = structlog.get_logger()
LONG_MAX = (1 << 63) - 1


class ProducerIdsExhausted(RuntimeError):
    pass


async def claim_block(zk: ZkClient, broker_id: int) -> L.ProducerIdBlock:
    """Claim the next free block of producer ids for `broker_id` (retrying lost races)."""
    while True:
        try:
            data, version = await zk.get(L.PRODUCER_ID_BLOCK)
        except NoNodeError:
            data, version = b"", -1
        if data:
            current = L.ProducerIdBlock.decode(data)
            if current.block_end > LONG_MAX - L.PRODUCER_ID_BLOCK_SIZE:
                raise ProducerIdsExhausted(f"producer ids exhausted (last block ends at {current.block_end})")
            block = current.next_block(broker_id)
        else:
            block = L.first_producer_id_block(broker_id)
        try:
            if version < 0:
                await zk.create(L.PRODUCER_ID_BLOCK, block.encode(), make_parents=True)
                written = 0
            else:
                written = await zk.set(L.PRODUCER_ID_BLOCK, block.encode(), version=version)
        except (BadVersionError, NodeExistsError):
            continue  # another broker claimed a block first: read again and take the one after
        log.info("producer_ids.block_claimed", broker_id=broker_id, block_start=block.block_start,
                 block_end=block.block_end, zk_version=written)
        return block


class ProducerIdManager:
    """Hands out producer ids one by one, claiming a new block when the current one is used up."""

    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._block: L.ProducerIdBlock | None = None
        self._next = 0
        self._lock = asyncio.Lock()

    async def generate(self) -> int:
        async with self._lock:  # one claim at a time; ids are handed out in order
            if self._block is None or self._next > self._block.block_end:
                self._block = await claim_block(self.zk, self.broker_id)
                self._next = self._block.block_start
            pid = self._next
            self._next += 1
            return pid
