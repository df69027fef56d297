"""ListGroups, versions 0-4 (flexible from 3): the groups this broker coordinates.

As Kafka 2.8: every group of the `__consumer_offsets` partitions this broker leads, with
COORDINATOR_LOAD_IN_PROGRESS while any of them is still loading; v4's states_filter keeps
the groups in those states (an empty filter keeps all).
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.messages import list_groups as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    error, groups = ctx.services.group_coordinator.list_groups(set(request.get("states_filter") or ()))
    return {"throttle_time_ms": 0, "error_code": error,
            "groups": [{"group_id": group_id, "protocol_type": protocol_type, "group_state": state}
                       for group_id, protocol_type, state in groups]}


register(messages, handle)
