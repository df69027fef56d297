"""AlterConfigs, versions 0-2 (Kafka 2.8's ZkAdminManager.alterConfigs).

Each TOPIC or BROKER resource's whole config is replaced by the request's entries (keys not
named are removed), validated as `minibroker configs` validates, then written as it writes: entity
znode, then a change notification, which every broker's config watch applies. Per resource:
a null value INVALID_REQUEST, an unknown key INVALID_CONFIG, a value that does not parse
INVALID_REQUEST, a topic that does not exist UNKNOWN_TOPIC_OR_PARTITION, another broker's id
INVALID_REQUEST; nothing is written for a refused resource, the others go ahead. validate_only
writes nothing. BROKER_LOGGER or an unknown resource type fails the whole request (INVALID_REQUEST
on every resource), as Kafka's handler does. A resource named twice is answered once, for its
last entry (Kafka keys the request by resource). See broker.apis.config_admin for departures.
Authorization: DescribeConfigs/AlterConfigs on the topic, or on the cluster for a broker resource
(else TOPIC_ / CLUSTER_AUTHORIZATION_FAILED for that resource).
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.admin import AdminError
from broker.apis.config_admin import ResourceType, resource_type_name
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import alter_configs as messages


def _whole_request_error(resources: list[dict[str, Any]], message: str) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "responses": [
        {"error_code": ErrorCode.INVALID_REQUEST, "error_message": message, "resource_type": r["resource_type"],
         "resource_name": r["resource_name"]} for r in resources]}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    by_resource = {(r["resource_type"], r["resource_name"]): r for r in request["resources"]}
    resources = list(by_resource.values())
    for r in resources:
        if r["resource_type"] == ResourceType.BROKER_LOGGER:
            return _whole_request_error(resources, "AlterConfigs is deprecated and does not support the resource "
                                                   "type BROKER_LOGGER")
        if r["resource_type"] not in (ResourceType.TOPIC, ResourceType.BROKER):
            return _whole_request_error(resources,
                                        f"Unexpected resource type {resource_type_name(r['resource_type'])}")
    admin = ctx.services.config_admin
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
            nulls = [c["name"] for c in r["configs"] if c["value"] is None]
            if nulls:
                raise AdminError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
            entity = admin.entity(r["resource_type"], r["resource_name"])
            await admin.replace(entity, {c["name"]: c["value"] for c in r["configs"]}, validate_only)
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
        responses.append(res)
    return {"throttle_time_ms": 0, "responses": responses}


register(messages, handle)
