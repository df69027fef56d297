"""StopReplica, version 0: stop fetching a partition, and delete it if asked."""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import stop_replica as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    if request["controller_epoch"] < services.replicas.controller_epoch:
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partition_errors": []}
    delete = bool(request.get("delete_partitions"))
    errors = []
    for p in request["ungrouped_partitions"]:
        tp = (p["topic_name"], p["partition_index"])
        services.roles.stop_replica(tp[0], tp[1], delete)
        errors.append({"topic_name": tp[0], "partition_index": tp[1], "error_code": 0})
    return {"error_code": 0, "partition_errors": errors}


register(messages, handle)
