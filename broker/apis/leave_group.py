"""LeaveGroup, versions 0-4 (flexible from 4): members leave their group (v3+: several at once, KIP-345).

v0-2 name one member and are answered with one error: the group's, else the member's (Kafka's
LeaveGroupResponse for old versions). v3+ members may be named by group_instance_id alone.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import leave_group as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    if ctx.api_version <= 2:
        leaving: list[tuple[str, str | None]] = [(request["member_id"], None)]
    else:
        leaving = [(m["member_id"], m["group_instance_id"]) for m in request["members"]]
    error, members = ctx.services.group_coordinator.leave_group(request["group_id"], leaving)
    if ctx.api_version <= 2:
        first = next((code for _, _, code in members if code != ErrorCode.NONE), ErrorCode.NONE)
        return {"throttle_time_ms": 0, "error_code": error if error != ErrorCode.NONE else first}
    return {"throttle_time_ms": 0, "error_code": error,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
                        for member_id, instance_id, code in members]}


register(messages, handle)
