"""StopReplica, version 0: stop fetching a partition, and delete it if asked.

A topic name Kafka would refuse (`../x`, `/abs/x`, empty) is answered INVALID_TOPIC_EXCEPTION
and a negative partition UNKNOWN_TOPIC_OR_PARTITION, and nothing is stopped or deleted: the
name would otherwise pick the directory to delete.
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.log.dirs import InvalidPartitionName
from protocol.errors import ErrorCode
from protocol.messages import stop_replica as messages
from protocol.topic import topic_partition_error

log = structlog.get_logger()


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    services = ctx.services
    if request["controller_epoch"] < services.replicas.controller_epoch:
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partition_errors": []}
    delete = bool(request.get("delete_partitions"))
    errors = []
    for p in request["ungrouped_partitions"]:
        tp = (p["topic_name"], p["partition_index"])
        code = topic_partition_error(*tp)
        if code == ErrorCode.NONE:
            try:
                services.roles.stop_replica(tp[0], tp[1], delete)
            except InvalidPartitionName:  # a legal name whose directory resolves elsewhere (a symlink)
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
        if code != ErrorCode.NONE:
            log.warning("stop_replica.invalid_partition", peer=ctx.conn.peer, topic=tp[0][:255], partition=tp[1],
                        delete=delete, error=code.name)
        errors.append({"topic_name": tp[0], "partition_index": tp[1], "error_code": code})
    return {"error_code": 0, "partition_errors": errors}


register(messages, handle)
