"""The project's own client on the wire: connections, Produce (message format v1) and Fetch."""

from __future__ import annotations

from typing import Protocol

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.records.message_set import build_message_set
from protocol.schema import request_codec


class HasBootstrap(Protocol):
    @property
    def bootstrap(self) -> str: ...


async def connect(target: HasBootstrap | str, client_id: str = "minibroker-tool") -> KafkaConnection:
    """A connection to the first reachable server of a bootstrap list, a broker, or a cluster's live brokers."""
    bootstrap = target if isinstance(target, str) else target.bootstrap
    error: OSError | TimeoutError | None = None
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            return await KafkaConnection.open(host or "127.0.0.1", int(port), client_id=client_id)
        except (OSError, TimeoutError) as e:
            error = e
    raise ConnectionError(f"cannot connect to {bootstrap}: {error}")


async def produce(conn: KafkaConnection, topic: str, partition: int, records: list[tuple[bytes | None, bytes | None]],
                  acks: int = 1, version: int = 2, codec: int = 0, first_timestamp: int = 1_700_000_000_000,
                  timeout_ms: int = 5000) -> dict:
    """One Produce request of `records` (key, value), timestamped first_timestamp + i; the
    partition's response (nothing for acks=0). The response is awaited timeout_ms and 30 s more."""
    data = build_message_set([(k, v, first_timestamp + i) for i, (k, v) in enumerate(records)], magic=1, codec=codec)
    body = {"acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}]}
    if acks == 0:
        await conn.send_raw(ApiKey.PRODUCE, version, request_codec(ApiKey.PRODUCE, version).encode(body), expect_response=False)
        return {}
    resp = await conn.request(ApiKey.PRODUCE, version, body, timeout=timeout_ms / 1000 + 30)
    return resp["responses"][0]["partition_responses"][0]


async def fetch(conn: KafkaConnection, parts: list[tuple[str, int, int, int]], version: int = 3,
                max_bytes: int = 10 << 20, max_wait_ms: int = 0, min_bytes: int = 0) -> dict[tuple[str, int], dict]:
    """One Fetch request for (topic, partition, offset, partition max bytes); responses by (topic, partition)."""
    topics: dict[str, list] = {}
    for t, p, off, pmax in parts:
        topics.setdefault(t, []).append({"partition": p, "fetch_offset": off, "partition_max_bytes": pmax})
    body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
    resp = await conn.request(ApiKey.FETCH, version, body)
    return {(t["topic"], p["partition_index"]): p for t in resp["responses"] for p in t["partitions"]}
