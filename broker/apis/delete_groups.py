"""DeleteGroups, versions 0-2 (flexible from 2): removes empty groups and their committed offsets.

As Kafka 2.8: a group with members is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND; a
deleted group's offsets and record get tombstones in `__consumer_offsets`. Names asked for twice
are answered once.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.messages import delete_groups as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    names = list(dict.fromkeys(request["groups_names"]))
    results = await ctx.services.group_coordinator.delete_groups(names)
    return {"throttle_time_ms": 0,
            "results": [{"group_id": name, "error_code": results[name]} for name in names]}


register(messages, handle)
