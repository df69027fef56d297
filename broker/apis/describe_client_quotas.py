"""DescribeClientQuotas, versions 0-1 (flexible from 1): Kafka 2.8's, over /config/users and /config/clients.

The filter and the entities it matches are broker.apis.client_quota_admin's (ZkAdminManager's
rules; IP entities are not served and describe nothing). A filter Kafka refuses fails the whole
request with its code (INVALID_REQUEST, UNSUPPORTED_VERSION for a custom entity type) and null
entries. Authorization: DescribeConfigs on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.admin import AdminError
from broker.apis.client_quota_admin import QuotaFilter, describe
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import describe_client_quotas as messages


def _failed(code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    refused = authorization.error(ctx)
    if refused:
        return _failed(refused, "Cluster authorization failed.")
    try:
        f = QuotaFilter.of(request["components"], bool(request["strict"]))
        found = await describe(ctx.services.config_admin.zk, f)
    except AdminError as e:
        return _failed(e.code, e.message)
    entries = [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "values": [{"key": k, "value": v} for k, v in values.items()]} for entity, values in found]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "entries": entries}


register(messages, handle)
