"""DescribeConfigs, versions 0-4 (Kafka 2.8's ConfigHelper.describeConfigs).

TOPIC resources list every topic key this broker serves with its value and source: the topic's
override (DYNAMIC_TOPIC_CONFIG), else the broker key it falls back to (STATIC_BROKER_CONFIG when
server.properties sets it), else Kafka's default (DEFAULT_CONFIG); an unknown topic is
UNKNOWN_TOPIC_OR_PARTITION. BROKER `<this id>` lists the static keys (read-only) and the dynamic
throttle rates (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG or DEFAULT_CONFIG); BROKER `""`
lists `/config/brokers/<default>`; another broker's id is INVALID_REQUEST. Synonyms from v1 when
asked for, config_type from v3, documentation null. configuration_keys null or empty means all.
A resource type other than TOPIC, BROKER and BROKER_LOGGER fails the whole request with
INVALID_REQUEST on every resource, as Kafka's handler does.
Departures: dynamic values are read from ZooKeeper at request time (Kafka reads topic configs
there too, broker ones from its applied copy); v0's is_default is true for DEFAULT_CONFIG values
(Kafka 2.8 leaves it false).
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
from protocol.messages import describe_configs as messages

_KNOWN_TYPES = frozenset({ResourceType.TOPIC, ResourceType.BROKER, ResourceType.BROKER_LOGGER})


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    resources = request["resources"]
    bad = next((r for r in resources if r["resource_type"] not in _KNOWN_TYPES), None)
    if bad is not None:
        message = (f"Unexpected resource type {resource_type_name(bad['resource_type'])} "
                   f"for resource {bad['resource_name']}")
        return {"throttle_time_ms": 0, "results": [
            {"error_code": ErrorCode.INVALID_REQUEST, "error_message": message, "resource_type": r["resource_type"],
             "resource_name": r["resource_name"], "configs": []} for r in resources]}
    include_synonyms = bool(request.get("include_synonyms", False))
    results = []
    for r in resources:
        res: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None,
                               "resource_type": r["resource_type"], "resource_name": r["resource_name"], "configs": []}
        refused = authorization.config_resource_error(ctx, r["resource_type"] == ResourceType.TOPIC,
                                                      r["resource_name"])
        if refused:
            res["error_code"] = refused
            results.append(res)
            continue
        try:
            entries = await ctx.services.config_admin.describe(r["resource_type"], r["resource_name"], include_synonyms)
            keys = r.get("configuration_keys")
            if keys:
                wanted = set(keys)
                entries = [e for e in entries if e["name"] in wanted]
            res["configs"] = entries
        except AdminError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
        results.append(res)
    return {"throttle_time_ms": 0, "results": results}


register(messages, handle)
