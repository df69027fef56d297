"""DeleteTopics, versions 0-6.

Per topic: UNKNOWN_TOPIC_OR_PARTITION when absent or when the name is not a legal topic name
(Kafka 2.8 answers those from its metadata cache, so "" is unknown, not INVALID_TOPIC_EXCEPTION;
the message says why), INVALID_REQUEST when named twice.
v6 names topics by name or by id. This broker has no topic ids (every topic's id is the zero
UUID, as Metadata v10+ and CreateTopics v7 say), so a non-zero id resolves to no topic and is
answered UNKNOWN_TOPIC_ID with a null name, as Kafka 2.8 answers an id it does not know; a null
name without an id is UNKNOWN_TOPIC_OR_PARTITION; a topic given both a name and a non-zero id
fails the whole request with INVALID_REQUEST on every topic, as Kafka's handler does.
An internal topic (`__consumer_offsets`) is refused with INVALID_TOPIC_EXCEPTION. Departure:
Kafka 2.8's broker deletes it (only kafka-topics.sh --zookeeper refuses); issue 18 asks for the
protection.
KIP-599: a topic to delete takes its partition count from the client's mutation quota
(broker.apis.mutation_quota; strict from v5, permissive before).
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from broker.apis.admin import AdminError, refuse_internal_deletion
from broker.apis.mutation_quota import MutationQuota
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import delete_topics as messages

ZERO_UUID = uuid.UUID(int=0)


def _requested(request: dict[str, Any], version: int) -> list[tuple[str | None, uuid.UUID]]:
    if version >= 6:
        return [(t["name"], t["topic_id"] or ZERO_UUID) for t in request.get("topics") or []]
    return [(name, ZERO_UUID) for name in request.get("topic_names") or []]


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    admin = ctx.services.admin
    requested = _requested(request, ctx.api_version)
    if any(name is not None and topic_id != ZERO_UUID for name, topic_id in requested):
        return {"throttle_time_ms": 0, "responses": [
            {"name": name, "topic_id": topic_id, "error_code": ErrorCode.INVALID_REQUEST,
             "error_message": "Topic name and topic ID can not both be specified."} for name, topic_id in requested]}
    counts = Counter(name for name, _ in requested if name is not None)
    quota = MutationQuota(ctx, strict=ctx.api_version >= 5)
    results = []
    deleting: list[str] = []
    for name, topic_id in requested:
        res: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0, "error_message": None}
        results.append(res)
        if topic_id != ZERO_UUID:
            res["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
            res["error_message"] = "This server does not host this topic ID."
            continue
        if name is None:
            res["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            res["error_message"] = "A topic needs a name or an id."
            continue
        if counts[name] > 1:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Duplicate topic {name} in request"
            continue
        try:
            async with admin.mutations:
                partitions = await admin.partition_count(name)
                refuse_internal_deletion(name)  # before the quota: a refusal costs no tokens
                if not quota.admit(partitions, res):
                    continue
                await admin.delete_topic(name)
                deleting.append(name)
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
    timeout = max(request.get("timeout_ms", 0), 0) / 1000
    md = ctx.services.metadata
    if deleting and timeout > 0:
        gone = await ctx.services.metadata_updated.wait_until(lambda: not any(n in md.topics for n in deleting), timeout)
        if not gone:
            for res in results:
                if res["name"] in md.topics and res["error_code"] == 0:
                    res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
    return {"throttle_time_ms": quota.finish(), "responses": results}


register(messages, handle)
