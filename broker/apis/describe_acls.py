"""DescribeAcls, versions 0-2 (flexible from 2): the ACLs matching one filter, by resource.

As Kafka 2.8: SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without
Describe on the cluster, INVALID_REQUEST for a filter with an unknown field. v0 has no pattern
type: its filter is LITERAL. Answered from this broker's cache (kept live by the change
notifications), as Kafka's AclAuthorizer.acls.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from broker.apis import authorization
from broker.apis.acl_requests import NO_AUTHORIZER, binding_filter
from broker.apis.registry import register
from broker.dispatch import RequestContext
from protocol.errors import ErrorCode
from protocol.messages import describe_acls as messages


def _answer(error: ErrorCode, message: str | None = None, resources: list[Any] | None = None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "resources": resources or []}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    authorizer = ctx.services.authorizer
    if not authorizer.enabled:
        return _answer(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    error = authorization.error(ctx)
    if error:
        return _answer(error)
    f = binding_filter(request)
    why = f.indefinite()
    if why:
        return _answer(ErrorCode.INVALID_REQUEST, why)
    matched = [(p, a) for p, a in authorizer.table.bindings() if f.matches_pattern(p) and f.matches_entry(a)]
    resources = []
    for pattern, group in groupby(matched, key=lambda pa: pa[0]):
        resources.append({"resource_type": pattern.resource_type, "resource_name": pattern.name,
                          "pattern_type": pattern.pattern_type,
                          "acls": [{"principal": a.principal, "host": a.host, "operation": a.operation,
                                    "permission_type": a.permission} for _, a in group]})
    return _answer(ErrorCode.NONE, None, resources)


register(messages, handle)
