"""ListOffsets, versions 0-6 (Kafka 2.8's range; flexible from 6); 0-4 until InitProducerId is served.

Served versions: the data-path table is one Kafka release's (client-compat rule 3). kafka-python
reads ListOffsets v5 as "broker 2.2" and then turns its idempotent producer on by default, which
fails at once without InitProducerId; v0-4 change nothing in its (or librdkafka's) reading of
the table. So v5-6 are listed only once InitProducerId is declared (as Produce 3-9 is).

v1+ (Kafka's handleListOffsetRequestV1AndAbove and Partition.fetchOffsetForTimestamp):
timestamp -1 (latest) answers the high watermark to a consumer (replica_id -1) and the log end
to anyone else; -2 (earliest) the log start offset; any other timestamp the first record whose
timestamp is >= it, found through the segments' time indexes (broker.log.time_index), with that
record's timestamp. When no record qualifies, or the one found lies at or beyond the last
offset the requester may read (high watermark for consumers), the answer is offset -1 and
timestamp -1 with no error, as Kafka 2.8 answers. A partition listed twice is INVALID_REQUEST.
v2's isolation_level changes nothing here: without transactions the last stable offset is the
high watermark. v4's current_leader_epoch (-1: not checked) is held to the partition's leader
epoch from LeaderAndIsr: an older one is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
v4's leader_epoch in the response is the partition's leader epoch for "latest" and the record
batch's partition leader epoch for a timestamp (-1 in message formats 0/1); for "earliest" it
comes from `earliest_leader_epoch` (see there).

v0 (Kafka's legacyFetchOffsetsForTimestamp): up to max_num_offsets offsets, largest first:
segment base offsets by their files' last-modified time, plus the log end for "latest"; a
consumer never sees one above the high watermark (the high watermark takes its place).

replica_id -2 (debugging) may ask a follower, as Kafka allows; everyone else asks the leader
(NOT_LEADER_FOR_PARTITION otherwise). A partition whose log directory failed answers
KAFKA_STORAGE_ERROR.

A new leader whose high watermark has not yet reached its log end at election (the start of its
epoch) does not know what its followers hold: to a consumer, "latest", and a timestamp whose
record is not below the high watermark, are OFFSET_NOT_AVAILABLE (v5+; LEADER_NOT_AVAILABLE
before), as Kafka 2.8's Partition.fetchOffsetForTimestamp; "earliest" is answered.
Authorization: Describe on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.log import KafkaStorageError
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import MODULES
from protocol.messages import list_offsets as messages

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition

LATEST = -1
EARLIEST = -2
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
NO_EPOCH = -1
NO_TIMESTAMP = -1


def earliest_leader_epoch(part: Partition) -> int:
    """The leader epoch of the log start offset, for "earliest" (Kafka: the leader-epoch cache's
    earliest entry when it starts at or before the log start offset); -1 when the partition's
    leader-epoch cache does not know it (a log of magic 0/1 only)."""
    found = part.epochs.epoch_for_offset(part.log.log_start_offset)
    return NO_EPOCH if found is None else found


def _check_epoch(part: Partition, current_leader_epoch: int) -> ErrorCode:
    """Kafka's Partition.checkCurrentLeaderEpoch; -1 from the client means "not checked"."""
    if current_leader_epoch == NO_EPOCH:
        return ErrorCode.NONE
    if part.leader_epoch > current_leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if part.leader_epoch < current_leader_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    version = ctx.api_version
    replica_id = request["replica_id"]
    client = replica_id == CONSUMER_REPLICA_ID
    require_leader = replica_id != DEBUGGING_REPLICA_ID
    seen: set[tuple[str, int]] = set()
    duplicates: set[tuple[str, int]] = set()
    for topic in request["topics"]:
        for rp in topic["partitions"]:
            key = (topic["name"], rp["partition_index"])
            (duplicates if key in seen else seen).add(key)
    topics = []
    for topic in request["topics"]:
        name = topic["name"]
        parts = []
        refused = authorization.error(ctx, name)
        for rp in topic["partitions"]:
            idx = rp["partition_index"]
            out: dict[str, Any] = {"partition_index": idx, "error_code": 0, "old_style_offsets": [],
                                   "timestamp": NO_TIMESTAMP, "offset": -1, "leader_epoch": NO_EPOCH}
            parts.append(out)
            if refused:
                out["error_code"] = refused
                continue
            if version >= 1 and (name, idx) in duplicates:
                out["error_code"] = ErrorCode.INVALID_REQUEST
                continue
            if services.replicas.is_offline(name, idx):
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            part = services.replicas.get(name, idx)
            if part is None:
                known = services.metadata.partition(name, idx) is not None
                out["error_code"] = ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            error = _check_epoch(part, rp.get("current_leader_epoch", NO_EPOCH)) if version >= 4 else ErrorCode.NONE
            if error == ErrorCode.NONE and require_leader and part.leader != services.broker_id:
                error = ErrorCode.NOT_LEADER_FOR_PARTITION
            if error != ErrorCode.NONE:
                out["error_code"] = error
                continue
            try:
                if version >= 1 and client and _high_watermark_lags_epoch_start(part, rp["timestamp"]):
                    out["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
                elif version == 0:
                    out["old_style_offsets"] = _legacy_offsets(part, rp["timestamp"], rp.get("max_num_offsets", 1),
                                                               client)
                else:
                    out["timestamp"], out["offset"], out["leader_epoch"] = _offset_for(part, rp["timestamp"], client)
            except KafkaStorageError as e:
                services.replicas.fail_dir("read", e)
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
        topics.append({"name": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _high_watermark_lags_epoch_start(part: Partition, timestamp: int) -> bool:
    """Kafka's maybeOffsetsError, thrown for "latest" and for a timestamp found nowhere below the
    high watermark (the module docstring)."""
    if timestamp == EARLIEST or part.leader_epoch_start_offset <= part.high_watermark:
        return False
    if timestamp == LATEST:
        return True
    found = part.log.offset_for_timestamp(timestamp)
    return found is None or found[1] >= part.high_watermark


def _offset_for(part: Partition, timestamp: int, client: bool) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) of Partition.fetchOffsetForTimestamp."""
    last_fetchable = part.high_watermark if client else part.log_end_offset
    if timestamp == LATEST:
        return NO_TIMESTAMP, last_fetchable, part.leader_epoch
    if timestamp == EARLIEST:
        return NO_TIMESTAMP, part.log.log_start_offset, earliest_leader_epoch(part)
    found = part.log.offset_for_timestamp(timestamp)
    if found is None or found[1] >= last_fetchable:
        return NO_TIMESTAMP, -1, NO_EPOCH
    return found


def _legacy_offsets(part: Partition, timestamp: int, max_num_offsets: int, client: bool) -> list[int]:
    offsets = part.log.legacy_offsets_before(timestamp, max_num_offsets, int(time.time() * 1000))
    if client:
        hw = part.high_watermark
        if any(o > hw for o in offsets):
            return [hw] + [o for o in offsets if o <= hw]
    return offsets


# kafka-python 3's reading of ListOffsets v5 ("2.2": idempotence by default); v4 is the newest it reads as nothing.
BEFORE_IDEMPOTENCE_VERSIONS = (0, 4)


def served_versions() -> tuple[int, int]:
    """0-6 once InitProducerId is declared, else 0-4 (module docstring)."""
    if getattr(ApiKey, "INIT_PRODUCER_ID", None) in MODULES:
        versions: tuple[int, int] = messages.VERSIONS
        return versions
    return BEFORE_IDEMPOTENCE_VERSIONS


register(messages, handle, versions=served_versions())
