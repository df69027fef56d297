"""StopReplica, versions 0-1: stop fetching a partition, and delete it if asked.

Obeyed only if current (broker/controller/epochs.py: STALE_BROKER_EPOCH for another
incarnation's epoch, STALE_CONTROLLER_EPOCH for a controller epoch that is not ZooKeeper's);
a refused request changes nothing. A topic name Kafka would refuse (`../x`, `/abs/x`, empty) is
answered INVALID_TOPIC_EXCEPTION and a negative partition UNKNOWN_TOPIC_OR_PARTITION, and nothing
is stopped or deleted: the name would otherwise pick the directory to delete.

Departure: version 0 carries no broker epoch; Kafka accepts it, here it is refused with
STALE_BROKER_EPOCH (only a client can send it, every minibroker controller sends v1, and it
can delete a replica).
Authorization: ClusterAction on the cluster, else CLUSTER_AUTHORIZATION_FAILED (broker.apis.authorization).
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.log.dirs import InvalidPartitionName
from protocol.errors import ErrorCode
from protocol.messages import stop_replica as messages
from protocol.topic import topic_partition_error

log = structlog.get_logger()


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    if refused := authorization.error(ctx):
        return {"error_code": refused, "partition_errors": []}
    services = ctx.services
    code = await services.controller.epochs.check(request["controller_epoch"], request.get("broker_epoch", -1))
    if code != ErrorCode.NONE:
        return {"error_code": code, "partition_errors": []}
    if "topics" in request:  # v1 groups the partitions by topic; the loop reads the v0 shape
        request["ungrouped_partitions"] = [{"topic_name": t["name"], "partition_index": p}
                                           for t in request["topics"] for p in t["partition_indexes"]]
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
    if delete:
        services.roles.forget_deleted_topics({e["topic_name"] for e in errors if e["error_code"] == ErrorCode.NONE})
    return {"error_code": 0, "partition_errors": errors}


register(messages, handle)
