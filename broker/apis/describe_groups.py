"""DescribeGroups, versions 0-5 (flexible from 5): state, protocol and members of groups (Kafka 2.8's rules).

Members' metadata and assignments are shown only while the group is Stable; a group this
coordinator does not know is "Dead" with no error. v3+ authorized_operations: when asked for
and the group is described without error, the operations the authorizer allows on it (every
one Kafka supports on a group, READ, DESCRIBE, DELETE, without an authorizer); otherwise INT32_MIN.
Authorization: Describe on each group, else GROUP_AUTHORIZATION_FAILED for it; authorized
operations (v3+) are what the authorizer allows on the group.
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.authorized_operations import GROUP_OPERATIONS, NOT_REQUESTED, bitfield
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.security.acl import ResourceType
from protocol.errors import ErrorCode
from protocol.messages import describe_groups as messages

# The fields of a group described with an error (GroupCoordinator's empty summary).
EMPTY_SUMMARY: dict[str, object] = {"group_state": "", "protocol_type": "", "protocol_data": "", "members": []}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    with_ops = bool(request.get("include_authorized_operations", False))
    out = []
    error: int  # an ErrorCode when refused here, a plain int from the coordinator
    for group_id in request["groups"]:
        if refused := authorization.error(ctx, group_id):
            error, summary = refused, EMPTY_SUMMARY
        else:
            error, summary = ctx.services.group_coordinator.describe_group(group_id)
        ops = NOT_REQUESTED
        if with_ops and error == ErrorCode.NONE:
            allowed = authorization.operations(ctx, ResourceType.GROUP, group_id)
            ops = GROUP_OPERATIONS if allowed is None else bitfield(allowed)
        out.append({"error_code": error, "group_id": group_id, **summary, "authorized_operations": ops})
    return {"throttle_time_ms": 0, "groups": out}


register(messages, handle)
