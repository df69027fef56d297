"""SyncGroup, versions 0-5 (flexible from 4): the leader's assignment goes out to every member.

As Kafka 2.8: from v5 the request must name the protocol type and name
(INCONSISTENT_GROUP_PROTOCOL otherwise); the answer waits until the group's record with the
assignment is written to `__consumer_offsets` with acks=all.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import sync_group as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    protocol_type, protocol_name = request.get("protocol_type"), request.get("protocol_name")
    if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocol_type": None,
                "protocol_name": None, "assignment": b""}
    result = await ctx.services.group_coordinator.sync_group(
        request["group_id"], request["generation_id"], request["member_id"], protocol_type, protocol_name,
        request.get("group_instance_id"), {a["member_id"]: a["assignment"] for a in request["assignments"]})
    return {"throttle_time_ms": 0, "error_code": result.error, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name, "assignment": result.assignment}


register(messages, handle)
