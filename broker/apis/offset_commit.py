"""OffsetCommit, versions 0-8 (flexible from 8): a group's consumed positions, kept in `__consumer_offsets`.

Kafka 2.8's handleOffsetCommitRequest: a partition of a topic this broker's metadata does not
know is UNKNOWN_TOPIC_OR_PARTITION and nothing of it is written; the rest goes to the
coordinator, which checks the member and generation (generation -1 of an empty group: a
simple consumer committing without group management) and answers once the commit is in every
in-sync replica of the group's `__consumer_offsets` partition. v1's commit timestamp and
v2-4's retention time are kept as Kafka keeps them (an expire timestamp, offset value v1).

Departure from Kafka: v0 commits are not written to ZooKeeper (Kafka 2.8 still does); they go
to `__consumer_offsets` like v1+ commits of a simple consumer (generation -1).
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import offset_commit as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    metadata = ctx.services.metadata
    known: dict[tuple[str, int], tuple[int, int, str | None, int]] = {}
    errors: dict[tuple[str, int], int] = {}
    for topic in request["topics"]:
        for p in topic["partitions"]:
            tp = (topic["name"], p["partition_index"])
            if metadata.partition(*tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known[tp] = (p["committed_offset"], p.get("committed_leader_epoch", -1), p["committed_metadata"],
                             p.get("commit_timestamp", -1))
    generation = request.get("generation_id", -1) if ctx.api_version >= 1 else -1
    errors.update(await ctx.services.group_coordinator.commit_offsets(
        request["group_id"], request.get("member_id", ""), request.get("group_instance_id"), generation, known,
        request.get("retention_time_ms", -1)))
    return {"throttle_time_ms": 0, "topics": [
        {"name": topic["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": errors[(topic["name"], p["partition_index"])]}
            for p in topic["partitions"]]}
        for topic in request["topics"]]}


register(messages, handle)
