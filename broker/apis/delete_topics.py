"""DeleteTopics (key 20), versions 0-5.

Per topic: UNKNOWN_TOPIC_OR_PARTITION when absent, INVALID_REQUEST when named twice.
The KIP-599 quota comes with the mutation-quota issue.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.admin import AdminError
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode

API_KEY = 20
API_NAME = "DeleteTopics"
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    admin = ctx.broker.admin
    names = list(request.get("topic_names") or [])
    counts = Counter(names)
    results = []
    for name in names:
        res: dict[str, Any] = {"name": name, "error_code": 0, "error_message": None}
        results.append(res)
        if counts[name] > 1:
            res["error_code"] = ErrorCode.INVALID_REQUEST
            res["error_message"] = f"Duplicate topic {name} in request"
            continue
        try:
            await admin.delete_topic(name)
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
    return {"throttle_time_ms": 0, "responses": results}
