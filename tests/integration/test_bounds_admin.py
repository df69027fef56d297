"""Issue 15, bounds on admin requests: a partition count whose assignment ZooKeeper cannot store
is refused at once with INVALID_PARTITIONS, before the assignment is built, and the broker's
ZooKeeper session and the controller are untouched. Real ZooKeeper, a real broker process."""

from __future__ import annotations

import asyncio
import time

from broker.zk import layout as L
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.topics import create_topic
from tests.support.wire import connect
from tests.support.zookeeper import zk_connect


def vm_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


async def test_create_topics_validate_only_seven_million_partitions(broker, zk_server) -> None:  # noqa: ANN001
    assert broker.proc is not None
    async with zk_connect(zk_server) as zk, await connect(broker) as conn:
        registered = await zk.ctime_ms(L.broker_path(0))
        controller = await zk.get(L.CONTROLLER)
        controller_ctime = await zk.ctime_ms(L.CONTROLLER)
        hwm_before = vm_kb(broker.proc.pid, "VmHWM")
        spec = {"name": "huge", "num_partitions": 7_000_000, "replication_factor": 1, "assignments": [],
                "configs": []}
        t0 = time.monotonic()
        resp = await asyncio.wait_for(
            conn.request(ApiKey.CREATE_TOPICS, 1, {"topics": [spec], "timeout_ms": 5000, "validate_only": True}),
            2)
        elapsed = time.monotonic() - t0
        result = resp["topics"][0]
        assert result["error_code"] == ErrorCode.INVALID_PARTITIONS, result
        assert "ZooKeeper" in result["error_message"]
        assert elapsed < 2
        assert vm_kb(broker.proc.pid, "VmHWM") - hwm_before < 50 << 10  # KiB: no 7,000,000-entry plan
        # Wait past a session timeout (6 s): a frozen broker would have lost its session by now.
        await asyncio.sleep(7)
        assert await zk.ctime_ms(L.broker_path(0)) == registered
        assert await zk.get(L.CONTROLLER) == controller
        assert await zk.ctime_ms(L.CONTROLLER) == controller_ctime
        # The same without validate_only, and the broker still creates a sane topic afterwards.
        resp = await asyncio.wait_for(
            conn.request(ApiKey.CREATE_TOPICS, 1, {"topics": [spec], "timeout_ms": 5000}), 2)
        assert resp["topics"][0]["error_code"] == ErrorCode.INVALID_PARTITIONS
        assert not await zk.exists(L.topic_path("huge"))
        await create_topic(conn, "sane", 3)


async def test_create_partitions_to_two_million_refused(broker, zk_server) -> None:  # noqa: ANN001
    async with zk_connect(zk_server) as zk, await connect(broker) as conn:
        await create_topic(conn, "grow", 2)
        before = await zk.get(L.topic_path("grow"))
        body = {"topics": [{"name": "grow", "count": 2_000_000, "assignments": None}], "timeout_ms": 5000,
                "validate_only": False}
        resp = await asyncio.wait_for(conn.request(ApiKey.CREATE_PARTITIONS, 1, body), 5)
        result = resp["results"][0]
        assert result["error_code"] == ErrorCode.INVALID_PARTITIONS, result
        assert "ZooKeeper" in result["error_message"]
        assert await zk.get(L.topic_path("grow")) == before
        # A growth that fits still works.
        body["topics"][0]["count"] = 4
        resp = await asyncio.wait_for(conn.request(ApiKey.CREATE_PARTITIONS, 1, body), 10)
        assert resp["results"][0]["error_code"] == 0
        assert len(L.decode_assignment((await zk.get(L.topic_path("grow")))[0])) == 4
