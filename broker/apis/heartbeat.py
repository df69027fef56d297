"""Heartbeat, versions 0-4 (flexible from 4): a member says it is alive (Kafka 2.8's rules).

REBALANCE_IN_PROGRESS tells a member of a rebalancing group to rejoin; a group whose
`__consumer_offsets` partition is still loading answers NONE, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.messages import heartbeat as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    error = ctx.services.group_coordinator.heartbeat(request["group_id"], request["member_id"],
                                                     request.get("group_instance_id"), request["generation_id"])
    return {"throttle_time_ms": 0, "error_code": error}


register(messages, handle)
