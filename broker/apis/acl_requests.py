"""What CreateAcls, DescribeAcls and DeleteAcls share: wire fields to broker.security.acl values.

Unknown codes become the enums' UNKNOWN (Kafka's fromCode), which the handlers answer with
INVALID_REQUEST as Kafka does.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

from broker.security.acl import AclOperation, BindingFilter, PatternType, PermissionType, ResourceType

E = TypeVar("E", bound=IntEnum)
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def code(enum: type[E], value: int) -> E:
    try:
        return enum(value)
    except ValueError:
        return enum(0)  # UNKNOWN


def binding_filter(f: dict[str, Any]) -> BindingFilter:
    return BindingFilter(code(ResourceType, f["resource_type_filter"]), f["resource_name_filter"],
                         code(PatternType, f.get("pattern_type_filter", PatternType.LITERAL)),
                         f["principal_filter"], f["host_filter"], code(AclOperation, f["operation"]),
                         code(PermissionType, f["permission_type"]))
