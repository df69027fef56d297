"""Issue 15.3: a client posing as a follower must not move the leader's follower state.

Two real brokers, topic replicas [0, 1] with min.insync.replicas 2; follower 1 is killed and,
before the ISR can shrink (long lag time, long ZooKeeper session for broker 1), a plain client
sends Fetch(replica_id=1, fetch_offset=10**12) to leader 0. An acks=all produce waiting on the
real follower must stay unacknowledged (it times out), and the high watermark stays where the
real follower left it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, fetch, produce

TOPIC = "spoof"


async def follower_fetch(conn, replica_id: int, offset: int) -> dict:  # noqa: ANN001
    body = {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}
    resp = await conn.request(ApiKey.FETCH, 3, body)
    return resp["responses"][0]["partitions"][0]


async def high_watermark(conn) -> int:  # noqa: ANN001
    return (await fetch(conn, [(TOPIC, 0, 0, 1024)]))[(TOPIC, 0)]["high_watermark"]


async def test_a_spoofed_follower_fetch_neither_acknowledges_acks_all_nor_moves_the_high_watermark(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    lag = {"replica_lag_time_max_ms": "60000"}
    leader = broker_factory(0, **lag)
    # Broker 1's ZooKeeper session (10 s, the test server's maximum) outlives the produce's
    # 5 s timeout, so the controller does not drop it from the ISR while that is in flight.
    follower = broker_factory(1, zookeeper_session_timeout_ms="10000", **lag)
    await create_topic(leader, TOPIC, assignment={0: [0, 1]}, configs={"min.insync.replicas": "2"})

    async with await connect(leader) as conn, await connect(leader) as producer:
        for i in range(5):
            r = await produce(producer, TOPIC, 0, [(None, b"m%d" % i)], acks=-1)
            assert r["error_code"] == ErrorCode.NONE
        async def replicated() -> bool:
            return await high_watermark(conn) == 5
        await wait_for("the high watermark at 5", replicated, timeout=10)

        follower.kill()
        pending = asyncio.create_task(produce(producer, TOPIC, 0, [(None, b"unreplicated")], acks=-1))
        await asyncio.sleep(0.3)  # appended on the leader, waiting for follower 1
        assert not pending.done()

        spoofed = await follower_fetch(conn, 1, 10**12)
        assert spoofed["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert await high_watermark(conn) == 5
        # A broker id that holds no replica: no error, no records, nothing recorded (Kafka 2.8).
        stranger = await follower_fetch(conn, 7, 5)
        assert (stranger["error_code"], stranger["records"], stranger["high_watermark"]) == (ErrorCode.NONE, b"", 5)
        assert (await follower_fetch(conn, 7, 6))["error_code"] == ErrorCode.NONE

        result = await pending  # the produce's own timeout_ms, 5 s
        assert result["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        assert await high_watermark(conn) == 5
