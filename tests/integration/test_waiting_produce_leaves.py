"""An acks=all Produce waiting for its high watermark is answered when its partition leaves the
broker, not at its timeout.

A reassignment's last step and a topic deletion send the old leader only StopReplica(delete): no
LeaderAndIsr makes it a follower first. A produce waiting there (its follower stopped fetching
from it, as a new leader does, so the high watermark will never move) was left until its
timeout_ms and answered REQUEST_TIMED_OUT: during a reassignment under acks=all traffic,
librdkafka's producer waited its whole request.timeout.ms (30 s) for thousands of messages before
retrying them on the new leader. Kafka completes such delayed produces at once, with
NOT_LEADER_OR_FOLLOWER (code 6), which clients retry against fresh metadata.

Two real brokers on real ZooKeeper; the follower is paused (SIGSTOP) so that it neither fetches
nor leaves the ISR (replica.lag.time.max.ms is far above the test), and the topic is deleted
while the produce waits. Nothing is timed: the produce's own timeout is far above the limit the
test waits, so only an answer caused by the deletion arrives in time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from broker.zk.client import ZkClient
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess
from tests.support.partition_state import isr_is, registered
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, produce

PRODUCE_TIMEOUT_MS = 300_000
ANSWERED_WITHIN_S = 60  # far below the produce's own timeout


async def test_a_waiting_acks_all_produce_is_answered_when_its_topic_is_deleted(
        broker_factory: Callable[..., BrokerProcess], zk_server) -> None:  # noqa: ANN001
    opts = {"replica_lag_time_max_ms": "600000", "replica_fetch_wait_max_ms": "200",
            "zookeeper_session_timeout_ms": "6000"}
    leader = broker_factory(0, **opts)  # first, so the controller: it must not be the paused one
    follower = broker_factory(1, **opts)
    zk = ZkClient(zk_server.connect_string, 6000)
    await zk.start()
    try:
        await wait_for("2 registered brokers", lambda: registered(zk, 2))
        data, _ = await zk.get("/controller")
        assert json.loads(data)["brokerid"] == 0
        await create_topic(leader, "going", assignment={0: [0, 1]})
        await wait_for("ISR [0, 1] of going", lambda: isr_is(zk, "going", [0, 1]))
        follower.pause()
        try:
            async with await connect(leader) as producer, await connect(leader) as admin:
                waiting = asyncio.create_task(produce(producer, "going", 0, [(None, b"never replicated")], acks=-1,
                                                      timeout_ms=PRODUCE_TIMEOUT_MS))
                await asyncio.sleep(1)
                assert not waiting.done(), "answered while its follower is stopped"
                resp = await admin.request(ApiKey.DELETE_TOPICS, 1, {"topic_names": ["going"], "timeout_ms": 0})
                assert resp["responses"][0]["error_code"] == ErrorCode.NONE, resp
                answer = await asyncio.wait_for(waiting, ANSWERED_WITHIN_S)
        finally:
            follower.resume()
        assert answer["error_code"] == ErrorCode.NOT_LEADER_FOR_PARTITION, answer
    finally:
        await zk.close()
