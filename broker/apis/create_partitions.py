"""CreatePartitions, versions 0-3.

Per topic: UNKNOWN_TOPIC_OR_PARTITION (also for an illegal name, as Kafka 2.8), INVALID_PARTITIONS when the count does not grow,
INVALID_REPLICA_ASSIGNMENT for a wrong number of assignments, INVALID_REQUEST when named
twice, INVALID_PARTITIONS at once for a count whose assignment ZooKeeper could not store
(broker.apis.assignment_bounds). validate_only writes nothing and is not counted. KIP-599: a valid growth takes the
number of new partitions from the client's mutation quota (broker.apis.mutation_quota; strict
from v3, permissive before).
Authorization: Alter on each topic, else TOPIC_AUTHORIZATION_FAILED for it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.apis import authorization
from broker.apis.admin import AdminError
from broker.apis.mutation_quota import MutationQuota
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import create_partitions as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    admin = ctx.services.admin
    counts = Counter(t["name"] for t in request["topics"])
    quota = MutationQuota(ctx, strict=ctx.api_version >= 3)
    results = []
    grown: list[tuple[str, int]] = []
    for t in request["topics"]:
        name = t["name"]
        res: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
        results.append(res)
        if counts[name] > 1:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Duplicate topic {name} in request"
            continue
        if refused := authorization.error(ctx, name):
            res["error_code"] = refused
            res["error_message"] = "Authorization failed."
            continue
        assignments = [list(a["broker_ids"]) for a in t["assignments"]] if t.get("assignments") else None
        try:
            async with admin.mutations:
                plan = await admin.validate_partition_growth(name, t["count"], assignments)
                if not request.get("validate_only"):
                    if not quota.admit(len(plan), res):
                        continue
                    await admin.add_partitions(name, plan)
                    grown.append((name, t["count"]))
                del plan
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
    timeout = max(request.get("timeout_ms", 0), 0) / 1000
    if grown and timeout > 0:
        await ctx.services.metadata_updated.wait_until(
            lambda: all(admin.has_leaders(n, count) for n, count in grown), timeout)
    return {"throttle_time_ms": quota.finish(), "results": results}


register(messages, handle)
