"""A follower whose log runs past its leader's (after an unclean election) truncates and follows.

Broker 0 leads with broker 1 in sync. Broker 1 stops; broker 0 takes more messages, then dies.
Broker 1 comes back and, with unclean.leader.election.enable, is elected with the shorter
log and takes new messages. When broker 0 returns as a follower its fetch offset is beyond
the new leader's log end: it gets OFFSET_OUT_OF_RANGE, truncates to the leader's log end
and replicates from there. As in Kafka 0.10.1 (before KIP-101's leader epochs), the offsets
between the old high watermark and the truncation point may hold different messages on the
two replicas; everything from the truncation point on is identical.
"""

from __future__ import annotations

import asyncio
import json
import struct

import pytest

from broker.zk.client import ZkClient
from protocol.records.records import decode_records
from tests.support.cluster import FAST
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

pytestmark = pytest.mark.integration


async def state(zk: ZkClient) -> dict:
    return json.loads((await zk.get("/brokers/topics/u/partitions/0/state"))[0])


async def produce_to(broker, n: int, tag: bytes) -> None:  # noqa: ANN001
    async with await connect(broker) as c:
        r = await produce(c, "u", 0, [(b"k", tag + b"%d" % i) for i in range(n)], acks=1)
        assert r["error_code"] == 0, r


async def test_follower_beyond_the_leaders_log_truncates_and_follows(broker_factory, zk_server) -> None:  # noqa: ANN001
    opts = {k.replace(".", "_"): v for k, v in FAST.items()} | {"unclean_leader_election_enable": "true"}
    b0 = broker_factory(0, **opts)
    b1 = broker_factory(1, **opts)
    zk = ZkClient(zk_server.connect_string, 6000)
    await zk.start()
    try:
        await wait_for("2 registered brokers", lambda: _registered(zk))
        resp = await create_topic(b0, "u", assignment={0: [0, 1]}, check=False, timeout=20)
        assert resp["error_code"] == 0
        await wait_for("ISR [0, 1]", lambda: _isr(zk, [0, 1]))
        await produce_to(b0, 10, b"both-")
        await wait_for("identical replicas", lambda: _same(b0, b1))
        assert b1.stop() == 0
        await wait_for("ISR [0]", lambda: _isr(zk, [0]))
        await produce_to(b0, 50, b"lost-")  # only on broker 0, never replicated
        # Let the high watermark (60) reach the checkpoint file (every 5 s, as Kafka's default),
        # so that on its return broker 0 keeps its log and fetches from beyond the leader's end.
        await asyncio.sleep(6)
        b0.kill()
        b1.start()
        await wait_for("broker 1 to lead", lambda: _leader(zk, 1))  # unclean: broker 1 was not in the ISR
        await produce_to(b1, 5, b"new-")
        b0.start()
        await wait_for("broker 0 to truncate to 15", lambda: _truncated(b0))
        await produce_to(b1, 5, b"after-")
        await wait_for("identical replicas from offset 15", lambda: _same_from(b0, b1, 15), 30)
        offsets = [[r.offset for r in decode_records(partition_bytes(b, "u", 0))] for b in (b0, b1)]
        assert offsets[0] == offsets[1] == list(range(20))
    finally:
        await zk.close()


async def _registered(zk: ZkClient) -> bool:
    return len(await zk.get_children("/brokers/ids")) == 2 and await zk.exists("/controller")


async def _isr(zk: ZkClient, isr: list[int]) -> bool:
    try:
        return sorted((await state(zk))["isr"]) == isr
    except Exception:  # noqa: BLE001 - the state znode appears a moment after the topic
        return False


async def _leader(zk: ZkClient, leader: int) -> bool:
    return (await state(zk))["leader"] == leader


async def _truncated(b0) -> bool:  # noqa: ANN001
    return "fetcher.truncating" in b0.log() and "to=15" in b0.log()


def _from(blob: bytes, offset: int) -> bytes:
    """The log bytes from the entry holding `offset` on (entries of either message format)."""
    pos = 0
    while pos + 12 <= len(blob):
        base, size = struct.unpack_from(">qi", blob, pos)
        last = base + struct.unpack_from(">i", blob, pos + 23)[0] if blob[pos + 16] == 2 else base
        if last >= offset:
            return blob[pos:]
        pos += 12 + size
    return b""


async def _same_from(b0, b1, offset: int) -> bool:  # noqa: ANN001
    a, b = _from(partition_bytes(b0, "u", 0), offset), _from(partition_bytes(b1, "u", 0), offset)
    return bool(a) and a == b


async def _same(b0, b1) -> bool:  # noqa: ANN001
    a, b = partition_bytes(b0, "u", 0), partition_bytes(b1, "u", 0)
    return bool(a) and a == b
