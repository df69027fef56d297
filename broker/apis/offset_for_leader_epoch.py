"""OffsetForLeaderEpoch, versions 0-4 (flexible from 4).

A leader answers, per partition, the end offset of the requested leader epoch from its epoch
cache (KIP-101; KIP-279's rule: the largest epoch <= the requested one, and its end). v2's
current_leader_epoch fences: below the partition's epoch FENCED_LEADER_EPOCH, above it
UNKNOWN_LEADER_EPOCH (-1: not checked). v3's replica_id is read and not needed (Kafka 2.8
does the same: followers and consumers get one answer). Not the leader:
NOT_LEADER_OR_FOLLOWER (6); not hosted here: NOT_LEADER_OR_FOLLOWER if the metadata knows the
partition, UNKNOWN_TOPIC_OR_PARTITION otherwise; a failed log directory KAFKA_STORAGE_ERROR.
No departures from Kafka 2.8.
Authorization: ClusterAction on the cluster, else Describe on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka 2.8.
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import offset_for_leader_epoch as messages

UNDEFINED = -1


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    replicas = services.replicas
    topics = []
    # ClusterAction on the cluster covers every topic; otherwise Describe on each (KIP-320).
    cluster_action = authorization.allowed(ctx, which=1, count=False)
    for topic in request["topics"]:
        name = topic["topic"]
        parts = []
        refused = ErrorCode.NONE if cluster_action else authorization.error(ctx, name)
        for rp in topic["partitions"]:
            idx = rp["partition"]
            out: dict[str, Any] = {"partition": idx, "error_code": ErrorCode.NONE,
                                   "leader_epoch": UNDEFINED, "end_offset": UNDEFINED}
            parts.append(out)
            if refused:
                out["error_code"] = refused
                continue
            part = replicas.get(name, idx)
            if replicas.is_offline(name, idx):
                out["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if part is None:
                known = services.metadata.partition(name, idx) is not None
                out["error_code"] = ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            error, epoch, end = replicas.last_offset_for_leader_epoch(
                part, rp.get("current_leader_epoch", -1), rp["leader_epoch"])
            out["error_code"] = error
            if error == ErrorCode.NONE:
                out["leader_epoch"], out["end_offset"] = epoch, end
        topics.append({"topic": name, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


register(messages, handle)
