"""Replica fetcher: one task per (source broker, fetcher id), pulling with binary Fetch v3.

Each request carries replica_id = this broker, max_bytes = replica.fetch.response.max.bytes
(KIP-74), per-partition replica.fetch.max.bytes, replica.fetch.min.bytes and
replica.fetch.wait.max.ms, and lists its partitions in a freshly randomised order
(KIP-73's text; Kafka itself rotates), so no partition is starved by the response limit.
Errors back off replica.fetch.backoff.ms; OFFSET_OUT_OF_RANGE truncates to the leader's
log end, or restarts from its log start when this replica fell behind it.

Record sets travel as the leader stores them, magic 0/1 entries or RecordBatch v2 (the leader
never down-converts for a replica, whatever the Fetch version), as zero-copy slices of the
response; the sink checks them (protocol.records.records.shallow_validate) and writes them.

A partition added is first truncated (fetcher.truncation: OffsetForLeaderEpoch v3 to the
leader, KIP-101/KIP-279) and fetched only once that is done.

The broker side is reached only through `ReplicaSink`, so this module knows nothing of
logs or ZooKeeper.
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from dataclasses import dataclass
from typing import Protocol

import structlog

from fetcher.connection import KafkaConnection
from fetcher.security import PLAINTEXT, ClientSecurity
from fetcher.truncation import truncation_for
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fast import FetchPartitionV3, decode_fetch_response_v3_partitions
from protocol.messages import types as T

log = structlog.get_logger()

FETCH = ApiKey.FETCH
TP = tuple[str, int]


class ReplicaSink(Protocol):
    def log_end_offset(self, tp: TP) -> int | None: ...
    def log_end_offsets(self, tps: list[TP]) -> list[int | None]: ...  # log_end_offset of each, in one call
    def append(self, tp: TP, records: bytes | memoryview, leader_hw: int) -> int: ...
    def truncate_to(self, tp: TP, offset: int) -> None: ...
    def restart_at(self, tp: TP, offset: int) -> None: ...
    # Truncation by leader epoch (fetcher.truncation).
    def latest_epoch(self, tp: TP) -> int | None: ...
    def current_leader_epoch(self, tp: TP) -> int | None: ...
    def end_offset_for_epoch(self, tp: TP, epoch: int) -> tuple[int, int] | None: ...
    def high_watermark(self, tp: TP) -> int | None: ...


class FetchThrottle(Protocol):
    """KIP-73 follower side: leave a partition out while the follower quota is exceeded.

    `leave_out(tp)` is only ever true of a partition `limited(tp)` (throttled and out of sync),
    and is asked only of those."""

    def any_throttled(self) -> bool: ...  # false: no partition is throttled, so none is limited
    def leave_out(self, tp: TP) -> bool: ...
    def limited(self, tp: TP) -> bool: ...
    def budget(self) -> float: ...
    def reserve(self, nbytes: int) -> None: ...
    def release(self, nbytes: int) -> None: ...
    def record(self, tp: TP, nbytes: int) -> None: ...


# Below this much budget a throttled partition waits rather than asking for crumbs.
MIN_THROTTLED_FETCH = 16 * 1024
THROTTLE_POLL_S = 0.05

# Fetch v3 request (protocol.fast.encode_fetch_request_v3): replica_id, max_wait_ms, min_bytes,
# max_bytes, topic count; per topic its name (int16 length) and partition count; per partition
# its index, fetch offset and partition_max_bytes.
_REQUEST_HEAD = struct.Struct(">iiiii")
_NAME_LENGTH = struct.Struct(">h")
_COUNT = struct.Struct(">i")
_PARTITION = struct.Struct(">iqi")


@dataclass(slots=True)
class FetchPlan:
    """One Fetch v3 request as planned: its encoded body, and what the response is checked against."""

    body: bytes
    max_wait_ms: int
    # tp -> fetch offset, in request order (the partitions left out for want of budget are not here).
    asked: dict[TP, int]
    reserved: int = 0  # follower-quota bytes reserved for it, released once it is answered


@dataclass
class FetcherSettings:
    replica_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    response_max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    # How to reach the leaders' inter-broker listener (TLS, SASL).
    security: ClientSecurity = PLAINTEXT


class ReplicaFetcher:
    def __init__(self, host: str, port: int, source_id: int, settings: FetcherSettings, sink: ReplicaSink,
                 throttle: FetchThrottle | None = None, rng: random.Random | None = None) -> None:
        self.host, self.port, self.source_id = host, port, source_id
        self.settings = settings
        self.sink = sink
        self.throttle = throttle
        self.rng = rng or random.Random()
        self._throttled_out = False
        self.partitions: dict[TP, float] = {}  # tp -> not before (monotonic s), for per-partition back-off
        self.truncating: set[TP] = set()  # added, not yet truncated: not fetched
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: KafkaConnection | None = None
        self._names: dict[str, bytes] = {}  # topic -> its encoded name, as a request carries it
        self._last_asked: dict[TP, int] = {}
        # tp -> (fetch offset, leader high watermark) of the last idle answer taken in at that
        # offset: the same answer again changes nothing (see _handle). Dropped whenever anything
        # else happens to the partition here (an append, an error, a truncation, add or remove).
        self._idle: dict[TP, tuple[int, int]] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._conn is not None:
            await self._conn.close()

    def add(self, tp: TP) -> None:
        self.partitions[tp] = 0.0
        self.truncating.add(tp)
        self._idle.pop(tp, None)
        self._wake.set()

    def remove(self, tp: TP) -> None:
        self.partitions.pop(tp, None)
        self.truncating.discard(tp)
        self._idle.pop(tp, None)

    def build_request(self, now: float) -> FetchPlan | None:
        truncating = self.truncating
        ready = [tp for tp, not_before in self.partitions.items()
                 if not_before <= now and not (truncating and tp in truncating)]
        self._throttled_out = False
        # Throttled partitions out of sync, asked once each per request (most partitions of a
        # follower are neither, and were asked three times: leave_out, then limited again).
        limited: set[TP] = set()
        throttle = self.throttle
        if throttle is not None and throttle.any_throttled():
            limited = {tp for tp in ready if throttle.limited(tp)}
            if limited:
                kept = [tp for tp in ready if tp not in limited or not throttle.leave_out(tp)]
                self._throttled_out = len(kept) < len(ready)
                ready = kept
        if not ready:
            return None
        self.rng.shuffle(ready)  # a list of its own, built above
        offsets = self.sink.log_end_offsets(ready)
        # Throttled, lagging partitions share what is left of the follower budget, in the
        # shuffled order; once it is spent they wait for the next request.
        budget = throttle.budget() if throttle is not None and limited else float("inf")
        reserved = 0
        # Fetch v3 groups partitions under topics; keep the shuffled order, opening a new
        # topic block whenever the topic changes (a topic may appear more than once). Encoded
        # here as it is planned (protocol.fast.encode_fetch_request_v3's bytes, which the tests
        # hold it to), with each topic's name encoded once per fetcher.
        partition_max_bytes = self.settings.partition_max_bytes
        pack = _PARTITION.pack
        names = self._names
        asked: dict[TP, int] = {}
        topics = bytearray()
        n_topics = count = 0
        count_at = -1
        current = None
        for tp, offset in zip(ready, offsets, strict=True):
            if offset is None:
                continue  # no longer hosted here
            topic = tp[0]
            max_bytes = partition_max_bytes
            if limited and tp in limited:
                if budget < min(max_bytes, MIN_THROTTLED_FETCH):
                    self._throttled_out = True
                    continue
                max_bytes = int(min(max_bytes, budget))
                budget -= max_bytes
                reserved += max_bytes
            if topic != current:
                if count_at >= 0:
                    _COUNT.pack_into(topics, count_at, count)
                name = names.get(topic)
                if name is None:
                    encoded = topic.encode()
                    name = names[topic] = _NAME_LENGTH.pack(len(encoded)) + encoded
                topics += name
                count_at = len(topics)
                topics += b"\0\0\0\0"
                n_topics += 1
                count = 0
                current = topic
            topics += pack(tp[1], offset, max_bytes)
            count += 1
            asked[tp] = offset
        if not asked:
            return None
        _COUNT.pack_into(topics, count_at, count)
        if reserved and throttle is not None:
            throttle.reserve(reserved)
        s = self.settings
        # Throttled partitions left out for want of budget get it back within THROTTLE_POLL_S;
        # a request of only in-sync, idle partitions must not park them for a whole
        # replica.fetch.wait.max.ms (it did, at the tail of every throttled catch-up).
        max_wait = min(s.max_wait_ms, int(THROTTLE_POLL_S * 1000)) if self._throttled_out else s.max_wait_ms
        body = _REQUEST_HEAD.pack(s.replica_id, max_wait, s.min_bytes, s.response_max_bytes, n_topics) + topics
        self._last_asked = asked
        return FetchPlan(body, max_wait, asked, reserved)

    @property
    def last_request_order(self) -> list[TP]:
        """The partitions of the last request built, in its (randomised) order."""
        return list(self._last_asked)

    async def _connection(self) -> KafkaConnection:
        if self._conn is None:
            # Every fetch response is appended before the next Fetch goes out (see _run), so
            # the connection may recycle the response buffer.
            self._conn = await KafkaConnection.open(self.host, self.port,
                                                    client_id=f"replica-fetcher-{self.settings.replica_id}", timeout=5,
                                                    reuse_fetch_buffers=True, security=self.settings.security)
        return self._conn

    async def _run(self) -> None:
        backoff = self.settings.backoff_ms / 1000
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.truncating:
                await self._truncate_all()
            plan = self.build_request(time.monotonic())
            if plan is None:
                # Every partition is left out (throttled or backing off): wait, as Kafka does,
                # but only briefly when the throttle is the reason: its budget refills
                # continuously, and a whole back-off would leave a tenth of the quota unused.
                self._wake.clear()
                wait = THROTTLE_POLL_S if self._throttled_out else backoff
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except TimeoutError:
                    pass
                continue
            reserved = plan.reserved
            try:
                conn = self._conn or await self._connection()
                # Record sets stay zero-copy slices of the response frame all the way to the log write.
                raw = await conn.send_within(FETCH, 3, plan.body, plan.max_wait_ms / 1000 + 30)
                response = decode_fetch_response_v3_partitions(raw)
            except asyncio.CancelledError:
                if reserved and self.throttle is not None:
                    self.throttle.release(reserved)
                raise
            except Exception as e:
                if reserved and self.throttle is not None:
                    self.throttle.release(reserved)
                log.info("fetcher.request_failed", source=self.source_id, error=type(e).__name__)
                if self._conn is not None:
                    await self._conn.close()
                    self._conn = None
                await asyncio.sleep(backoff)
                continue
            try:
                if self._handle(plan, response):
                    await self._handle_out_of_range(conn, plan, response)
            finally:
                if reserved and self.throttle is not None:
                    self.throttle.release(reserved)

    def _handle(self, plan: FetchPlan, response: list[FetchPartitionV3]) -> bool:
        """Appends what came and takes in the leader's high watermarks; true if a partition is
        OFFSET_OUT_OF_RANGE (for _handle_out_of_range, which talks to the leader)."""
        asked = plan.asked
        partitions, truncating, sink = self.partitions, self.truncating, self.sink
        idle = self._idle
        out_of_range = False
        for topic, index, code, hw, records in response:
            tp = (topic, index)
            offset = asked.get(tp)
            if offset is None or tp not in partitions or (truncating and tp in truncating):
                continue  # not asked, or removed or moved while the request was in flight
            if code == 0 and not records:
                # An idle partition: only the leader's high watermark is news, and none when it
                # is the one already taken in at this log end (most partitions of most rounds).
                if idle.get(tp) == (offset, hw):
                    continue
                if sink.log_end_offset(tp) != offset:
                    continue
                try:
                    sink.append(tp, b"", hw)
                except Exception as e:
                    idle.pop(tp, None)
                    log.error("fetcher.append_failed", topic=topic, partition=index, error=str(e))
                    partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000
                    continue
                idle[tp] = (offset, hw)
                continue
            idle.pop(tp, None)
            if sink.log_end_offset(tp) != offset:
                continue  # moved while the request was in flight
            if code == ErrorCode.NONE:
                try:
                    appended = sink.append(tp, records or b"", hw)
                except Exception as e:
                    log.error("fetcher.append_failed", topic=topic, partition=index, error=str(e))
                    partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000
                    continue
                if self.throttle is not None and appended:
                    self.throttle.record(tp, appended)
            elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                out_of_range = True
            else:
                log.info("fetcher.partition_error", topic=topic, partition=index, error=ErrorCode(code).name)
                partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000
        return out_of_range

    async def _handle_out_of_range(self, conn: KafkaConnection, plan: FetchPlan,
                                   response: list[FetchPartitionV3]) -> None:
        for topic, index, code, _, _ in response:
            tp = (topic, index)
            if code != ErrorCode.OFFSET_OUT_OF_RANGE or tp not in self.partitions or tp in self.truncating:
                continue
            if self.sink.log_end_offset(tp) != plan.asked.get(tp):
                continue  # moved while the request was in flight (or by an earlier recovery)
            await self._out_of_range(conn, tp)

    async def _out_of_range(self, conn: KafkaConnection, tp: TP) -> None:
        async def offset(ts: int) -> int:
            body = T.ListOffsetsRequest(replica_id=self.settings.replica_id, topics=[
                {"name": tp[0], "partitions": [{"partition_index": tp[1], "timestamp": ts}]}])
            resp = await conn.call(T.LIST_OFFSETS, 1, body)
            part = resp["topics"][0]["partitions"][0]
            if part["error_code"]:
                raise RuntimeError(ErrorCode(part["error_code"]).name)
            return part["offset"]

        self._idle.pop(tp, None)
        try:
            leader_end = await offset(-1)
            mine = self.sink.log_end_offset(tp)
            if mine is None:
                return
            if leader_end < mine:
                log.warning("fetcher.truncating", topic=tp[0], partition=tp[1], to=leader_end, log_end_offset=mine)
                self.sink.truncate_to(tp, leader_end)
            else:
                # Kafka's handleOutOfRangeError: start again empty only when the leader's log starts
                # above ours ends (its retention passed us); else the fetch is retried from our end.
                leader_start = await offset(-2)
                if leader_start > mine:
                    log.warning("fetcher.restarting", topic=tp[0], partition=tp[1], at=leader_start)
                    self.sink.restart_at(tp, leader_start)
                else:
                    self.partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000
        except Exception as e:
            log.info("fetcher.out_of_range_failed", topic=tp[0], partition=tp[1], error=str(e))
            self.partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000

    # ---- truncation by leader epoch (KIP-101) ------------------------------------------

    async def _truncate_all(self) -> None:
        """Truncate every partition due for it; a failure backs off only the partitions asked."""
        now = time.monotonic()
        due = [tp for tp in self.truncating if self.partitions.get(tp, 0.0) <= now]
        asking: dict[TP, tuple[int, int]] = {}
        for tp in due:
            epoch = self.sink.latest_epoch(tp)
            current = self.sink.current_leader_epoch(tp)
            if epoch is None or current is None:
                hw = self.sink.high_watermark(tp)
                if hw is not None:
                    self._cut(tp, hw, "high_watermark")
                self.truncating.discard(tp)
            else:
                asking[tp] = (current, epoch)
        if not asking:
            return
        try:
            conn = await self._connection()
            answers = await self._offsets_for_leader_epoch(conn, asking)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.info("fetcher.offset_for_leader_epoch_failed", source=self.source_id, error=type(e).__name__)
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
            for tp in asking:
                self.partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000
            return
        for tp, (current, _) in asking.items():
            # Dropped, or handed over again with another epoch, while the request was out: not ours to cut.
            if tp not in self.truncating or self.sink.current_leader_epoch(tp) != current:
                continue
            answer = answers.get(tp)
            if answer is None or answer[0] != ErrorCode.NONE:
                error = "MISSING" if answer is None else ErrorCode.name_of(answer[0])
                log.info("fetcher.truncation_error", topic=tp[0], partition=tp[1], error=error)
                self.partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000
                continue
            self._truncate_one(tp, answer[1], answer[2])

    def _truncate_one(self, tp: TP, leader_epoch: int, leader_end_offset: int) -> None:
        leo, hw = self.sink.log_end_offset(tp), self.sink.high_watermark(tp)
        if leo is None or hw is None:
            self.truncating.discard(tp)
            return
        cut = truncation_for(leader_epoch, leader_end_offset, high_watermark=hw, log_end_offset=leo,
                             own_end_offset_for=lambda epoch: self.sink.end_offset_for_epoch(tp, epoch))
        self._cut(tp, cut.offset, f"leader epoch {leader_epoch} ends at {leader_end_offset}")
        if cut.complete:
            self.truncating.discard(tp)
        # Otherwise the next round asks again, with the latest epoch left after this cut (KIP-279).

    def _cut(self, tp: TP, offset: int, reason: str) -> None:
        self._idle.pop(tp, None)
        leo = self.sink.log_end_offset(tp)
        if leo is not None and offset < leo:
            log.info("fetcher.truncating", topic=tp[0], partition=tp[1], to=offset, log_end_offset=leo, reason=reason)
        try:
            self.sink.truncate_to(tp, offset)
        except Exception as e:
            log.error("fetcher.truncate_failed", topic=tp[0], partition=tp[1], error=str(e))
            self.partitions[tp] = time.monotonic() + self.settings.backoff_ms / 1000

    async def _offsets_for_leader_epoch(self, conn: KafkaConnection,
                                        asking: dict[TP, tuple[int, int]]) -> dict[TP, tuple[int, int, int]]:
        """OffsetForLeaderEpoch v3 for `asking` (tp -> (current leader epoch, epoch)):
        tp -> (error code, leader epoch, end offset)."""
        by_topic: dict[str, list[T.OffsetForLeaderEpochRequestTopicPartition]] = {}
        for (topic, p), (current, epoch) in asking.items():
            by_topic.setdefault(topic, []).append(
                {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch})
        body = T.OffsetForLeaderEpochRequest(
            replica_id=self.settings.replica_id,
            topics=[{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()])
        # Bounded: a leader that stopped answering must not hold the truncation (and so the
        # partition) for the connection's whole 30 s default.
        resp = await conn.call(T.OFFSET_FOR_LEADER_EPOCH, 3, body, timeout=self.settings.max_wait_ms / 1000 + 5)
        return {(t["topic"], p["partition"]): (p["error_code"], p["leader_epoch"], p["end_offset"])
                for t in resp["topics"] for p in t["partitions"]}
