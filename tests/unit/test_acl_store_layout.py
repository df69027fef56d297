"""broker.zk.acl_store's paths and change notifications are Kafka 2.8's (ZkAclStore, ZkAclChangeStore)."""

from __future__ import annotations

import json

from broker.security.acl import PatternType, ResourcePattern, ResourceType
from broker.security.authorizer import from_stored, to_stored
from broker.zk.acl_store import (
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    StoredPattern,
    decode_change,
    encode_change,
    resource_path,
)


def test_paths() -> None:
    assert resource_path(StoredPattern("Topic", "orders", "LITERAL")) == "/kafka-acl/Topic/orders"
    assert resource_path(StoredPattern("Cluster", "kafka-cluster", "LITERAL")) == "/kafka-acl/Cluster/kafka-cluster"
    assert resource_path(StoredPattern("TransactionalId", "tx", "PREFIXED")) == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx"


def test_literal_notification_is_type_colon_name() -> None:
    parent, body = encode_change(StoredPattern("Group", "g:with:colons", "LITERAL"))
    assert (parent, body) == (LITERAL_CHANGES, b"Group:g:with:colons")
    assert decode_change(parent, body) == StoredPattern("Group", "g:with:colons", "LITERAL")


def test_extended_notification_is_kafka_json() -> None:
    parent, body = encode_change(StoredPattern("Topic", "pay-", "PREFIXED"))
    assert parent == EXTENDED_CHANGES
    assert json.loads(body) == {"version": 1, "resourceType": "Topic", "name": "pay-", "patternType": "PREFIXED"}
    assert decode_change(parent, body) == StoredPattern("Topic", "pay-", "PREFIXED")


def test_patterns_map_both_ways() -> None:
    for p in (ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.LITERAL),
              ResourcePattern(ResourceType.TOPIC, "t-", PatternType.PREFIXED)):
        assert from_stored(to_stored(p)) == p
    assert to_stored(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx")).resource_type == "TransactionalId"
