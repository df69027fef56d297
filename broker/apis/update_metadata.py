"""UpdateMetadata, versions 0-5: the controller refreshes this broker's metadata cache.

Obeyed only if current (broker/controller/epochs.py: STALE_BROKER_EPOCH for another
incarnation's epoch, from v5; STALE_CONTROLLER_EPOCH for a controller epoch that is not
ZooKeeper's); a refused request changes nothing.

Departure: versions 0-4 carry no broker epoch; Kafka accepts them, here they are refused with
STALE_BROKER_EPOCH (only a client can send them, every minibroker controller sends v5, and
they can hide topics and brokers from clients).
Authorization: ClusterAction on the cluster, else CLUSTER_AUTHORIZATION_FAILED (broker.apis.authorization).
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import update_metadata as messages

log = structlog.get_logger()


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    if refused := authorization.error(ctx):
        return {"error_code": refused}
    services = ctx.services
    code = await services.controller.epochs.check(request["controller_epoch"], request.get("broker_epoch", -1))
    if code != ErrorCode.NONE:
        return {"error_code": code}
    if "topic_states" in request:  # v5 groups the states by topic; the cache reads the v0 shape
        request["ungrouped_partition_states"] = [{**ps, "topic_name": t["topic_name"]}
                                                 for t in request["topic_states"] for ps in t["partition_states"]]
    started = time.monotonic()
    services.metadata.update(request)
    services.metadata_changed()
    log.info("update_metadata.applied", partitions=len(request["ungrouped_partition_states"]),
             duration_s=round(time.monotonic() - started, 3))
    return {"error_code": 0}


register(messages, handle)
