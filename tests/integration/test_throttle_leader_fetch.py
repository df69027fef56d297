"""KIP-73's leader throttle seen on the wire: what a leader answers a throttled follower's Fetch.

Two real brokers; follower 1 is stopped so that it drops out of the ISR, and a plain connection
then fetches as replica 1 (a follower fetch as broker 1's fetcher would send it once back).

1. A throttled partition held back by the leader must not hold the unthrottled partitions that
share its follower's Fetch. KIP-73 leaves throttled partitions out of the leader's response
while its quota is exceeded (and this leader also while the allowance is below a minimum grant,
MIN_GRANT_SECONDS of the quota); the unthrottled partitions of the same request go on at full
speed: `slow` (throttled, out of sync, its leader's quota tiny so it is always held back) beside
`free` (unthrottled). The leader must answer as soon as `free` has bytes, with `slow` empty:
min_bytes is met, so the response owes no wait to the throttle (bench/nic.py measures the same
on shaped links; docs/perf/nic.md). The checks are Fetch's semantics, not speeds: a response
held for the throttle would come at the end of its 20 s max wait.

2. A throttled read capped to the leader's allowance ends on a whole batch. Kafka's read may
end inside one, and the follower appends only whole batches and asks again from the cut: under
a capped grant that tail was sent twice and spent the quota twice (a reassignment at 5 MB/s
moved 3.7 MB/s under CPU load, with 10-20% of its bytes sent again). Checked byte for byte:
the follower's walk receives the leader's log exactly once.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from broker.zk.client import ZkClient
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import record_batch
from tests.support.brokers import BrokerProcess
from tests.support.cluster import FAST
from tests.support.partition_state import isr_is, registered
from tests.support.replication import partition_bytes, set_throttle
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

MAX_WAIT_MS = 20_000
# Far below MAX_WAIT_MS: a response that arrives within it was not held to the fetch's deadline.
ANSWERED_WITHIN_S = MAX_WAIT_MS / 1000 / 2
LEADER_RATE = 1000  # B/s: an allowance far below the minimum grant, so `slow` is always held back
# Test 2: grants of at most half a second of it (MAX_BURST_SECONDS), a few batches each.
CAPPED_RATE = 100_000


def follower_fetch(offsets: dict[str, int]) -> dict:
    return {"replica_id": 1, "max_wait_ms": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}
                for topic, offset in offsets.items()]}


def by_topic(resp: dict) -> dict[str, dict]:
    return {t["topic"]: t["partitions"][0] for t in resp["responses"]}


@asynccontextmanager
async def out_of_sync_follower(broker_factory: Callable[..., BrokerProcess], zk_server,  # noqa: ANN001
                               topics: tuple[str, ...]) -> AsyncIterator[tuple[BrokerProcess, ZkClient]]:
    """Leader 0 and follower 1 of `topics` (one partition each); follower 1 stopped. Yields the
    leader and a ZooKeeper client once the ISRs are [0, 1] and the follower is down."""
    opts = {k.replace(".", "_"): v for k, v in FAST.items()}
    leader = broker_factory(0, **opts)
    follower = broker_factory(1, **opts)
    zk = ZkClient(zk_server.connect_string, 6000)
    await zk.start()
    try:
        await wait_for("2 registered brokers", lambda: registered(zk, 2))
        for topic in topics:
            await create_topic(leader, topic, assignment={0: [0, 1]})
            await wait_for(f"ISR [0, 1] of {topic}", lambda topic=topic: isr_is(zk, topic, [0, 1]))
        assert follower.stop() == 0
        yield leader, zk
    finally:
        await zk.close()


async def test_held_back_throttled_partition_does_not_hold_the_unthrottled_one(
        broker_factory: Callable[..., BrokerProcess], zk_server) -> None:  # noqa: ANN001
    async with out_of_sync_follower(broker_factory, zk_server, ("slow", "free")) as (leader, zk):
        async with await connect(leader) as producer, await connect(leader) as conn:
            for topic in ("slow", "free"):
                r = await produce(producer, topic, 0, [(None, b"x" * 1000) for _ in range(20)], acks=1)
                assert r["error_code"] == ErrorCode.NONE
            for topic in ("slow", "free"):
                await wait_for(f"ISR [0] of {topic}", lambda topic=topic: isr_is(zk, topic, [0]), timeout=30)
            set_throttle(zk_server.connect_string, "slow", LEADER_RATE)

            async def slow_held_back() -> bool:
                """The leader has applied the throttle (from ZooKeeper's notification): `slow` comes back empty."""
                resp = await conn.request(ApiKey.FETCH, 3, follower_fetch({"slow": 0}) | {"max_wait_ms": 0})
                part = by_topic(resp)["slow"]
                return part["error_code"] == ErrorCode.NONE and not part["records"]

            await wait_for("the leader throttle in force on slow", slow_held_back, timeout=30)

            # 1. `free` has bytes at once: answered at once, `slow` held back (empty, no error).
            resp = await asyncio.wait_for(conn.request(ApiKey.FETCH, 3, follower_fetch({"slow": 0, "free": 0})),
                                          ANSWERED_WITHIN_S)
            parts = by_topic(resp)
            assert parts["free"]["error_code"] == ErrorCode.NONE
            assert len(parts["free"]["records"] or b"") > 0
            assert parts["slow"]["error_code"] == ErrorCode.NONE
            assert (parts["slow"]["records"] or b"") == b""
            assert parts["slow"]["high_watermark"] == 20  # the offsets still come back

            # 2. A long poll: `free` is at its end, `slow` held back; an append to `free` answers it.
            end = parts["free"]["high_watermark"]
            pending = asyncio.create_task(conn.request(ApiKey.FETCH, 3, follower_fetch({"slow": 0, "free": end})))
            await asyncio.sleep(0.5)
            assert not pending.done(), "answered with nothing to send: min_bytes is 1"
            r = await produce(producer, "free", 0, [(None, b"late")], acks=1)
            assert r["error_code"] == ErrorCode.NONE
            parts = by_topic(await asyncio.wait_for(pending, ANSWERED_WITHIN_S))
            assert b"late" in bytes(parts["free"]["records"] or b"")
            assert (parts["slow"]["records"] or b"") == b""


def whole_batches(records: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch; fails on a batch cut short."""
    out, pos = [], 0
    while pos < len(records):
        assert pos + 12 <= len(records), f"a batch header cut at byte {pos} of {len(records)}"
        base, size = struct.unpack_from(">qi", records, pos)
        assert pos + 12 + size <= len(records), f"a batch cut at byte {len(records) - pos} of {12 + size}"
        last_delta = struct.unpack_from(">i", records, pos + 23)[0]
        out.append((base, base + last_delta))
        pos += 12 + size
    return out


async def test_a_grant_capped_by_the_allowance_ends_on_a_whole_batch(
        broker_factory: Callable[..., BrokerProcess], zk_server) -> None:  # noqa: ANN001
    async with out_of_sync_follower(broker_factory, zk_server, ("capped",)) as (leader, zk):
        async with await connect(leader) as conn:
            # Batches of 3-29 KB (incompressible values), so a grant is rarely a whole number of them.
            for i, records in enumerate((7, 13, 29, 3, 17, 11) * 5):
                batch = record_batch.build_batch([(1_700_000_000_000, None, os.urandom(1000), ())] * records)
                body = {"acks": 1, "timeout_ms": 5000, "topic_data": [
                    {"name": "capped", "partition_data": [{"index": 0, "records": batch}]}]}
                resp = await conn.request(ApiKey.PRODUCE, 3, body)
                assert resp["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE, i
            await wait_for("ISR [0] of capped", lambda: isr_is(zk, "capped", [0]), timeout=30)
            stored = partition_bytes(leader, "capped", 0)
            end = whole_batches(stored)[-1][1] + 1
            set_throttle(zk_server.connect_string, "capped", CAPPED_RATE)

            async def capped() -> bool:
                """The leader has applied the throttle: a fetch of the whole log gets less than all of it."""
                resp = await conn.request(ApiKey.FETCH, 3, follower_fetch({"capped": 0}) | {"max_wait_ms": 0})
                return len(by_topic(resp)["capped"]["records"] or b"") < len(stored)

            await wait_for("the leader throttle in force on capped", capped, timeout=30)

            # The follower's walk, as its fetcher takes responses: from the end of what it holds.
            received, offset, responses = bytearray(), 0, 0
            while offset < end:
                resp = await asyncio.wait_for(conn.request(ApiKey.FETCH, 3, follower_fetch({"capped": offset})),
                                              ANSWERED_WITHIN_S)
                part = by_topic(resp)["capped"]
                assert part["error_code"] == ErrorCode.NONE
                records = bytes(part["records"] or b"")
                batches = whole_batches(records)
                if batches:
                    assert batches[0][0] == offset
                    offset = batches[-1][1] + 1
                    received += records
                    responses += 1
            # Every byte once: nothing sent that the follower throws away and asks for again.
            assert bytes(received) == stored
            assert responses >= 3, "the throttle cut nothing: the check above proves nothing"
