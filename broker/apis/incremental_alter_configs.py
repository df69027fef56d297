"""IncrementalAlterConfigs, versions 0-1 (Kafka 2.8's ZkAdminManager.incrementalAlterConfigs).

Each TOPIC or BROKER resource's current config (read from its znode) gets the operations:
SET, DELETE, and APPEND/SUBTRACT for list keys (the throttled-replica lists; any other key is
INVALID_REQUEST); the result is validated and written exactly as `minibroker configs` writes it
(entity znode, change notification). Per resource: a key named twice or a null value with an
operation other than DELETE INVALID_REQUEST, an unknown key INVALID_CONFIG, a value that does not
parse INVALID_REQUEST, an unknown topic UNKNOWN_TOPIC_OR_PARTITION, an unknown operation
INVALID_REQUEST; nothing is written for a refused resource. validate_only writes nothing.
BROKER_LOGGER resources are checked (this broker's id) and every operation refused, since there
are no log4j loggers. An unknown resource type fails the whole request (INVALID_REQUEST on every
resource), as Kafka's handler does; a resource named twice is answered once, for its last entry.
Authorization: DescribeConfigs/AlterConfigs on the topic, or on the cluster for a broker resource
(else TOPIC_ / CLUSTER_AUTHORIZATION_FAILED for that resource).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.apis import authorization
from broker.apis.admin import AdminError
from broker.apis.config_admin import OpType, ResourceType, resource_type_name
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import incremental_alter_configs as messages

_OPS = frozenset(int(op) for op in OpType)


async def _alter(ctx: RequestContext, r: dict[str, Any], validate_only: bool) -> None:
    configs = r["configs"]
    duplicates = sorted(name for name, n in Counter(c["name"] for c in configs).items() if n > 1)
    if duplicates:
        raise AdminError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(duplicates)}")
    unknown_ops = [c["name"] for c in configs if c["config_operation"] not in _OPS]
    if unknown_ops:
        raise AdminError(ErrorCode.INVALID_REQUEST, f"Unknown config operation for : {','.join(unknown_ops)}")
    nulls = [f"{OpType(c['config_operation']).name}:{c['name']}" for c in configs
             if c["value"] is None and c["config_operation"] != OpType.DELETE]
    if nulls:
        raise AdminError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    admin = ctx.services.config_admin
    if r["resource_type"] == ResourceType.BROKER_LOGGER:
        admin.own_logger_resource(r["resource_name"])
        if configs:
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Logger {configs[0]['name']} does not exist!")
        return
    entity = admin.entity(r["resource_type"], r["resource_name"])
    ops = [(c["name"], c["config_operation"], c["value"]) for c in configs]
    await admin.apply_ops(entity, ops, validate_only)


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    by_resource = {(r["resource_type"], r["resource_name"]): r for r in request["resources"]}
    resources = list(by_resource.values())
    known = (ResourceType.TOPIC, ResourceType.BROKER, ResourceType.BROKER_LOGGER)
    bad = next((r for r in resources if r["resource_type"] not in known), None)
    if bad is not None:
        message = f"Unexpected resource type {resource_type_name(bad['resource_type'])}"
        return {"throttle_time_ms": 0, "responses": [
            {"error_code": ErrorCode.INVALID_REQUEST, "error_message": message, "resource_type": r["resource_type"],
             "resource_name": r["resource_name"]} for r in resources]}
    validate_only = bool(request.get("validate_only"))
    responses = []
    for r in resources:
        res: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                               "resource_type": r["resource_type"], "resource_name": r["resource_name"]}
        refused = authorization.config_resource_error(ctx, r["resource_type"] == ResourceType.TOPIC,
                                                      r["resource_name"])
        if refused:
            res["error_code"] = refused
            responses.append(res)
            continue
        try:
            await _alter(ctx, r, validate_only)
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
        responses.append(res)
    return {"throttle_time_ms": 0, "responses": responses}


register(messages, handle)
