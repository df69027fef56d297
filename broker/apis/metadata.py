"""Metadata (key 3), versions 0-2 (Kafka 0.10.1's table).

v0: an empty topic list means all topics; v1+: null means all, empty means none.
Unknown topics are auto-created when `auto.create.topics.enable` is true and the
name is legal, answered LEADER_NOT_AVAILABLE until the partitions have leaders, as
Kafka does. Illegal names get INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.admin import AdminError, TopicSpec
from broker.dispatch import RequestContext
from broker.metadata import topic_name_error
from protocol.errors import ErrorCode

API_KEY = 3
API_NAME = "Metadata"
VERSIONS = (0, 2)
log = structlog.get_logger()


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    broker = ctx.broker
    md = broker.metadata
    requested = request.get("topics")
    if requested is None or (ctx.api_version == 0 and not requested):
        names = sorted(md.topics)
    else:
        names = [t["name"] for t in requested]
    topics = []
    for name in names:
        meta = md.topics.get(name)
        if meta is None:
            err = topic_name_error(name)
            if err is not None:
                topics.append({"error_code": ErrorCode.INVALID_TOPIC_EXCEPTION, "name": name, "partitions": []})
                continue
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if broker.config.auto_create_topics_enable:
                try:
                    await broker.admin.create_topic(TopicSpec(name, -1, -1, None, {}))
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                except AdminError as e:
                    code = ErrorCode.LEADER_NOT_AVAILABLE if e.code == ErrorCode.TOPIC_ALREADY_EXISTS else e.code
            topics.append({"error_code": code, "name": name, "partitions": []})
            continue
        partitions = []
        for p in sorted(meta.assignment):
            state = meta.states.get(p)
            replicas = meta.assignment[p]
            if state is None or state.leader < 0 or state.leader not in md.brokers:
                partitions.append({"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": p,
                                   "leader_id": -1, "replica_nodes": replicas,
                                   "isr_nodes": state.isr if state else []})
                continue
            live_replicas = [b for b in replicas if b in md.brokers]
            code = ErrorCode.NONE if len(live_replicas) == len(replicas) else ErrorCode.REPLICA_NOT_AVAILABLE
            partitions.append({"error_code": code, "partition_index": p, "leader_id": state.leader,
                               "replica_nodes": replicas, "isr_nodes": state.isr})
        topics.append({"error_code": 0, "name": name, "is_internal": False, "partitions": partitions})
    brokers = [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
               for b in sorted(md.brokers.values(), key=lambda b: b.broker_id)]
    return {"brokers": brokers, "cluster_id": broker.cluster_id, "controller_id": md.controller_id,
            "topics": topics}
