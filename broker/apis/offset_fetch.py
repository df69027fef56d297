"""OffsetFetch, versions 0-7 (flexible from 6): a group's committed offsets (Kafka 2.8's rules).

A partition without a committed offset is offset -1, metadata "", no error. From v2 a null
topic list asks for every committed partition and a group-level error (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS…) is the top-level error_code with no topics; before v2 that
error is repeated on every partition asked for. v7's require_stable answers
UNSTABLE_OFFSET_COMMIT for a partition whose commit is still being written (there are no
transactional commits here to wait for).

Departure from Kafka: v0 reads `__consumer_offsets` like v1 (Kafka 2.8 reads ZooKeeper).
Authorization: Describe on the group (else GROUP_AUTHORIZATION_FAILED), Describe on each topic
(else TOPIC_AUTHORIZATION_FAILED for its partitions; left out of an all-topics answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import offset_fetch as messages

if TYPE_CHECKING:
    from broker.group.machine import FetchedOffset


def _topics(order: list[tuple[str, int]], partitions: dict[tuple[str, int], tuple[int, int, str, int]]
            ) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp in order:
        offset, epoch, metadata, error = partitions[tp]
        by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "committed_offset": offset,
                                               "committed_leader_epoch": epoch, "metadata": metadata,
                                               "error_code": error})
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    asked = request["topics"]
    wanted = None if asked is None else [(t["name"], i) for t in asked for i in t["partition_indexes"]]
    # An ErrorCode here, a plain int from the coordinator (both encode as the int16 error code).
    error: int = authorization.error(ctx, request["group_id"])
    refused: dict[str, int] = {}
    if not error and asked is not None:
        refused = {t["name"]: code for t in asked if (code := authorization.error(ctx, t["name"], which=1))}
    fetched: dict[tuple[str, int], FetchedOffset] = {}
    if not error:
        # Topics the principal may not Describe are not asked for: TOPIC_AUTHORIZATION_FAILED.
        error, fetched = ctx.services.group_coordinator.fetch_offsets(
            request["group_id"], bool(request.get("require_stable", False)),
            None if wanted is None else [tp for tp in wanted if tp[0] not in refused])
    if error != ErrorCode.NONE:
        if ctx.api_version >= 2:
            return {"throttle_time_ms": 0, "topics": [], "error_code": error}
        failed = dict.fromkeys(wanted or [], (-1, -1, "", error))
        return {"throttle_time_ms": 0, "topics": _topics(wanted or [], failed), "error_code": error}
    # All topics (null): those the principal may not Describe are left out (KafkaApis).
    order = wanted if wanted is not None else sorted(tp for tp in fetched if authorization.allowed(
        ctx, tp[0], which=1, count=False))
    answered = {tp: (f.offset, f.leader_epoch, f.metadata, f.error) for tp, f in fetched.items()}
    answered.update({tp: (-1, -1, "", refused[tp[0]]) for tp in wanted or [] if tp[0] in refused})
    return {"throttle_time_ms": 0, "topics": _topics(order, answered), "error_code": ErrorCode.NONE}


register(messages, handle)
