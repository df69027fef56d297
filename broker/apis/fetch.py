"""Fetch, versions 0-3, with KIP-74's response-wide max_bytes and KIP-73's leader throttle.

For each partition in request order the log is read up to min(partition max_bytes, what
is left of the response limit). Until a partition has returned data, the first message
is returned whole even if larger than both limits (v3); after that, a v3 partition whose
first message does not fit gets empty records and no error, while v0-v2 return a partial
message as Kafka 0.10 did. Consumers (replica_id < 0) read up to the high watermark;
followers up to the log end. replica_id -2 (debug consumer) may read from a non-leader.
The response waits up to max_wait_ms for min_bytes, woken by appends. Record bytes travel
as slices of the segment files. A partition whose log directory failed (before or during
the read) gets KAFKA_STORAGE_ERROR.

Follower fetches (replica_id >= 0) first record the follower's fetch offset (ISR
bookkeeping), and only after checking it, in Kafka 2.8's order
(ReplicaManager.readFromLocalLog, then updateFollowerFetchState): a fetch offset below
the leader's log start or beyond its log end is OFFSET_OUT_OF_RANGE and records nothing
(a follower's fetch offset is its log end, which counts toward the high watermark). A
replica id that is not an assigned follower of the partition (another broker, the leader
itself) records nothing and gets empty records with no error and the current high
watermark: Kafka 2.8 has no error code for it, and its path (updateFollowerFetchState
returning false, then withEmptyFetchInfo) yields exactly that.

A partition listed in `leader.replication.throttled.replicas` whose follower is out of
the ISR is answered with empty records and the normal high watermark while the leader
quota is exceeded (KAFKA-4313 keeps in-sync replicas unthrottled); it costs nothing of
the response budget and counts nothing toward min_bytes. While the quota is not
exceeded, such partitions together get at most the quota's remaining allowance (a
departure from 0.10.1, which let one response overshoot by its whole size), and wait
while that is less than a minimum grant, so that leader and follower do not trade
crumbs. The bytes of every throttled partition in the response, in-sync ones included,
are recorded when the response is sent.

KIP-13 (consumers only; follower fetches are exempt): a client id over its fetch quota is
delayed before anything is read, by round((O - T) / T * W), and the response carries
that delay as throttle_time_ms (v1+). The bytes sent are recorded afterwards. Delaying
before the read, rather than holding a finished response as 0.10.1 did, means a throttled
consumer holds no log data while it waits, and gets the freshest data when it resumes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.log import KafkaStorageError, OffsetOutOfRange
from protocol.errors import ErrorCode
from protocol.fast import decode_fetch_request, encode_fetch_response
from protocol.messages import fetch as messages
from protocol.records.records import down_convert

DEBUG_REPLICA_ID = -2
THROTTLE_RECHECK_S = 0.05


def decode(buf: memoryview, version: int) -> dict[str, Any]:
    return decode_fetch_request(buf, version)


def _read_all(ctx: RequestContext, request: dict[str, Any],
              first_pass: bool) -> tuple[list[dict[str, Any]], int, int, bool]:
    services = ctx.services
    rm = services.replicas
    version = ctx.api_version
    replica_id = request["replica_id"]
    consumer = replica_id < 0
    leader_quota = services.throttles.leader
    exceeded: bool | None = None  # measured at most once per pass
    limit = request.get("max_bytes", 0x7FFFFFFF) if version >= 3 else 0x7FFFFFFF
    min_one = version >= 3
    total = throttled_bytes = limited_bytes = 0
    held_back = False
    allowance = float("inf")
    min_grant = 0.0
    responses = []
    for topic in request["topics"]:
        name = topic["topic"]
        parts = []
        for fp in topic["partitions"]:
            idx = fp["partition"]
            out: dict[str, Any] = {"partition_index": idx, "error_code": 0, "high_watermark": -1, "records": b""}
            parts.append(out)
            part = rm.get(name, idx)
            if rm.is_offline(name, idx):
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if part is None:
                known = services.metadata.partition(name, idx) is not None
                out["error_code"] = ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if part.leader != services.broker_id and replica_id != DEBUG_REPLICA_ID:
                out["error_code"] = ErrorCode.NOT_LEADER_FOR_PARTITION
                continue
            throttled = limited = False
            if not consumer:
                # Validated before anything is recorded: a fetch offset is taken as the
                # follower's log end, and one the leader does not have (or a replica id
                # posing as a follower) would move the high watermark.
                check = rm.check_follower_fetch(part, replica_id, fp["fetch_offset"])
                if check == "out_of_range":
                    out["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                    continue
                if check == "not_assigned":
                    # Kafka 2.8's answer: no error, empty records, the high watermark.
                    out["high_watermark"] = part.high_watermark
                    continue
                # Only when the request arrives, as Kafka does (fetchMessages, not the delayed
                # fetch's re-reads): a long poll re-read after the controller dropped this
                # follower (controlled shutdown) would put a replica that is going away back
                # into the ISR and pin the high watermark to its log end until it lags out.
                if first_pass:
                    rm.record_follower_fetch(part, replica_id, fp["fetch_offset"])
                throttled = leader_quota.is_throttled(name, idx)
                limited = throttled and replica_id not in part.isr
                if limited:
                    if exceeded is None:
                        exceeded = leader_quota.is_quota_exceeded()
                        allowance = leader_quota.allowance()
                        min_grant = leader_quota.min_grant()
                    # Wait for a grant worth sending (or for the whole ask, when it is smaller).
                    grant_floor = max(min(fp["partition_max_bytes"], limit, min_grant), 1)
                    if exceeded or allowance - limited_bytes < grant_floor:
                        held_back = True
                        out["high_watermark"] = part.high_watermark
                        continue
            out["high_watermark"] = part.high_watermark
            size = max(0, min(fp["partition_max_bytes"], limit))
            if limited:
                size = int(min(size, allowance - limited_bytes))
            try:
                sl = rm.read(part, fp["fetch_offset"], size, consumer=consumer,
                             min_one_message=min_one, allow_partial=version < 3)
                data = sl.read_bytes() if sl.length else b""
            except OffsetOutOfRange:
                out["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            except KafkaStorageError:
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            except OSError as e:  # the pread of the slice itself
                rm.fail_dir("read", e)
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if data and consumer:
                # Fetch v0-3 consumers read magic 0/1 only: batches are down-converted
                # (v2-produce's interim hook; KIP-74's sizes over converted data are the fetch side's).
                data = down_convert(data, fp["fetch_offset"])
            if data:
                out["records"] = data
                total += len(data)
                if throttled:
                    throttled_bytes += len(data)
                if limited:
                    limited_bytes += len(data)
                if version >= 3:
                    limit -= len(data)
                    min_one = False
        responses.append({"topic": name, "partitions": parts})
    return responses, total, throttled_bytes, held_back


async def handle(ctx: RequestContext, request: dict[str, Any]) -> list[bytes]:
    services = ctx.services
    rm = services.replicas
    consumer = request["replica_id"] < 0
    throttle_ms = 0
    if consumer:
        throttle_ms = services.fetch_quotas.throttle_before(ctx.client_id, services.now_ms())
        if throttle_ms:
            await asyncio.sleep(throttle_ms / 1000)
    deadline = time.monotonic() + max(request["max_wait_ms"], 0) / 1000
    min_bytes = request["min_bytes"]
    first_pass = True
    while True:
        responses, total, throttled_bytes, held_back = _read_all(ctx, request, first_pass)
        first_pass = False
        remaining = deadline - time.monotonic()
        errors = any(p["error_code"] for t in responses for p in t["partitions"])
        if total >= min_bytes or remaining <= 0 or errors:
            if throttled_bytes:
                services.throttles.leader.record(throttled_bytes)
            pieces = encode_fetch_response(ctx.api_version, throttle_ms, responses)
            if consumer:
                services.fetch_quotas.record_only(ctx.client_id, 4 + sum(len(p) for p in pieces), services.now_ms())
            return pieces
        # Not enough yet: what was read is read again on waking, so the wait holds none of it
        # (a long poll on a busy partition would otherwise pin up to max_bytes for max_wait_ms).
        del responses
        # Partitions held back by the leader throttle get their budget back continuously, so
        # look again soon rather than only when something is appended.
        await rm.appended.wait(min(remaining, THROTTLE_RECHECK_S) if held_back else remaining)


register(messages, handle, decode)
