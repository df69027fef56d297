"""ControlledShutdown, versions 0-1.

Served by the active controller only (NOT_CONTROLLER elsewhere): leadership moves off the
broker before it exits, and the answer lists the partitions it still leads (those with
no other in-sync replica), for which the shutting-down broker retries.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import controlled_shutdown as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    controller = ctx.services.controller
    if not controller.active:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []}
    remaining = await controller.controlled_shutdown(request["broker_id"])
    return {"error_code": 0, "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}


register(messages, handle)
