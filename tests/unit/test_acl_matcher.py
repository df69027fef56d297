"""broker.security.acl: Kafka 2.8 AclAuthorizer's decision, filters and ZooKeeper JSON, pure.

Cases follow Kafka's AclAuthorizerTest (principals, hosts, deny over allow, implied Describe and
DescribeConfigs, ALL, wildcard resource and principal, PREFIXED, super users,
allow.everyone.if.no.acl.found), on principals other than ANONYMOUS, which the brokers cannot
yet tell apart (no SASL/TLS).
"""

from __future__ import annotations

import json

import pytest

from broker.security.acl import (
    AclEntry,
    AclOperation,
    AclTable,
    BindingFilter,
    PatternType,
    PermissionType,
    Policy,
    ResourcePattern,
    ResourceType,
    authorized_operations,
    binding_error,
    decide,
    decode_acls,
    encode_acls,
    parse_name,
    parse_super_users,
)

Op, T, P, Perm = AclOperation, ResourceType, PatternType, PermissionType
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "192.168.1.1", "10.0.0.9"
NO_POLICY = Policy()


def table(*bindings: tuple[ResourcePattern, AclEntry]) -> AclTable:
    t = AclTable()
    by: dict[ResourcePattern, set[AclEntry]] = {}
    for p, a in bindings:
        by.setdefault(p, set()).add(a)
    for p, acls in by.items():
        t.set(p, frozenset(acls))
    return t


def topic(name: str, pattern: PatternType = P.LITERAL) -> ResourcePattern:
    return ResourcePattern(T.TOPIC, name, pattern)


def allow(principal: str, op: AclOperation, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, Perm.ALLOW)


def deny(principal: str, op: AclOperation, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, Perm.DENY)


def may(t: AclTable, principal: str, op: AclOperation, name: str = "orders", host: str = HOST,
        policy: Policy = NO_POLICY, rtype: ResourceType = T.TOPIC) -> bool:
    return decide(t, policy, principal, host, op, rtype, name)


def test_no_acls_denies_unless_allow_everyone() -> None:
    assert not may(AclTable(), ALICE, Op.READ)
    assert may(AclTable(), ALICE, Op.READ, policy=Policy(allow_everyone_if_no_acl_found=True))


def test_allow_everyone_applies_only_where_no_acl_matches_the_resource() -> None:
    t = table((topic("orders"), allow(BOB, Op.READ)))
    everyone = Policy(allow_everyone_if_no_acl_found=True)
    assert not may(t, ALICE, Op.READ, policy=everyone)  # an ACL exists for orders: alice is not in it
    assert may(t, ALICE, Op.READ, name="payments", policy=everyone)


def test_principal_and_host_must_match() -> None:
    t = table((topic("orders"), allow(ALICE, Op.READ, HOST)))
    assert may(t, ALICE, Op.READ)
    assert not may(t, BOB, Op.READ)
    assert not may(t, ALICE, Op.READ, host=OTHER_HOST)


def test_wildcard_principal_and_host() -> None:
    t = table((topic("orders"), allow("User:*", Op.WRITE)))
    assert may(t, ALICE, Op.WRITE, host=OTHER_HOST)
    assert may(t, "User:ANONYMOUS", Op.WRITE)
    assert not may(t, ALICE, Op.READ)


def test_deny_beats_allow() -> None:
    t = table((topic("orders"), allow(ALICE, Op.READ)), (topic("orders"), deny(ALICE, Op.READ, HOST)))
    assert not may(t, ALICE, Op.READ)
    assert may(t, ALICE, Op.READ, host=OTHER_HOST)  # the deny names one host
    wide = table((topic("orders"), allow(ALICE, Op.ALL)), (topic("*"), deny("User:*", Op.WRITE)))
    assert not may(wide, ALICE, Op.WRITE)
    assert may(wide, ALICE, Op.READ)


def test_implied_operations() -> None:
    for granted in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert may(table((topic("orders"), allow(ALICE, granted))), ALICE, Op.DESCRIBE), granted
    assert not may(table((topic("orders"), allow(ALICE, Op.CREATE))), ALICE, Op.DESCRIBE)
    assert may(table((topic("orders"), allow(ALICE, Op.ALTER_CONFIGS))), ALICE, Op.DESCRIBE_CONFIGS)
    assert not may(table((topic("orders"), allow(ALICE, Op.DESCRIBE))), ALICE, Op.READ)
    # A DENY of Read does not deny Describe (only the operation itself or ALL).
    t = table((topic("orders"), allow(ALICE, Op.DESCRIBE)), (topic("orders"), deny(ALICE, Op.READ)))
    assert may(t, ALICE, Op.DESCRIBE)
    assert not may(t, ALICE, Op.READ)


def test_all_matches_every_operation() -> None:
    t = table((topic("orders"), allow(ALICE, Op.ALL)))
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALTER_CONFIGS):
        assert may(t, ALICE, op)
    assert not may(table((topic("orders"), allow(ALICE, Op.ALL)), (topic("orders"), deny(ALICE, Op.ALL))),
                   ALICE, Op.READ)


def test_wildcard_resource_and_prefixed() -> None:
    t = table((topic("*"), allow(ALICE, Op.READ)), (topic("pay", P.PREFIXED), allow(BOB, Op.WRITE)))
    assert may(t, ALICE, Op.READ, name="anything")
    assert may(t, BOB, Op.WRITE, name="payments")
    assert may(t, BOB, Op.WRITE, name="pay")
    assert not may(t, BOB, Op.WRITE, name="orders")
    assert not may(t, BOB, Op.WRITE, name="pa")
    # A literal `*` under PREFIXED is a prefix of names that start with '*', not a wildcard.
    star = table((topic("*", P.PREFIXED), allow(ALICE, Op.READ)))
    assert not may(star, ALICE, Op.READ, name="orders")


def test_prefixed_deny_beats_literal_allow() -> None:
    t = table((topic("orders"), allow(ALICE, Op.READ)), (topic("ord", P.PREFIXED), deny(ALICE, Op.READ)))
    assert not may(t, ALICE, Op.READ)


def test_resource_types_are_separate() -> None:
    t = table((ResourcePattern(T.GROUP, "orders"), allow(ALICE, Op.READ)))
    assert may(t, ALICE, Op.READ, rtype=T.GROUP)
    assert not may(t, ALICE, Op.READ, rtype=T.TOPIC)


def test_super_users_bypass_everything() -> None:
    policy = Policy(super_users=parse_super_users("User:admin; User:ops"))
    t = table((topic("orders"), deny("User:*", Op.ALL)))
    assert may(t, "User:admin", Op.WRITE, policy=policy)
    assert may(t, "User:ops", Op.DELETE, policy=policy)
    assert not may(t, ALICE, Op.WRITE, policy=policy)
    with pytest.raises(ValueError):
        parse_super_users("admin")


def test_authorized_operations() -> None:
    t = table((topic("orders"), allow(ALICE, Op.READ)), (topic("orders"), allow(ALICE, Op.ALTER_CONFIGS)))
    ops = authorized_operations(t, NO_POLICY, ALICE, HOST, T.TOPIC, "orders")
    assert ops == {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert authorized_operations(t, NO_POLICY, BOB, HOST, T.TOPIC, "orders") == frozenset()


def test_zookeeper_json_round_trip_and_kafka_spelling() -> None:
    acls = frozenset({allow(ALICE, Op.IDEMPOTENT_WRITE, HOST), deny("User:*", Op.DESCRIBE_CONFIGS)})
    raw = encode_acls(acls)
    doc = json.loads(raw)
    assert doc["version"] == 1
    assert {"principal": ALICE, "permissionType": "Allow", "operation": "IdempotentWrite", "host": HOST} in doc["acls"]
    assert {"principal": "User:*", "permissionType": "Deny", "operation": "DescribeConfigs", "host": "*"} in doc["acls"]
    assert decode_acls(raw) == acls
    # What Kafka's own AclAuthorizer writes (from its ZkData comment).
    kafka = b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Allow","operation": "Read","principal": "User:alice"}]}'
    assert decode_acls(kafka) == {AclEntry(ALICE, "host1", Op.READ, Perm.ALLOW)}
    assert decode_acls(b"") == frozenset()
    with pytest.raises(ValueError):
        decode_acls(b'{"version": 2, "acls": []}')


def test_names_parse_as_kafka_tools_write_them() -> None:
    assert parse_name(AclOperation, "IdempotentWrite") is Op.IDEMPOTENT_WRITE
    assert parse_name(AclOperation, "describe-configs") is Op.DESCRIBE_CONFIGS
    assert parse_name(ResourceType, "TransactionalId") is T.TRANSACTIONAL_ID
    assert parse_name(PatternType, "prefixed") is P.PREFIXED
    with pytest.raises(ValueError):
        parse_name(AclOperation, "Fly")


def flt(rtype: ResourceType = T.ANY, name: str | None = None, pattern: PatternType = P.ANY,
        principal: str | None = None, host: str | None = None, op: AclOperation = Op.ANY,
        perm: PermissionType = Perm.ANY) -> BindingFilter:
    return BindingFilter(rtype, name, pattern, principal, host, op, perm)


def test_filters_match_as_acl_binding_filter() -> None:
    lit, star, pre = topic("orders"), topic("*"), topic("ord", P.PREFIXED)
    assert all(flt().matches_pattern(p) for p in (lit, star, pre))
    assert flt(T.TOPIC, "orders", P.LITERAL).matches_pattern(lit)
    assert not flt(T.TOPIC, "orders", P.LITERAL).matches_pattern(star)
    assert not flt(T.GROUP).matches_pattern(lit)
    match = flt(T.TOPIC, "orders", P.MATCH)
    assert match.matches_pattern(lit) and match.matches_pattern(star) and match.matches_pattern(pre)
    assert not match.matches_pattern(topic("orders-x"))
    assert flt(T.TOPIC, "ord", P.ANY).matches_pattern(pre)
    assert not flt(T.TOPIC, "ord", P.LITERAL).matches_pattern(pre)
    a = allow(ALICE, Op.READ, HOST)
    assert flt(principal=ALICE).matches_entry(a)
    assert not flt(principal=BOB).matches_entry(a)
    assert not flt(host="*").matches_entry(a)
    assert flt(op=Op.READ, perm=Perm.ALLOW).matches_entry(a)
    assert not flt(perm=Perm.DENY).matches_entry(a)
    assert flt(op=Op.UNKNOWN).indefinite() is not None
    assert flt(pattern=P.UNKNOWN).indefinite() is not None
    assert flt().indefinite() is None


def test_binding_validation() -> None:
    assert binding_error(topic("orders"), allow(ALICE, Op.READ)) is None
    assert binding_error(ResourcePattern(T.CLUSTER, "kafka-cluster"), allow(ALICE, Op.CLUSTER_ACTION)) is None
    assert binding_error(ResourcePattern(T.CLUSTER, "other"), allow(ALICE, Op.ALTER)) is not None
    assert binding_error(topic("orders", P.MATCH), allow(ALICE, Op.READ)) is not None
    assert binding_error(ResourcePattern(T.ANY, "orders"), allow(ALICE, Op.READ)) is not None
    assert binding_error(topic("orders"), allow(ALICE, Op.ANY)) is not None
    assert binding_error(topic("orders"), AclEntry(ALICE, "*", Op.READ, Perm.ANY)) is not None
    assert binding_error(topic("orders"), allow("alice", Op.READ)) is not None
