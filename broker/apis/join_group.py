"""JoinGroup, versions 0-7 (flexible from 6): a member joins its group (Kafka 2.8's handleJoinGroupRequest).

The coordinator (broker/group) holds the answer until the rebalance completes. MEMBER_ID_REQUIRED
only from v4 on and only for dynamic members (no group_instance_id), as Kafka decides here; v0
has no rebalance timeout, so the session timeout stands in for it. The client host is Kafka's
`InetAddress.toString` form ("/127.0.0.1"). From v7 a group without a protocol answers a null
protocol name, before it the empty string.
"""

from __future__ import annotations

from typing import Any

from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.messages import join_group as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    version = ctx.api_version
    instance_id = request.get("group_instance_id")
    rebalance_timeout = request["rebalance_timeout_ms"] if version >= 1 else request["session_timeout_ms"]
    result = await ctx.services.group_coordinator.join_group(
        request["group_id"], request["member_id"], instance_id, version >= 4 and instance_id is None,
        ctx.client_id, f"/{ctx.conn.ip}", rebalance_timeout, request["session_timeout_ms"],
        request["protocol_type"], [(p["name"], p["metadata"]) for p in request["protocols"]])
    protocol_name = result.protocol_name if version >= 7 else (result.protocol_name or "")
    return {"throttle_time_ms": 0, "error_code": result.error, "generation_id": result.generation_id,
            "protocol_type": result.protocol_type, "protocol_name": protocol_name, "leader": result.leader_id,
            "member_id": result.member_id,
            "members": [{"member_id": mid, "group_instance_id": iid, "metadata": meta}
                        for mid, iid, meta in result.members]}


register(messages, handle)
