"""Metadata, versions 0-2 (Kafka 0.10.1's table), answered from the metadata cache.

v0: an empty topic list means all topics; v1+: null means all, empty means none.
Unknown topics are auto-created when `auto.create.topics.enable` is true and the name is
legal, and answered LEADER_NOT_AVAILABLE until their partitions have leaders, as Kafka
does. Illegal names get INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

from typing import Any

from broker.apis.admin import AdminError, TopicSpec
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.metadata import topic_name_error
from protocol.errors import ErrorCode
from protocol.messages import metadata as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    md = services.metadata
    requested = request.get("topics")
    if requested is None or (ctx.api_version == 0 and not requested):
        names = sorted(md.topics)
    else:
        names = [t["name"] for t in requested]
    topics = []
    for name in names:
        parts = md.topics.get(name)
        if parts is None:
            if topic_name_error(name) is not None:
                topics.append({"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name, "partitions": []})
                continue
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if services.config.auto_create_topics_enable:
                try:
                    await services.admin.create_topic(TopicSpec(name, -1, -1, None, {}))
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                except AdminError as e:
                    code = ErrorCode.LEADER_NOT_AVAILABLE if e.code == ErrorCode.TOPIC_ALREADY_EXISTS else e.code
            topics.append({"error_code": code, "name": name, "partitions": []})
            continue
        partitions = []
        for p in sorted(parts):
            info = parts[p]
            if info.leader < 0 or info.leader not in md.brokers:
                partitions.append({"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": p,
                                   "leader_id": -1, "replica_nodes": info.replicas, "isr_nodes": info.isr})
                continue
            live = [b for b in info.replicas if b in md.brokers]
            code = ErrorCode.NONE if len(live) == len(info.replicas) else ErrorCode.REPLICA_NOT_AVAILABLE
            partitions.append({"error_code": code, "partition_index": p, "leader_id": info.leader,
                               "replica_nodes": info.replicas if code == 0 else live, "isr_nodes": info.isr})
        topics.append({"error_code": 0, "name": name, "is_internal": False, "partitions": partitions})
    # The endpoints of the listener this client connected to (Kafka's behaviour).
    brokers = [{"node_id": bid, "host": host, "port": port, "rack": rack}
               for bid, host, port, rack in md.endpoints_for(ctx.conn.listener_name)]
    return {"brokers": brokers, "cluster_id": services.cluster_id, "controller_id": md.controller_id,
            "topics": topics}


register(messages, handle)
