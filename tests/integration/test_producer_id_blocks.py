"""broker.zk.producer_ids against a real ZooKeeper: blocks claimed by concurrent brokers never overlap."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.zk import layout as L
from broker.zk.producer_ids import ProducerIdManager, claim_block
from broker.zk.server import ZooKeeperServer
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.integration


async def test_first_block_and_kafkas_json(zk_server: ZooKeeperServer) -> None:
    async with zk_connect(zk_server) as zk:
        await zk.ensure_path(L.PRODUCER_ID_BLOCK)  # as the broker's persistent paths leave it: empty
        block = await claim_block(zk, 7)
        assert (block.block_start, block.block_end) == (0, 999)
        data, version = await zk.get(L.PRODUCER_ID_BLOCK)
        assert json.loads(data) == {"version": 1, "broker": 7, "block_start": "0", "block_end": "999"}
        nxt = await claim_block(zk, 8)
        assert (nxt.broker_id, nxt.block_start, nxt.block_end) == (8, 1000, 1999)
        assert (await zk.get(L.PRODUCER_ID_BLOCK))[1] == version + 1


async def test_two_brokers_claiming_at_once_never_share_an_id(zk_server: ZooKeeperServer) -> None:
    async with zk_connect(zk_server) as zk_a, zk_connect(zk_server) as zk_b:
        # Two separate sessions, as two brokers have; 30 claims each, interleaved.
        blocks = await asyncio.gather(*(claim_block(zk, i % 2) for i, zk in enumerate([zk_a, zk_b] * 30)))
        ranges = sorted((b.block_start, b.block_end) for b in blocks)
        assert ranges == [(i * 1000, i * 1000 + 999) for i in range(60)]
        managers = [ProducerIdManager(zk_a, 1), ProducerIdManager(zk_b, 2)]
        ids = await asyncio.gather(*(managers[i % 2].generate() for i in range(2400)))
        assert len(set(ids)) == 2400
        assert min(ids) >= 60_000  # past every block claimed before
