"""ControlledShutdown, versions 0-2 (v2 carries the broker's epoch, KIP-380).

Served by the active controller only (NOT_CONTROLLER elsewhere): leadership moves off the
broker before it exits, and the answer lists the partitions it still leads (those with
no other in-sync replica), for which the shutting-down broker retries. The request must
name the broker with its current epoch (the czxid of its registration, which the Kafka
protocol tells no one but that broker): any other epoch is refused with STALE_BROKER_EPOCH and changes nothing, so
a client cannot take another broker out of the ISRs.

Departure: versions 0-1 carry no epoch. Kafka accepts them; here they are refused with
STALE_BROKER_EPOCH, since they let anyone name any broker (every minibroker sends v2).
Authorization: ClusterAction on the cluster, else CLUSTER_AUTHORIZATION_FAILED (broker.apis.authorization).
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import controlled_shutdown as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    if refused := authorization.error(ctx):
        return {"error_code": refused, "remaining_partitions": []}
    controller = ctx.services.controller
    if not controller.active:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []}
    remaining = await controller.controlled_shutdown(request["broker_id"], request.get("broker_epoch", -1))
    if remaining is None:
        return {"error_code": ErrorCode.STALE_BROKER_EPOCH, "remaining_partitions": []}
    return {"error_code": 0, "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}


register(messages, handle)
