"""Topics through the project's own client: one `create_topic` for every test and bench, leaders, names."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from tests.support.wire import HasBootstrap, connect


@contextlib.asynccontextmanager
async def _connection(target: KafkaConnection | HasBootstrap | str) -> AsyncIterator[KafkaConnection]:
    if isinstance(target, KafkaConnection):
        yield target
        return
    async with await connect(target) as conn:
        yield conn


async def create_topic(target: KafkaConnection | HasBootstrap | str, name: str, partitions: int = 1,
                       replication_factor: int = 1, *, assignment: dict[int, list[int]] | None = None,
                       configs: dict[str, str] | None = None, check: bool = True, timeout: float = 30.0) -> dict:
    """CreateTopics v1, then Metadata until every partition has a leader; the topic's entry of the response.

    `target` is an open connection, a bootstrap string, or anything with `bootstrap` (a broker,
    a cluster: its first reachable live broker). `assignment` ({partition: broker ids}) replaces
    the partition count and replication factor. With `check` (the default) a topic the broker
    refuses fails the caller; without it the response comes back whatever its error code.
    """
    spec = {"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
            "assignments": [], "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
    if assignment is not None:
        spec |= {"num_partitions": -1, "replication_factor": -1,
                 "assignments": [{"partition_index": p, "broker_ids": r} for p, r in assignment.items()]}
    async with _connection(target) as conn:
        resp = await conn.request(ApiKey.CREATE_TOPICS, 1, {"topics": [spec], "timeout_ms": int(timeout * 1000)},
                                  timeout + 10)
        result = resp["topics"][0]
        if check:
            assert result["error_code"] == 0, f"CreateTopics {name}: {resp}"
        if result["error_code"] == 0:
            await wait_leaders(conn, name, len(assignment) if assignment is not None else partitions, timeout)
    return result


async def wait_leaders(conn: KafkaConnection, topic: str, partitions: int, timeout: float = 10) -> None:
    """Until the broker's Metadata shows `partitions` partitions of `topic`, each with a leader."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": topic}]})
        t = md["topics"][0]
        if t["error_code"] == 0 and len(t["partitions"]) == partitions and all(
                p["leader_id"] >= 0 for p in t["partitions"]):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no leaders for {topic}")


async def topic_names(target: KafkaConnection | HasBootstrap | str) -> set[str]:
    """Every topic on the broker, asked without naming any (so nothing gets auto-created)."""
    async with _connection(target) as conn:
        md = await conn.request(ApiKey.METADATA, 1, {"topics": None})
    return {t["name"] for t in md["topics"]}
