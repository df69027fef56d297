"""DescribeCluster, version 0 (Kafka 2.8, flexible from v0).

The cluster id (ZooKeeper's `/cluster/id`), the controller id (-1 while unknown), and the live
brokers with their rack, at the endpoints Metadata gives (broker.apis.metadata.live_brokers).
cluster_authorized_operations is INT32_MIN unless asked for, then every cluster operation
without an authorizer (broker.apis.authorized_operations).
Authorization: Describe on the cluster (else CLUSTER_AUTHORIZATION_FAILED); authorized operations
are the authorizer's answer.
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.authorized_operations import CLUSTER_OPERATIONS, NOT_REQUESTED, bitfield
from broker.apis.metadata import live_brokers
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.security.acl import CLUSTER_NAME, ResourceType
from protocol.errors import ErrorCode
from protocol.messages import describe_cluster as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    brokers = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
               for b in live_brokers(ctx)]
    with_ops = bool(request.get("include_cluster_authorized_operations", False))
    if refused := authorization.error(ctx):
        return {"throttle_time_ms": 0, "error_code": refused, "error_message": None, "cluster_id": "",
                "controller_id": -1, "brokers": [], "cluster_authorized_operations": NOT_REQUESTED}
    allowed = authorization.operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    cluster_ops = CLUSTER_OPERATIONS if allowed is None else bitfield(allowed)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "cluster_id": ctx.services.cluster_id, "controller_id": ctx.services.metadata.controller_id,
            "brokers": brokers, "cluster_authorized_operations": cluster_ops if with_ops else NOT_REQUESTED}


register(messages, handle)
