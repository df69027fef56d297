"""Consumer-group helpers for tests: numbered messages in, the coordinator's view (FindCoordinator,
OffsetFetch) out, through the project's own wire client, and the exactly-once bookkeeping."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from confluent_kafka import Producer

from protocol.api_keys import ApiKey
from tests.support.wire import HasBootstrap, connect


def produce_numbered(bootstrap: str, topic: str, partitions: int, count: int, start: int = 0) -> dict[int, int]:
    """Values `start`..`start+count-1` (as decimal bytes), message i to partition i % partitions, acks=all;
    returns how many went to each partition."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "enable.idempotence": False})
    sent: Counter[int] = Counter()
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, value=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
        sent[i % partitions] += 1
        p.poll(0)
    assert p.flush(60) == 0, "messages still unacknowledged after 60 s"
    return dict(sent)


async def coordinator(target: HasBootstrap | str, group: str) -> tuple[int, str, int]:
    """FindCoordinator v1 for `group`: (node id, host, port); raises until there is one."""
    conn = await connect(target)
    try:
        resp = await conn.request(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
    finally:
        await conn.close()
    assert resp["error_code"] == 0, f"FindCoordinator {group}: {resp}"
    return resp["node_id"], resp["host"], resp["port"]


async def committed(target: HasBootstrap | str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of `topic` (OffsetFetch v5 to its coordinator); -1 where none."""
    _, host, port = await coordinator(target, group)
    conn = await connect(f"{host}:{port}")
    try:
        resp = await conn.request(ApiKey.OFFSET_FETCH, 5, {
            "group_id": group, "topics": [{"name": topic, "partition_indexes": list(range(partitions))}]})
    finally:
        await conn.close()
    assert resp["error_code"] == 0, f"OffsetFetch {group}: {resp}"
    out = {}
    for t in resp["topics"]:
        for p in t["partitions"]:
            assert p["error_code"] == 0, f"OffsetFetch {group} {topic}-{p['partition_index']}: {resp}"
            out[p["partition_index"]] = p["committed_offset"]
    return out


async def describe(target: HasBootstrap | str, group: str) -> dict:
    """DescribeGroups v4 of `group` at its coordinator."""
    _, host, port = await coordinator(target, group)
    conn = await connect(f"{host}:{port}")
    try:
        resp = await conn.request(ApiKey.DESCRIBE_GROUPS, 4, {"groups": [group], "include_authorized_operations": False})
    finally:
        await conn.close()
    return resp["groups"][0]


def exactly_once(received: Iterable[bytes | int], count: int, start: int = 0) -> tuple[list[int], list[int]]:
    """(missing values, duplicated values) of what a group received against `start`..`start+count-1`."""
    seen = Counter(int(v) for v in received)
    expected = range(start, start + count)
    return [i for i in expected if seen[i] == 0], sorted(i for i, n in seen.items() if n > 1)
