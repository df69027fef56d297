"""AlterClientQuotas, versions 0-1 (flexible from 1): Kafka 2.8's, written as `minibroker configs` writes.

Each entry's ops are applied to its entity's znode (`/config/users/<user>[/clients/<id>]`,
`/config/clients/<id>`, `<default>` for a null name) and written with a change notification,
which every broker applies through its config watch (broker.apis.client_quota_admin has the
rules and the departures: no IP entities, no request_percentage, byte rates of at least 1).
A refused entry gets INVALID_REQUEST and Kafka's message, and nothing of it is written; the
others go ahead; validate_only writes nothing. Authorization: AlterConfigs on the cluster,
else CLUSTER_AUTHORIZATION_FAILED on every entry.
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.apis import authorization
from broker.apis.admin import AdminError
from broker.apis.client_quota_admin import alter
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import alter_client_quotas as messages

log = structlog.get_logger()


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    refused = authorization.error(ctx)
    validate_only = bool(request["validate_only"])
    entries = []
    for entry in request["entries"]:
        res: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "entity": entry["entity"]}
        if refused:
            res["error_code"], res["error_message"] = refused, "Cluster authorization failed."
        else:
            try:
                await alter(ctx.services.config_admin.zk, entry["entity"], entry["ops"], validate_only)
            except AdminError as e:
                res["error_code"], res["error_message"] = e.code, e.message
                log.info("client_quotas.alter_refused", broker_id=ctx.services.broker_id, error=e.message)
        entries.append(res)
    return {"throttle_time_ms": 0, "entries": entries}


register(messages, handle)
