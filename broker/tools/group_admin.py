"""The admin-client calls `minibroker groups` makes, over the project's KafkaConnection.

What Kafka's AdminClient does for kafka-consumer-groups, reduced to this tool's needs: find a
group's coordinator with FindCoordinator (and find it again on NOT_COORDINATOR, or wait while it
is COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE, as on the first use of
`__consumer_offsets`), send the group APIs there, ListGroups to every broker, and ListOffsets
(as a consumer, replica_id -1, so LATEST is the high watermark) to each partition's leader.

Versions: FindCoordinator v1, ListGroups v2, DescribeGroups v4, OffsetFetch v5 (null topics:
every committed offset), OffsetCommit v5 (generation -1 and an empty member id: the commit of a
consumer outside the group, as AdminClient.alterConsumerGroupOffsets sends), DeleteGroups v1,
OffsetDelete v0, ListOffsets v1, Metadata v1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fetcher.connection import KafkaConnection
from fetcher.security import ClientSecurity
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

EARLIEST, LATEST = -2, -1
_COORDINATOR_GROUP = 0  # FindCoordinator key_type

# Kafka's codes for "ask again, maybe elsewhere" on a group's coordinator (not all are members
# of protocol.errors' enum on every branch, hence numbers).
_NOT_COORDINATOR, _LOADING, _NOT_AVAILABLE = 16, 14, 15
_RETRY_COORDINATOR = {_NOT_COORDINATOR, _LOADING, _NOT_AVAILABLE}
_BACKOFF_S = 0.2


class AdminError(Exception):
    """A failure the tool reports as `Error: ...` and exits 1 for."""


def error_name(code: int) -> str:
    return ErrorCode.name_of(code)


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int


class GroupAdmin:
    """Connections to one cluster, opened lazily per broker; `close()` ends them all."""

    def __init__(self, bootstrap: str, timeout_s: float, client_id: str = "minibroker-groups",
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = bootstrap
        self.security = security  # --command-config
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._conns: dict[tuple[str, int], KafkaConnection] = {}
        self.brokers: dict[int, Broker] = {}
        self._coordinators: dict[str, Broker] = {}

    async def __aenter__(self) -> GroupAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    # ---- connections ---------------------------------------------------------------------------

    async def _connect(self, host: str, port: int) -> KafkaConnection:
        conn = self._conns.get((host, port))
        if conn is not None and conn._closed_exc is None:
            return conn
        conn = await KafkaConnection.open(host, port, self.client_id, timeout=self.timeout_s, security=self.security)
        self._conns[(host, port)] = conn
        return conn

    async def _any(self) -> KafkaConnection:
        errors = []
        # Like Kafka's tools: any reachable server of the bootstrap list will do.
        for server in self.bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            try:
                return await self._connect(host.strip("[]") or "127.0.0.1", int(port))
            except (OSError, TimeoutError, ValueError) as e:
                errors.append(f"{server}: {e or type(e).__name__}")
        raise AdminError(f"cannot connect to {self.bootstrap}: {'; '.join(errors)}")

    async def _request(self, conn: KafkaConnection, key: int, version: int, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return await conn.request(key, version, body, self.timeout_s)
        except TimeoutError as e:
            raise AdminError(f"no answer from {conn.host}:{conn.port} within {self.timeout_s:g} s") from e

    async def _broker_conn(self, broker: Broker) -> KafkaConnection:
        try:
            return await self._connect(broker.host, broker.port)
        except (OSError, TimeoutError) as e:
            raise AdminError(f"cannot connect to broker {broker.node_id} at {broker.host}:{broker.port}: {e}") from e

    # ---- metadata ------------------------------------------------------------------------------

    async def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        """Metadata v1 (topics None: all); refreshes the broker address book."""
        md = await self._request(await self._any(), ApiKey.METADATA, 1,
                                 {"topics": None if topics is None else [{"name": t} for t in topics]})
        self.brokers = {b["node_id"]: Broker(b["node_id"], b["host"], b["port"]) for b in md["brokers"]}
        return md

    async def partitions(self, topics: Iterable[str]) -> dict[str, list[int] | int]:
        """Each topic's partition numbers, or its error code (UNKNOWN_TOPIC_OR_PARTITION...).

        Asks for all topics rather than by name, so that asking never auto-creates a topic.
        """
        wanted = set(topics)
        md = await self.metadata(None)
        found: dict[str, list[int] | int] = {t: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for t in wanted}
        for t in md["topics"]:
            if t["name"] in wanted:
                found[t["name"]] = (sorted(p["partition_index"] for p in t["partitions"])
                                    if t["error_code"] in (0, ErrorCode.REPLICA_NOT_AVAILABLE) else t["error_code"])
        return found

    # ---- log offsets ---------------------------------------------------------------------------

    async def log_offsets(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets v1 at each leader: EARLIEST, LATEST or a timestamp (ms) per partition.
        Partitions whose leader is unknown or answers an error are left out (unknown)."""
        if not timestamps:
            return {}
        md = await self.metadata(None)
        leaders = {(t["name"], p["partition_index"]): p["leader_id"] for t in md["topics"] for p in t["partitions"]}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in timestamps:
            leader = leaders.get(tp, -1)
            if leader in self.brokers:
                by_leader.setdefault(leader, []).append(tp)
        out: dict[TopicPartition, int] = {}
        for leader, tps in by_leader.items():
            topics: dict[str, list[dict[str, int]]] = {}
            for topic, p in tps:
                topics.setdefault(topic, []).append({"partition_index": p, "timestamp": timestamps[(topic, p)]})
            body = {"replica_id": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            resp = await self._request(await self._broker_conn(self.brokers[leader]), ApiKey.LIST_OFFSETS, 1, body)
            for t in resp["topics"]:
                for rp in t["partitions"]:
                    if rp["error_code"] == 0:
                        out[(t["name"], rp["partition_index"])] = rp["offset"]
        return out

    # ---- coordinator ---------------------------------------------------------------------------

    async def _find_coordinator(self, group: str) -> Broker:
        resp = await self._request(await self._any(), ApiKey.FIND_COORDINATOR, 1,
                                   {"key": group, "key_type": _COORDINATOR_GROUP})
        code = resp["error_code"]
        if code in _RETRY_COORDINATOR:
            raise _Retry(code, resp.get("error_message"))
        if code != 0:
            detail = f" ({resp['error_message']})" if resp.get("error_message") else ""
            raise _Refused(f"FindCoordinator for group '{group}': {error_name(code)}{detail}")
        return Broker(resp["node_id"], resp["host"], resp["port"])

    async def coordinated(self, group: str, key: int, version: int, body: Mapping[str, Any],
                          error_of: Any) -> dict[str, Any]:
        """Send a group request to the group's coordinator, finding it (again) and retrying
        while `error_of(response)` is a coordinator-moving or loading code, up to the timeout."""
        deadline = time.monotonic() + self.timeout_s
        last = ""
        while True:
            try:
                broker = self._coordinators.get(group) or await self._find_coordinator(group)
                self._coordinators[group] = broker
                resp = await self._request(await self._broker_conn(broker), key, version, body)
                code = error_of(resp)
                if code not in _RETRY_COORDINATOR:
                    return resp
                raise _Retry(code, None)
            except _Refused:
                raise
            except _Retry as e:
                self._coordinators.pop(group, None)
                last = error_name(e.code) + (f" ({e.message})" if e.message else "")
            except (ConnectionError, AdminError) as e:
                self._coordinators.pop(group, None)
                last = str(e)
            if time.monotonic() >= deadline:
                raise AdminError(f"the coordinator of group '{group}' did not answer within {self.timeout_s:g} s: "
                                 f"{last}")
            await asyncio.sleep(_BACKOFF_S)

    async def coordinator(self, group: str) -> Broker:
        await self.describe(group)
        return self._coordinators[group]

    # ---- group APIs ----------------------------------------------------------------------------

    async def list_groups(self) -> list[tuple[str, str]]:
        """(group id, protocol type) of every group on every broker (ListGroups v2 to each)."""
        await self.metadata(None)
        groups: dict[str, str] = {}
        for broker in sorted(self.brokers.values(), key=lambda b: b.node_id):
            deadline = time.monotonic() + self.timeout_s
            while True:
                resp = await self._request(await self._broker_conn(broker), ApiKey.LIST_GROUPS, 2, {})
                if resp["error_code"] not in (_LOADING, _NOT_AVAILABLE) or time.monotonic() >= deadline:
                    break
                await asyncio.sleep(_BACKOFF_S)
            if resp["error_code"] != 0:
                raise AdminError(f"ListGroups on broker {broker.node_id}: {error_name(resp['error_code'])}")
            for g in resp["groups"]:
                groups[g["group_id"]] = g["protocol_type"]
        return sorted(groups.items())

    async def describe(self, group: str) -> dict[str, Any]:
        """The DescribeGroups v4 entry of `group` (its error code checked by the caller)."""
        resp = await self.coordinated(group, ApiKey.DESCRIBE_GROUPS, 4,
                                      {"groups": [group], "include_authorized_operations": False},
                                      lambda r: r["groups"][0]["error_code"])
        result: dict[str, Any] = resp["groups"][0]
        return result

    async def committed(self, group: str) -> dict[TopicPartition, int]:
        """Every committed offset of `group` (OffsetFetch v5, all topics)."""
        resp = await self.coordinated(group, ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": None},
                                      lambda r: r["error_code"])
        if resp["error_code"] != 0:
            raise AdminError(f"OffsetFetch of group '{group}': {error_name(resp['error_code'])}")
        out: dict[TopicPartition, int] = {}
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"] == 0 and p["committed_offset"] >= 0:
                    out[(t["name"], p["partition_index"])] = p["committed_offset"]
        return out

    async def commit(self, group: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """OffsetCommit v5 as a consumer outside the group; the error code of each partition."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, p), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": p, "committed_offset": offset,
                                                 "committed_metadata": ""})
        body = {"group_id": group, "generation_id": -1, "member_id": "",
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def first_error(r: dict[str, Any]) -> int:
            codes = [p["error_code"] for t in r["topics"] for p in t["partitions"]]
            return next((c for c in codes if c in _RETRY_COORDINATOR), 0)

        resp = await self.coordinated(group, ApiKey.OFFSET_COMMIT, 5, body, first_error)
        return {(t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]}

    async def delete_group(self, group: str) -> int:
        resp = await self.coordinated(group, ApiKey.DELETE_GROUPS, 1, {"groups_names": [group]},
                                      lambda r: r["results"][0]["error_code"])
        code: int = resp["results"][0]["error_code"]
        return code

    async def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, p in sorted(set(partitions)):
            topics.setdefault(topic, []).append({"partition_index": p})
        body = {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        resp = await self.coordinated(group, ApiKey.OFFSET_DELETE, 0, body, lambda r: r["error_code"])
        return resp["error_code"], {(t["name"], p["partition_index"]): p["error_code"]
                                    for t in resp["topics"] for p in t["partitions"]}


class _Refused(AdminError):
    """A final answer (INVALID_GROUP_ID, an authorization failure...): no point asking again."""


class _Retry(Exception):
    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(code)
        self.code = code
        self.message = message
