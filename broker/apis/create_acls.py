"""CreateAcls, versions 0-2 (flexible from 2): adds ACL bindings, one result per creation.

As Kafka 2.8: SECURITY_DISABLED for every creation without an authorizer,
CLUSTER_AUTHORIZATION_FAILED without Alter on the cluster, INVALID_REQUEST (with Kafka's
message) for a binding with an unknown or wildcard field, a CLUSTER resource not named
`kafka-cluster`, or a principal that is not `Type:name`. v0 creates LITERAL patterns. Written as
AclAuthorizer.createAcls: the bindings of one resource in one conditional write of its znode plus
a change notification, which every broker applies.
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.acl_requests import NO_AUTHORIZER, code
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.security.acl import (
    AclEntry,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    binding_error,
)
from broker.zk.client import ZkError
from protocol.errors import ErrorCode
from protocol.messages import create_acls as messages


def _result(error: ErrorCode = ErrorCode.NONE, message: str | None = None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    creations = request["creations"]
    authorizer = ctx.services.authorizer
    if not authorizer.enabled:
        return {"throttle_time_ms": 0,
                "results": [_result(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER) for _ in creations]}
    denied = authorization.error(ctx)
    if denied:
        return {"throttle_time_ms": 0, "results": [_result(denied) for _ in creations]}
    results: list[dict[str, Any]] = []
    wanted: dict[ResourcePattern, list[tuple[int, AclEntry]]] = {}
    for i, c in enumerate(creations):
        pattern = ResourcePattern(code(ResourceType, c["resource_type"]), c["resource_name"],
                                  code(PatternType, c.get("resource_pattern_type", PatternType.LITERAL)))
        acl = AclEntry(c["principal"], c["host"], code(AclOperation, c["operation"]),
                       code(PermissionType, c["permission_type"]))
        results.append(_result())
        why = binding_error(pattern, acl)
        if why:
            results[i] = _result(ErrorCode.INVALID_REQUEST, why)
        else:
            wanted.setdefault(pattern, []).append((i, acl))
    for pattern, entries in wanted.items():
        new = frozenset(acl for _, acl in entries)
        try:
            await authorizer.update(pattern, lambda current, new=new: current | new)  # type: ignore[misc]
        except ZkError as e:
            for i, _ in entries:
                results[i] = _result(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to update ACLs: {type(e).__name__}")
    return {"throttle_time_ms": 0, "results": results}


register(messages, handle)
