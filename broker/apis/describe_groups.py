"""DescribeGroups, versions 0-5 (flexible from 5): state, protocol and members of groups (Kafka 2.8's rules).

Members' metadata and assignments are shown only while the group is Stable; a group this
coordinator does not know is "Dead" with no error. v3+ authorized_operations: when asked for
and the group is described without error, every operation Kafka supports on a group (READ,
DESCRIBE, DELETE: there is no authorizer yet); otherwise INT32_MIN.
"""

from __future__ import annotations

from typing import Any

from broker.apis.authorized_operations import GROUP_OPERATIONS, NOT_REQUESTED
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import describe_groups as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    with_ops = bool(request.get("include_authorized_operations", False))
    out = []
    for group_id in request["groups"]:
        error, summary = ctx.services.group_coordinator.describe_group(group_id)
        out.append({"error_code": error, "group_id": group_id, **summary,
                    "authorized_operations": GROUP_OPERATIONS if with_ops and error == ErrorCode.NONE
                    else NOT_REQUESTED})
    return {"throttle_time_ms": 0, "groups": out}


register(messages, handle)
