"""OffsetDelete, version 0: removes a group's committed offsets of some partitions (KIP-496, Kafka 2.8's rules).

An empty group loses the offsets asked for; a live consumer group only those of topics none of
its members subscribes to (the others are GROUP_SUBSCRIBED_TO_TOPIC); a live group of another
protocol type is NON_EMPTY_GROUP. A partition this broker's metadata does not know is
UNKNOWN_TOPIC_OR_PARTITION. A group-level error answers with no topics.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import offset_delete as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    errors: dict[tuple[str, int], int] = {}
    known: list[tuple[str, int]] = []
    for topic in request["topics"]:
        for p in topic["partitions"]:
            tp = (topic["name"], p["partition_index"])
            if ctx.services.metadata.partition(*tp) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append(tp)
    error, deleted = await ctx.services.group_coordinator.delete_offsets(request["group_id"], known)
    if error != ErrorCode.NONE:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    errors.update(deleted)
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0, "topics": [
        {"name": topic["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": errors[(topic["name"], p["partition_index"])]}
            for p in topic["partitions"]]}
        for topic in request["topics"]]}


register(messages, handle)
