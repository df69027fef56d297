"""DeleteTopics, versions 0-5.

Per topic: UNKNOWN_TOPIC_OR_PARTITION when absent or when the name is not a legal topic name
(Kafka 2.8 answers those from its metadata cache, so "" is unknown, not INVALID_TOPIC_EXCEPTION;
the message says why), INVALID_REQUEST when named twice.
KIP-599: a topic to delete takes its partition count from the client's mutation quota
(broker.apis.mutation_quota; strict from v5, permissive before).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.apis.admin import AdminError
from broker.apis.mutation_quota import MutationQuota
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import delete_topics as messages


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    admin = ctx.services.admin
    names = list(request.get("topic_names") or [])
    counts = Counter(names)
    quota = MutationQuota(ctx, strict=ctx.api_version >= 5)
    results = []
    deleting: list[str] = []
    for name in names:
        res: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
        results.append(res)
        if counts[name] > 1:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Duplicate topic {name} in request"
            continue
        try:
            partitions = await admin.partition_count(name)
            if not quota.admit(partitions, res):
                continue
            await admin.delete_topic(name)
            deleting.append(name)
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
    timeout = max(request.get("timeout_ms", 0), 0) / 1000
    md = ctx.services.metadata
    if deleting and timeout > 0:
        gone = await ctx.services.metadata_updated.wait_until(lambda: not any(n in md.topics for n in deleting), timeout)
        if not gone:
            for res in results:
                if res["name"] in md.topics and res["error_code"] == 0:
                    res["error_code"] = ErrorCode.REQUEST_TIMED_OUT
    return {"throttle_time_ms": quota.finish(), "responses": results}


register(messages, handle)
