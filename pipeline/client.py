"""A small synchronous consumer/producer over the project's own async protocol code.

Spark runs a data source's methods in separate Python worker processes, each calling plain
(blocking) functions. `BrokerSession` gives those functions a private event loop and drives
`fetcher.connection.KafkaConnection` on it, so no thread or loop outlives one planning call,
one partition read or one write task. It speaks only what minibroker serves: Metadata v1,
ListOffsets v1, Fetch v3, Produce v2, and FindCoordinator v1 with OffsetCommit v2 for the
streaming source's optional commits to a group; always as a consumer (replica_id -1) so that reads
and "latest" offsets stop at the high watermark, i.e. at data that can no longer disappear.

Every failure a user can cause (unknown topic, unreachable brokers, offsets outside the log)
surfaces as `MinibrokerError` with a message that names the cause; Spark shows that message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fast import decode_fetch_response
from protocol.records.message_set import Record, build_message_set
from protocol.records.records import decode_records
from protocol.schema import request_codec

FETCH_VERSION = 3  # v3 (KIP-74) always returns the first message whole, so a read never stalls
FIND_COORDINATOR_VERSION = 1
OFFSET_COMMIT_VERSION = 2  # the first with generation, member id and a retention time (-1: the broker's)
EARLIEST, LATEST = -2, -1
_RETRY_BACKOFF_S = 0.2

T = TypeVar("T")


class MinibrokerError(RuntimeError):
    """A failure the user can act on; its message is what Spark reports."""


@dataclass(frozen=True)
class ClientSettings:
    """Where the cluster is and how long to wait for it; picklable, so it travels to Spark workers."""

    bootstrap: tuple[tuple[str, int], ...]
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    client_id: str = "minibroker-spark"

    @property
    def bootstrap_text(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.bootstrap)


def parse_bootstrap(text: str) -> tuple[tuple[str, int], ...]:
    """`host:port[,host:port...]` (IPv6 as `[::1]:9092`) into pairs; raises on anything else."""
    servers = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise MinibrokerError(f"bootstrap.servers entry {item!r} is not host:port")
        servers.append((host.strip("[]"), int(port)))
    if not servers:
        raise MinibrokerError("option bootstrap.servers is empty")
    return tuple(servers)


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1 while no leader is elected


class BrokerSession:
    """Blocking calls against one cluster, on an event loop private to this object.

    Connections are opened lazily per broker and reused for the session's lifetime; `close()`
    (or leaving the `with` block) closes them and the loop.
    """

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self._conns: dict[tuple[str, int], KafkaConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[str, dict[int, PartitionInfo]] = {}  # per topic, until a request fails

    def __enter__(self) -> BrokerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        conns = list(self._conns.values())
        self._conns.clear()

        async def close_all() -> None:
            # Also waits for closes of connections dropped earlier, so no task outlives the loop.
            pending = asyncio.all_tasks() - {asyncio.current_task()}
            await asyncio.gather(*(c.close() for c in conns), *pending, return_exceptions=True)

        self._loop.run_until_complete(close_all())
        self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    # ---- connections -------------------------------------------------------------------------

    async def _connect(self, address: tuple[str, int]) -> KafkaConnection:
        conn = self._conns.get(address)
        if conn is not None and conn._closed_exc is None:
            return conn
        conn = await KafkaConnection.open(address[0], address[1], self.settings.client_id,
                                          timeout=self.settings.connect_timeout_s)
        self._conns[address] = conn
        return conn

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            self._loop.create_task(conn.close())

    async def _any_broker(self) -> KafkaConnection:
        """A connection to some bootstrap server, retried until the connect timeout runs out.

        Brokers being restarted refuse connections for a moment, so one refusal is not final;
        but a wrong address must fail within `timeout.ms`, not hang a Spark job.
        """
        deadline = time.monotonic() + self.settings.connect_timeout_s
        errors: dict[str, str] = {}
        while True:
            for address in self.settings.bootstrap:
                left = deadline - time.monotonic()
                try:
                    return await asyncio.wait_for(self._connect(address), max(left, 0.1))
                except (OSError, TimeoutError) as e:
                    errors[f"{address[0]}:{address[1]}"] = str(e) or type(e).__name__
            if time.monotonic() >= deadline:
                detail = "; ".join(f"{a}: {msg}" for a, msg in errors.items())
                raise MinibrokerError(
                    f"could not connect to any bootstrap server ({self.settings.bootstrap_text}) within "
                    f"{self.settings.connect_timeout_s:g} s (option timeout.ms): {detail}")
            await asyncio.sleep(min(_RETRY_BACKOFF_S, max(deadline - time.monotonic(), 0)))

    async def _request(self, conn: KafkaConnection, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await conn.request(api_key, version, body, timeout=self.settings.request_timeout_s)
        except TimeoutError as e:
            self._drop((conn.host, conn.port))
            raise MinibrokerError(f"broker {conn.host}:{conn.port} did not answer within "
                                  f"{self.settings.request_timeout_s:g} s (option request.timeout.ms)") from e

    async def _leader_conn(self, topic: str, partition: int) -> KafkaConnection:
        parts = self._leaders.get(topic) or await self._partitions(topic)
        info = parts.get(partition)
        if info is None:
            raise MinibrokerError(f"topic {topic!r} has no partition {partition} (it has {len(parts)})")
        address = self._brokers.get(info.leader)
        if address is None:
            self._leaders.pop(topic, None)
            raise _Retry(f"partition {topic}-{partition} has no leader")
        try:
            return await self._connect(address)
        except (OSError, TimeoutError) as e:
            self._leaders.pop(topic, None)
            raise _Retry(f"leader {info.leader} of {topic}-{partition} at {address[0]}:{address[1]} "
                         f"is unreachable: {e}") from e

    def _forget(self, topic: str, conn: KafkaConnection | None = None) -> None:
        """Drops what a failed request may have shown to be stale: the leaders, the connection."""
        self._leaders.pop(topic, None)
        if conn is not None:
            self._drop((conn.host, conn.port))

    # ---- metadata ----------------------------------------------------------------------------

    async def _partitions(self, topic: str) -> dict[int, PartitionInfo]:
        """Partitions and leaders of `topic`, refreshing the broker address book.

        Asks for all topics (Metadata v1, null list) rather than for `topic` by name: naming an
        unknown topic makes a broker with auto.create.topics.enable create it, and a reader
        that creates what it was asked to read would hide a typo.
        """
        conn = await self._any_broker()
        try:
            md = await self._request(conn, ApiKey.METADATA, 1, {"topics": None})
        except ConnectionError as e:
            self._drop((conn.host, conn.port))
            raise _Retry(f"metadata request to {conn.host}:{conn.port} failed: {e}") from e
        self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        for t in md["topics"]:
            if t["name"] == topic:
                if t["error_code"] not in (ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE):
                    raise _Retry(f"topic {topic!r}: {ErrorCode.name_of(t['error_code'])}")
                parts = {p["partition_index"]: PartitionInfo(p["partition_index"], p["leader_id"])
                         for p in t["partitions"]}
                if all(info.leader in self._brokers for info in parts.values()):
                    self._leaders[topic] = parts
                return parts
        raise MinibrokerError(f"unknown topic {topic!r}: no such topic on the cluster at "
                              f"{self.settings.bootstrap_text}")

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition numbers, waiting (within the connect timeout) for leaders."""
        parts = self._retrying(lambda: self._partitions(topic), f"metadata for topic {topic!r}")
        return sorted(parts)

    def _retrying(self, make: Any, what: str) -> Any:
        """Runs `make()` again on `_Retry` until the connect timeout has passed since the first try."""
        deadline = time.monotonic() + self.settings.connect_timeout_s
        while True:
            try:
                return self._run(make())
            except _Retry as e:
                if time.monotonic() >= deadline:
                    raise MinibrokerError(f"{what}: gave up after {self.settings.connect_timeout_s:g} s: {e}") from e
                time.sleep(_RETRY_BACKOFF_S)

    # ---- offsets -----------------------------------------------------------------------------

    async def _list_offsets(self, topic: str, timestamps: dict[int, int]) -> dict[int, int]:
        """ListOffsets v1 as a consumer: partition -> timestamp (EARLIEST, LATEST or ms) in,
        partition -> offset out (-1 when no record has a timestamp at or after the one asked)."""
        parts = await self._partitions(topic)
        by_leader: dict[int, list[int]] = {}
        for p in timestamps:
            if p not in parts:
                raise MinibrokerError(f"topic {topic!r} has no partition {p} (it has {len(parts)})")
            by_leader.setdefault(parts[p].leader, []).append(p)
        out: dict[int, int] = {}
        for leader, ps in by_leader.items():
            conn = await self._leader_conn(topic, ps[0])
            body = {"replica_id": -1, "topics": [
                {"name": topic, "partitions": [{"partition_index": p, "timestamp": timestamps[p]} for p in ps]}]}
            try:
                resp = await self._request(conn, ApiKey.LIST_OFFSETS, 1, body)
            except ConnectionError as e:
                self._forget(topic, conn)
                raise _Retry(f"ListOffsets to broker {leader} failed: {e}") from e
            for t in resp["topics"]:
                for rp in t["partitions"]:
                    code = rp["error_code"]
                    if code != ErrorCode.NONE:
                        self._forget(topic)
                        raise _Retry(f"ListOffsets {topic}-{rp['partition_index']}: {ErrorCode.name_of(code)}")
                    out[rp["partition_index"]] = rp["offset"]
        return out

    def list_offsets(self, topic: str, partitions: list[int], which: int) -> dict[int, int]:
        """EARLIEST (log start) or LATEST (high watermark) offset of each partition."""
        name = "earliest" if which == EARLIEST else "latest"
        return self._retrying(lambda: self._list_offsets(topic, {p: which for p in partitions}),
                              f"{name} offsets of topic {topic!r}")

    def offsets_for_times(self, topic: str, timestamps: dict[int, int]) -> dict[int, int]:
        """Kafka's offsetsForTimes: the first offset whose record timestamp is >= the partition's
        timestamp (ms), below the high watermark; -1 where there is none."""
        return self._retrying(lambda: self._list_offsets(topic, dict(timestamps)),
                              f"offsets by timestamp of topic {topic!r}")

    # ---- fetch -------------------------------------------------------------------------------

    async def _fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[int, bytes]:
        """(high watermark, record bytes) of one Fetch v3 for one partition, as a consumer."""
        conn = await self._leader_conn(topic, partition)
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]}
        try:
            raw = await asyncio.wait_for(
                conn.send_raw(ApiKey.FETCH, FETCH_VERSION, request_codec(ApiKey.FETCH, FETCH_VERSION).encode(body)),
                self.settings.request_timeout_s)
        except ConnectionError as e:
            self._forget(topic, conn)
            raise _Retry(f"fetch from {conn.host}:{conn.port} failed: {e}") from e
        except TimeoutError as e:
            self._forget(topic, conn)
            raise MinibrokerError(f"fetch {topic}-{partition} at offset {offset}: no answer from "
                                  f"{conn.host}:{conn.port} within {self.settings.request_timeout_s:g} s") from e
        assert raw is not None
        p = decode_fetch_response(raw, FETCH_VERSION)["responses"][0]["partitions"][0]
        code = p["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            raise MinibrokerError(f"offset {offset} is out of range for {topic}-{partition} (OFFSET_OUT_OF_RANGE): "
                                  f"the log does not hold it (deleted by retention, or not written yet)")
        if code != ErrorCode.NONE:
            if _retriable(code):
                self._forget(topic)
                raise _Retry(f"fetch {topic}-{partition}: {ErrorCode.name_of(code)}")
            raise MinibrokerError(f"fetch {topic}-{partition} at offset {offset}: {ErrorCode.name_of(code)}")
        return p["high_watermark"], bytes(p["records"] or b"")

    def fetch_range(self, topic: str, partition: int, start: int, end: int,
                    max_bytes: int = 1 << 20) -> Iterator[list[Record]]:
        """Every record with start <= offset < end, in offset order, as one list per fetch.

        A fetch response may end with a cut-off message (the broker sends a slice of a segment);
        `decode_records` leaves it out and the next fetch starts at the offset after the last
        complete one. A compressed wrapper comes back whole and its inner records carry absolute
        offsets, so those before `start` are dropped. The range was planned below the high
        watermark; a leader change can hold the watermark back for a moment, so an empty answer
        is retried within the connect timeout before the range is declared beyond the log.
        """
        offset = start
        deadline: float | None = None
        while offset < end:
            try:
                hw, data = self._run(self._fetch(topic, partition, offset, max_bytes))
                records = decode_records(data)
                nxt = records[-1].offset + 1 if records else offset
                if nxt <= offset:
                    if hw > offset and max_bytes < _MAX_FETCH_BYTES:
                        # Nothing complete fit (v3 should prevent it): ask for more at once.
                        max_bytes = min(max_bytes * 2, _MAX_FETCH_BYTES)
                        continue
                    raise _Retry(f"offset range {start}..{end} of {topic}-{partition} goes beyond the log, "
                                 f"which ends at {hw} (high watermark)")
            except _Retry as e:
                deadline = deadline or time.monotonic() + self.settings.connect_timeout_s
                if time.monotonic() >= deadline:
                    raise MinibrokerError(f"reading {topic}-{partition} at offset {offset}: {e}") from e
                time.sleep(_RETRY_BACKOFF_S)
                continue
            deadline = None
            batch = [r for r in records if offset <= r.offset < end]
            offset = nxt
            if batch:
                yield batch

    # ---- committing to a consumer group ------------------------------------------------------

    async def _coordinator(self, group: str) -> KafkaConnection:
        conn = await self._any_broker()
        try:
            resp = await self._request(conn, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                       {"key": group, "key_type": 0})
        except ConnectionError as e:
            self._drop((conn.host, conn.port))
            raise _Retry(f"FindCoordinator to {conn.host}:{conn.port} failed: {e}") from e
        code = resp["error_code"]
        if code != ErrorCode.NONE:
            if _retriable(code):
                raise _Retry(f"FindCoordinator for group {group!r}: {ErrorCode.name_of(code)}")
            raise MinibrokerError(f"FindCoordinator for group {group!r}: {ErrorCode.name_of(code)}")
        try:
            return await self._connect((resp["host"], resp["port"]))
        except (OSError, TimeoutError) as e:
            raise _Retry(f"coordinator {resp['node_id']} of group {group!r} is unreachable: {e}") from e

    async def _commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        conn = await self._coordinator(group)
        body = {"group_id": group, "generation_id": -1, "member_id": "", "retention_time_ms": -1,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                    for p, o in sorted(offsets.items())]}]}
        try:
            resp = await self._request(conn, ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION, body)
        except ConnectionError as e:
            self._drop((conn.host, conn.port))
            raise _Retry(f"OffsetCommit to {conn.host}:{conn.port} failed: {e}") from e
        codes = {p["error_code"] for t in resp["topics"] for p in t["partitions"]} - {ErrorCode.NONE}
        if not codes:
            return
        names = ", ".join(sorted(ErrorCode.name_of(c) for c in codes))
        if all(_retriable(c) for c in codes):
            raise _Retry(f"OffsetCommit of group {group!r}: {names}")
        raise MinibrokerError(f"OffsetCommit of group {group!r}: {names}")

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Commits `offsets` (partition -> next offset to read) of `topic` to `group` as a consumer
        outside the group (generation -1, no member id: Kafka's "simple consumer" commit), finding
        the coordinator again while it moves or loads, within the connect timeout."""
        if offsets:
            self._retrying(lambda: self._commit(group, topic, offsets), f"committing offsets to group {group!r}")

    # ---- produce -----------------------------------------------------------------------------

    async def _produce(self, topic: str, partition: int, data: bytes, acks: int) -> int:
        conn = await self._leader_conn(topic, partition)
        body = {"acks": acks, "timeout_ms": int(self.settings.request_timeout_s * 1000),
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}]}
        try:
            resp = await self._request(conn, ApiKey.PRODUCE, 2, body)
        except ConnectionError as e:
            self._forget(topic, conn)
            raise _Retry(f"produce to {conn.host}:{conn.port} failed: {e}") from e
        r = resp["responses"][0]["partition_responses"][0]
        code = r["error_code"]
        if code != ErrorCode.NONE:
            if _retriable(code):
                self._forget(topic)
                raise _Retry(f"produce {topic}-{partition}: {ErrorCode.name_of(code)}")
            raise MinibrokerError(f"produce to {topic}-{partition} failed: {ErrorCode.name_of(code)}")
        return r["base_offset"]

    def produce(self, topic: str, partition: int, records: list[tuple[bytes | None, bytes | None, int]],
                acks: int = -1, codec: int = 0) -> int:
        """Appends (key, value, timestamp_ms) records as one message set; returns the base offset.

        Like a Kafka producer without idempotence, a retry after a lost answer may append twice.
        """
        data = build_message_set(records, magic=1, codec=codec)
        return self._retrying(lambda: self._produce(topic, partition, data, acks),
                              f"producing to {topic}-{partition}")


def _retriable(code: int) -> bool:
    try:
        return ErrorCode(code).retriable
    except ValueError:
        return False


_MAX_FETCH_BYTES = 64 << 20


class _Retry(Exception):
    """A transient condition (no leader yet, leader moved, connection dropped): try again."""
