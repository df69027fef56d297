"""DeleteAcls, versions 0-2 (flexible from 2): removes the ACLs matching each filter.

As Kafka 2.8: SECURITY_DISABLED for every filter without an authorizer,
CLUSTER_AUTHORIZATION_FAILED without Alter on the cluster, INVALID_REQUEST for a filter with an
unknown field. Each filter answers the bindings it removed; each touched resource is rewritten by
one conditional write and announced, as AclAuthorizer.deleteAcls (which matches against the
stored set at write time, so a binding another broker removed meanwhile is not reported twice).
"""

from __future__ import annotations

from typing import Any

from broker.apis import authorization
from broker.apis.acl_requests import NO_AUTHORIZER, binding_filter
from broker.apis.registry import register
from broker.dispatch import RequestContext
from broker.security.acl import AclEntry, BindingFilter, ResourcePattern
from broker.zk.client import ZkError
from protocol.errors import ErrorCode
from protocol.messages import delete_acls as messages


def _filter_result(error: ErrorCode = ErrorCode.NONE, message: str | None = None,
                   matching: list[Any] | None = None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "matching_acls": matching or []}


def _match(p: ResourcePattern, a: AclEntry) -> dict[str, Any]:
    return {"error_code": 0, "error_message": None, "resource_type": p.resource_type, "resource_name": p.name,
            "pattern_type": p.pattern_type, "principal": a.principal, "host": a.host, "operation": a.operation,
            "permission_type": a.permission}


async def handle(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    raw = request["filters"]
    authorizer = ctx.services.authorizer
    if not authorizer.enabled:
        return {"throttle_time_ms": 0,
                "filter_results": [_filter_result(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER) for _ in raw]}
    denied = authorization.error(ctx)
    if denied:
        return {"throttle_time_ms": 0, "filter_results": [_filter_result(denied) for _ in raw]}
    filters = [binding_filter(f) for f in raw]
    results = [_filter_result() for _ in raw]
    usable: list[tuple[int, BindingFilter]] = []
    for i, f in enumerate(filters):
        why = f.indefinite()
        if why:
            results[i] = _filter_result(ErrorCode.INVALID_REQUEST, why)
        else:
            usable.append((i, f))
    patterns = sorted({p for p in authorizer.table.by_pattern if any(f.matches_pattern(p) for _, f in usable)})
    for pattern in patterns:
        removed: dict[int, list[AclEntry]] = {}

        def without(current: frozenset[AclEntry], pattern: ResourcePattern = pattern,
                    removed: dict[int, list[AclEntry]] = removed) -> frozenset[AclEntry]:
            removed.clear()
            keep = set(current)
            for i, f in usable:
                if f.matches_pattern(pattern):
                    hits = sorted(a for a in current if f.matches_entry(a))
                    if hits:
                        removed[i] = hits
                        keep.difference_update(hits)
            return frozenset(keep)

        try:
            await authorizer.update(pattern, without)
        except ZkError as e:
            for i, _ in usable:
                if filters[i].matches_pattern(pattern):
                    results[i] = _filter_result(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                f"Failed to delete ACLs: {type(e).__name__}")
            continue
        for i, hits in removed.items():
            results[i]["matching_acls"].extend(_match(pattern, a) for a in hits)
    return {"throttle_time_ms": 0, "filter_results": results}


register(messages, handle)
