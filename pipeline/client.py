"""A small synchronous consumer/producer over the project's own async protocol code.

Spark runs a data source's methods in separate Python worker processes, each calling plain
(blocking) functions. `BrokerSession` gives those functions a private event loop and drives
`fetcher.connection.KafkaConnection` on it, so no thread or loop outlives one planning call,
one partition read or one write task. It speaks only what minibroker serves: Metadata v1,
ListOffsets v1, Fetch v5 (RecordBatch v2 as stored, so record headers arrive; v3 would get
them down-converted to magic 1, which has no headers), Produce v8 with RecordBatch v2 (headers;
InitProducerId v1 for the idempotent sink), and FindCoordinator v1 with OffsetCommit v2 for the
streaming source's optional commits to a group; always as a consumer (replica_id -1) so that reads
and "latest" offsets stop at the high watermark, i.e. at data that can no longer disappear.

Every failure a user can cause (unknown topic, unreachable brokers, offsets outside the log)
surfaces as `MinibrokerError` with a message that names the cause; Spark shows that message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from fetcher.connection import KafkaConnection
from fetcher.sasl_client import SaslAuthenticationError
from fetcher.security import PLAINTEXT, ClientSecurity, SecurityConfigError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fast import decode_fetch_response
from protocol.records.message_set import Record
from protocol.records.records import decode_records
from protocol.schema import request_codec

# v5: the log's RecordBatch v2 bytes as stored (with headers), the partition's log start offset;
# from v3 (KIP-74) the first message always comes whole, so a read never stalls.
FETCH_VERSION = 5
READ_UNCOMMITTED = 0  # isolation_level; minibroker has no transactions, so both levels read alike
FIND_COORDINATOR_VERSION = 1
OFFSET_COMMIT_VERSION = 2  # the first with generation, member id and a retention time (-1: the broker's)
PRODUCE_VERSION = 8  # Kafka 2.8's producer's: RecordBatch v2 (headers, producer id, sequence), error_message
INIT_PRODUCER_ID_VERSION = 1  # the last non-flexible one; an idempotent producer needs nothing newer
_NO_TRANSACTION_TIMEOUT_MS = 2**31 - 1  # what Kafka's idempotent producer sends (Integer.MAX_VALUE)
_ANSWER_MARGIN_S = 5.0
EARLIEST, LATEST = -2, -1
_RETRY_BACKOFF_S = 0.2

T = TypeVar("T")
_log = logging.getLogger(__name__)


class MinibrokerError(RuntimeError):
    """A failure the user can act on; its message is what Spark reports."""


class DataLossError(MinibrokerError):
    """Offsets a query was to read are no longer in the log (retention, topic deletion)."""


# Spark's wording (KafkaSourceProvider's INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_*), naming this broker.
DATA_LOSS_FAIL = ("Some data may have been lost because they are not available in minibroker any more; either "
                  "the data was aged out by retention or the topic may have been deleted before all the data "
                  "in the topic was processed. If you don't want your streaming query to fail on such cases, "
                  "set the source option failOnDataLoss to false.")
DATA_LOSS_SKIP = ("Some data may have been lost because they are not available in minibroker any more; either "
                  "the data was aged out by retention or the topic may have been deleted before all the data "
                  "in the topic was processed. If you want your streaming query to fail on such cases, set the "
                  "source option failOnDataLoss to true.")


@dataclass(frozen=True)
class ClientSettings:
    """Where the cluster is, how to log in to it and how long to wait for it; picklable, so it
    travels to Spark workers (ClientSecurity's repr leaves out passwords and inline keys)."""

    bootstrap: tuple[tuple[str, int], ...]
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    client_id: str = "minibroker-spark"
    security: ClientSecurity = PLAINTEXT

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
        try:
            conn = await KafkaConnection.open(address[0], address[1], self.settings.client_id,
                                              timeout=self.settings.connect_timeout_s, security=self.settings.security)
        except SaslAuthenticationError as e:
            # Final, not retried (Kafka's clients give up too); the broker's message names no secret.
            raise MinibrokerError(f"authentication to {address[0]}:{address[1]} failed: {e}") from None
        except SecurityConfigError as e:
            raise MinibrokerError(f"option kafka.{e.key}: {e.why}") from None
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

    async def _ask(self, conn: KafkaConnection, api_key: int, version: int, body: dict[str, Any],
                   what: str) -> dict[str, Any]:
        """`_request` for calls that may go to any broker: a dropped connection is forgotten and
        the call retried (`_Retry`), naming `what` was asked of whom."""
        try:
            return await self._request(conn, api_key, version, body)
        except ConnectionError as e:
            self._drop((conn.host, conn.port))
            # Why it closed (e.g. a TLS 1.3 alert refusing the client certificate after the handshake).
            why = f" ({e.__cause__})" if e.__cause__ is not None else ""
            raise _Retry(f"{what} to {conn.host}:{conn.port} failed: {e}{why}") from e

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
        md = await self._ask(conn, ApiKey.METADATA, 1, {"topics": None}, "metadata request")
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

    async def _topic_partitions(self) -> dict[str, list[int]]:
        """Every topic that is not internal, with its partition numbers (Metadata v1, all topics)."""
        conn = await self._any_broker()
        md = await self._ask(conn, ApiKey.METADATA, 1, {"topics": None}, "metadata request")
        self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        return {t["name"]: sorted(p["partition_index"] for p in t["partitions"]) for t in md["topics"]
                if not t["is_internal"] and t["error_code"] in (ErrorCode.NONE, ErrorCode.REPLICA_NOT_AVAILABLE)}

    def topic_partitions(self) -> dict[str, list[int]]:
        """Topic -> partition numbers of every topic but the internal ones, as Kafka's admin lists
        them (what Spark's subscribePattern matches against)."""
        parts: dict[str, list[int]] = self._retrying(self._topic_partitions, "listing topics")
        return parts

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition numbers, waiting (within the connect timeout) for leaders."""
        parts = self._retrying(lambda: self._partitions(topic), f"metadata for topic {topic!r}")
        return sorted(parts)

    def _retrying(self, make: Callable[[], Coroutine[Any, Any, T]], what: str) -> T:
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
        """(high watermark, record bytes) of one Fetch v5 for one partition, as a consumer."""
        conn = await self._leader_conn(topic, partition)
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                "isolation_level": READ_UNCOMMITTED,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "log_start_offset": -1,
                     "partition_max_bytes": max_bytes}]}]}
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
            raise _OutOfRange(f"offset {offset} is out of range for {topic}-{partition} (OFFSET_OUT_OF_RANGE): "
                              f"the log does not hold it (deleted by retention, or not written yet)")
        if code != ErrorCode.NONE:
            if _retriable(code):
                self._forget(topic)
                raise _Retry(f"fetch {topic}-{partition}: {ErrorCode.name_of(code)}")
            raise MinibrokerError(f"fetch {topic}-{partition} at offset {offset}: {ErrorCode.name_of(code)}")
        return p["high_watermark"], bytes(p["records"] or b"")

    def fetch_range(self, topic: str, partition: int, start: int, end: int, max_bytes: int = 1 << 20,
                    with_headers: bool = False, fail_on_data_loss: bool = True) -> Iterator[list[Record]]:
        """Every record with start <= offset < end, in offset order, as one list per fetch.

        A fetch response may end with a cut-off message (the broker sends a slice of a segment);
        `decode_records` leaves it out and the next fetch starts at the offset after the last
        complete one. A compressed wrapper comes back whole and its inner records carry absolute
        offsets, so those before `start` are dropped. The range was planned below the high
        watermark; a leader change can hold the watermark back for a moment, so an empty answer
        is retried within the connect timeout before the range is declared beyond the log.

        Offsets that retention deleted (or a deleted topic) after the range was planned are data
        loss, as in Spark's Kafka source: DataLossError naming the partition and the lost range,
        or with `fail_on_data_loss` false a warning and a skip to the log's start.
        """
        offset = start
        deadline: float | None = None
        while offset < end:
            try:
                hw, data = self._run(self._fetch(topic, partition, offset, max_bytes))
                records = decode_records(data, with_headers)
                nxt = records[-1].offset + 1 if records else offset
                if nxt <= offset:
                    if hw > offset and max_bytes < _MAX_FETCH_BYTES:
                        # Nothing complete fit (v3 should prevent it): ask for more at once.
                        max_bytes = min(max_bytes * 2, _MAX_FETCH_BYTES)
                        continue
                    raise _Retry(f"offset range {start}..{end} of {topic}-{partition} goes beyond the log, "
                                 f"which ends at {hw} (high watermark)")
            except _OutOfRange as e:
                offset = self._skip_lost(topic, partition, offset, end, fail_on_data_loss, e)
                continue
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

    def _skip_lost(self, topic: str, partition: int, offset: int, end: int, fail: bool, cause: Exception) -> int:
        """Where a read of [offset, end) goes on after OFFSET_OUT_OF_RANGE at `offset`: fails with
        the lost range, or (not `fail`) returns the log start, or `end` when nothing of the range is left."""
        try:
            earliest = self.list_offsets(topic, [partition], EARLIEST)[partition]
            latest = self.list_offsets(topic, [partition], LATEST)[partition]
        except MinibrokerError as e:  # the topic is gone: nothing of the range is left
            earliest = latest = -1
            held = f"the topic is gone ({e})"
        else:
            held = f"the log now holds offsets [{earliest}, {latest})"
        if earliest <= offset < latest:
            raise MinibrokerError(f"reading {topic}-{partition} at offset {offset}: {cause}") from cause
        lost_to = end if earliest < 0 or earliest >= end or offset >= latest else earliest
        message = f"Could not read records in offset [{offset}, {lost_to}) for topic partition {topic}-{partition}: {held}"
        if fail:
            raise DataLossError(f"{message}. {DATA_LOSS_FAIL}") from cause
        _log.warning("%s; records in [%d, %d) are skipped. %s", message, offset, lost_to, DATA_LOSS_SKIP)
        return lost_to

    # ---- committing to a consumer group ------------------------------------------------------

    async def _coordinator(self, group: str) -> KafkaConnection:
        conn = await self._any_broker()
        resp = await self._ask(conn, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                               {"key": group, "key_type": 0}, "FindCoordinator")
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
        resp = await self._ask(conn, ApiKey.OFFSET_COMMIT, OFFSET_COMMIT_VERSION, body, "OffsetCommit")
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

    async def _init_producer_id(self) -> tuple[int, int]:
        conn = await self._any_broker()
        body = {"transactional_id": None, "transaction_timeout_ms": _NO_TRANSACTION_TIMEOUT_MS}
        resp = await self._ask(conn, ApiKey.INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION, body, "InitProducerId")
        code = resp["error_code"]
        if code != ErrorCode.NONE:
            if _retriable(code):
                raise _Retry(f"InitProducerId: {ErrorCode.name_of(code)}")
            raise MinibrokerError(f"InitProducerId failed: {ErrorCode.name_of(code)}")
        return resp["producer_id"], resp["producer_epoch"]

    def init_producer_id(self) -> tuple[int, int]:
        """(producer id, epoch) for an idempotent producer (no transactional id), from any broker."""
        return self._retrying(self._init_producer_id, "getting a producer id (InitProducerId)")

    async def _produce_batch(self, topic: str, partition: int, batch: bytes, acks: int, idempotent: bool) -> int:
        conn = await self._leader_conn(topic, partition)
        body = {"transactional_id": None, "acks": acks, "timeout_ms": int(self.settings.request_timeout_s * 1000),
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
        try:
            # The broker waits up to timeout_ms for the replicas; give its answer time to arrive.
            resp = await conn.request(ApiKey.PRODUCE, PRODUCE_VERSION, body,
                                      timeout=self.settings.request_timeout_s + _ANSWER_MARGIN_S)
        except ConnectionError as e:
            self._forget(topic, conn)
            raise _Retry(f"produce to {conn.host}:{conn.port} failed: {e}") from e
        except TimeoutError as e:
            self._forget(topic, conn)
            if idempotent:  # the same batch again is recognised by its sequence, never appended twice
                raise _Retry(f"produce to {conn.host}:{conn.port}: no answer within "
                             f"{self.settings.request_timeout_s:g} s") from e
            raise MinibrokerError(f"produce to {topic}-{partition}: no answer from {conn.host}:{conn.port} within "
                                  f"{self.settings.request_timeout_s:g} s (option request.timeout.ms)") from e
        r = resp["responses"][0]["partition_responses"][0]
        code = r["error_code"]
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            return -1  # appended by an earlier attempt of this very request
        if code != ErrorCode.NONE:
            if _retriable(code):
                self._forget(topic)
                raise _Retry(f"produce {topic}-{partition}: {ErrorCode.name_of(code)}")
            detail = f": {r['error_message']}" if r.get("error_message") else ""
            raise MinibrokerError(f"produce to {topic}-{partition} failed: {ErrorCode.name_of(code)}{detail}")
        base_offset: int = r["base_offset"]  # Produce v8's schema: an int64
        return base_offset

    def produce_batch(self, topic: str, partition: int, batch: bytes, acks: int = -1,
                      idempotent: bool = False) -> int:
        """Appends one RecordBatch v2 (Produce v8); returns its base offset (-1: a duplicate).

        A request that got no answer (connection lost, timeout, leader moved) is sent again with
        the same bytes until the connect timeout has passed. With a producer id and sequence in
        the batch (`idempotent`), the partition's leader recognises a batch it already appended
        and answers with the original offsets instead of appending it twice; without one, a
        retry after a lost answer may append twice, as with any non-idempotent Kafka producer.
        """
        return self._retrying(lambda: self._produce_batch(topic, partition, batch, acks, idempotent),
                              f"producing to {topic}-{partition}")


def _retriable(code: int) -> bool:
    try:
        return ErrorCode(code).retriable
    except ValueError:
        return False


_MAX_FETCH_BYTES = 64 << 20


class _Retry(Exception):
    """A transient condition (no leader yet, leader moved, connection dropped): try again."""


class _OutOfRange(Exception):
    """Fetch answered OFFSET_OUT_OF_RANGE: the offset is below the log start or above its end."""
