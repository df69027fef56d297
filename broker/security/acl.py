"""Kafka 2.8's ACL model and AclAuthorizer's decision, pure: no I/O, no clock.

Wire codes and names are Kafka's (org.apache.kafka.common.acl / resource): operations, permission
types, resource and pattern types. `AclTable` is the authorizer's cache: ACLs by resource pattern;
`decide` is AclAuthorizer.authorizeAction (super users; the matching LITERAL, wildcard `*` and
PREFIXED ACLs; allow.everyone.if.no.acl.found when none match; a DENY wins; Describe implied by
Read/Write/Delete/Alter, DescribeConfigs by AlterConfigs; ALL matches any operation; `User:*`
any principal, host `*` any host). `BindingFilter` is AclBindingFilter (DescribeAcls, DeleteAcls).
The ZooKeeper JSON (`{"version":1,"acls":[...]}`) is AclEntry's, encoded and decoded here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum

ANONYMOUS = "User:ANONYMOUS"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
WILDCARD_RESOURCE = "*"
CLUSTER_NAME = "kafka-cluster"
# `authorizer.class.name` values that enable this authorizer (Kafka 2.8's class and its predecessor).
AUTHORIZER_NAMES = frozenset({"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                              "minibroker"})


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def pascal(name: str) -> str:
    """SecurityUtils.toPascalCase: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


def parse_name(enum: type[IntEnum], text: str) -> IntEnum:
    """SecurityUtils' lookups: PascalCase or UPPER_CASE names (and kafka-acls' lower case)."""
    wanted = text.strip().replace("-", "_")
    for member in enum:
        if wanted in (pascal(member.name), member.name) or wanted.upper() == member.name \
                or wanted.upper() == pascal(member.name).upper():
            return member
    raise ValueError(f"unknown {enum.__name__}: {text!r}")


# Operations each concrete resource type supports (AclEntry.supportedOperations).
A = AclOperation
SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({A.READ, A.WRITE, A.CREATE, A.DESCRIBE, A.DELETE, A.ALTER,
                                   A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({A.READ, A.DESCRIBE, A.DELETE}),
    ResourceType.CLUSTER: frozenset({A.CREATE, A.CLUSTER_ACTION, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS,
                                     A.IDEMPOTENT_WRITE, A.ALTER, A.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({A.DESCRIBE, A.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({A.DESCRIBE}),
}

# The operations whose ALLOW also allows the key (AclAuthorizer.authorizeAction's allowOps).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    A.DESCRIBE: frozenset({A.DESCRIBE, A.READ, A.WRITE, A.DELETE, A.ALTER}),
    A.DESCRIBE_CONFIGS: frozenset({A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS}),
}


@dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


@dataclass(frozen=True, order=True)
class AclEntry:
    """AccessControlEntry: who, from where, what, allowed or denied."""

    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType


def parse_principal(text: str) -> tuple[str, str]:
    """SecurityUtils.parseKafkaPrincipal: `Type:name`, both parts non-empty."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"invalid principal {text!r}: expected 'Type:name'")
    return kind, name


# ---- ZooKeeper JSON (AclEntry.toJsonCompatibleMap / fromBytes) ----------------------------------

def encode_acls(acls: frozenset[AclEntry]) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": a.principal, "permissionType": pascal(a.permission.name),
         "operation": pascal(a.operation.name), "host": a.host} for a in sorted(acls)]},
        separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AclEntry]:
    if not data:
        return frozenset()
    doc = json.loads(data)
    if doc.get("version") != 1:
        raise ValueError(f"unsupported ACL znode version {doc.get('version')!r}")
    out = set()
    for item in doc["acls"]:
        parse_principal(item["principal"])
        out.add(AclEntry(item["principal"], item["host"],
                         AclOperation(parse_name(AclOperation, item["operation"])),
                         PermissionType(parse_name(PermissionType, item["permissionType"]))))
    return frozenset(out)


# ---- the decision --------------------------------------------------------------------------------

def _entry_matches(acl: AclEntry, operation: AclOperation, principal: str, host: str,
                   permission: PermissionType) -> bool:
    return (acl.permission == permission
            and acl.principal in (principal, WILDCARD_PRINCIPAL)
            and acl.operation in (operation, AclOperation.ALL)
            and acl.host in (host, WILDCARD_HOST))


class AclTable:
    """The ACLs by resource pattern (the authorizer's cache); replaced one resource at a time."""

    def __init__(self) -> None:
        self.by_pattern: dict[ResourcePattern, frozenset[AclEntry]] = {}

    def set(self, pattern: ResourcePattern, acls: frozenset[AclEntry]) -> None:
        if acls:
            self.by_pattern[pattern] = acls
        else:
            self.by_pattern.pop(pattern, None)

    def get(self, pattern: ResourcePattern) -> frozenset[AclEntry]:
        return self.by_pattern.get(pattern, frozenset())

    def matching(self, resource_type: ResourceType, name: str) -> list[AclEntry]:
        """AclAuthorizer.matchingAcls: the literal name's, the wildcard's and every matching prefix's."""
        out = list(self.get(ResourcePattern(resource_type, WILDCARD_RESOURCE)))
        out.extend(self.get(ResourcePattern(resource_type, name)))
        for i in range(1, len(name) + 1):
            out.extend(self.get(ResourcePattern(resource_type, name[:i], PatternType.PREFIXED)))
        return out

    def bindings(self) -> list[tuple[ResourcePattern, AclEntry]]:
        return [(p, a) for p in sorted(self.by_pattern) for a in sorted(self.by_pattern[p])]


@dataclass(frozen=True)
class Policy:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons."""
    users = frozenset(p.strip() for p in text.split(";") if p.strip())
    for user in users:
        parse_principal(user)
    return users


def decide(table: AclTable, policy: Policy, principal: str, host: str, operation: AclOperation,
           resource_type: ResourceType, name: str) -> bool:
    """AclAuthorizer.authorizeAction for one literal resource."""
    if principal in policy.super_users:
        return True
    acls = table.matching(resource_type, name)
    if not acls:
        return policy.allow_everyone_if_no_acl_found
    if any(_entry_matches(a, operation, principal, host, PermissionType.DENY) for a in acls):
        return False
    allow_ops = IMPLIED_BY.get(operation, frozenset({operation}))
    return any(_entry_matches(a, op, principal, host, PermissionType.ALLOW) for a in acls for op in allow_ops)


def authorized_operations(table: AclTable, policy: Policy, principal: str, host: str,
                          resource_type: ResourceType, name: str) -> frozenset[AclOperation]:
    """KIP-430: the supported operations this principal may perform on the resource."""
    return frozenset(op for op in SUPPORTED[resource_type]
                     if decide(table, policy, principal, host, op, resource_type, name))


# ---- filters (AclBindingFilter) ------------------------------------------------------------------

@dataclass(frozen=True)
class BindingFilter:
    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    def indefinite(self) -> str | None:
        """Why the filter cannot be used (UNKNOWN anywhere: AclBindingFilter.findIndefiniteField)."""
        if self.resource_type == ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.pattern_type == PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        if self.operation == AclOperation.UNKNOWN:
            return "Operation is UNKNOWN."
        if self.permission == PermissionType.UNKNOWN:
            return "Permission type is UNKNOWN."
        return None

    def matches_pattern(self, p: ResourcePattern) -> bool:
        """ResourcePatternFilter.matches."""
        if self.resource_type not in (ResourceType.ANY, p.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, p.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, p.pattern_type):
            return self.name == p.name
        # MATCH: the patterns that would apply to a resource named `name`.
        if p.pattern_type == PatternType.LITERAL:
            return self.name == p.name or p.name == WILDCARD_RESOURCE
        if p.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(p.name)
        return False

    def matches_entry(self, a: AclEntry) -> bool:
        """AccessControlEntryFilter.matches."""
        return ((self.principal is None or self.principal == a.principal)
                and (self.host is None or self.host == a.host)
                and self.operation in (AclOperation.ANY, a.operation)
                and self.permission in (PermissionType.ANY, a.permission))


def binding_error(pattern: ResourcePattern, acl: AclEntry) -> str | None:
    """Why an ACL binding cannot be created (AclBinding.isUnknown, AuthorizerUtils.validateAclBinding)."""
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) \
            or pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED) \
            or acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY) \
            or acl.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return "Invalid ACL creation: unknown or wildcard type, pattern type, operation or permission"
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not pattern.name:
        return "Resource name must not be empty"
    try:
        parse_principal(acl.principal)
    except ValueError as e:
        return str(e)
    return None
