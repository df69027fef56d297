"""DescribeConfigs' view of configs (broker.config_catalog), the cluster id znode and the KIP-430 bitfields."""

from __future__ import annotations

import base64

from broker.apis.authorized_operations import CLUSTER_OPERATIONS, NOT_REQUESTED, TOPIC_OPERATIONS
from broker.config import KNOWN_KEYS, build_config, current_value
from broker.config_catalog import (
    _STATIC_TYPES,
    BROKER_DYNAMIC_CATALOG,
    TOPIC_CATALOG,
    ConfigSource,
    ConfigType,
    broker_default_entries,
    broker_entries,
    topic_entries,
)
from broker.zk import cluster_id
from broker.zk.config_entities import BROKER_KEYS, TOPIC_KEYS


def test_the_catalog_describes_exactly_the_served_keys() -> None:
    assert TOPIC_CATALOG.keys() == TOPIC_KEYS.keys()
    assert BROKER_DYNAMIC_CATALOG.keys() == BROKER_KEYS.keys()
    assert _STATIC_TYPES.keys() <= KNOWN_KEYS
    for key in TOPIC_CATALOG.values():
        assert all(s in KNOWN_KEYS or s.startswith("log.retention") for s in key.broker_synonyms)


def test_topic_values_come_from_the_topic_then_the_broker_then_kafkas_default() -> None:
    static = build_config({"broker.id": "3", "log.segment.bytes": "50000"})
    entries = {e["name"]: e for e in topic_entries({"retention.ms": "10"}, static, include_synonyms=True)}
    assert (entries["retention.ms"]["value"], entries["retention.ms"]["config_source"]) == (
        "10", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert entries["retention.ms"]["synonyms"] == [
        {"name": "retention.ms", "value": "10", "source": ConfigSource.DYNAMIC_TOPIC_CONFIG},
        {"name": "log.retention.hours", "value": "168", "source": ConfigSource.DEFAULT_CONFIG}]
    assert (entries["segment.bytes"]["value"], entries["segment.bytes"]["config_source"]) == (
        "50000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [s["source"] for s in entries["segment.bytes"]["synonyms"]] == [
        ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    # log.retention.hours=168 (Kafka's default) is retention.ms=604800000
    without = {e["name"]: e for e in topic_entries({}, static, include_synonyms=False)}
    assert (without["retention.ms"]["value"], without["retention.ms"]["config_source"]) == (
        "604800000", ConfigSource.DEFAULT_CONFIG)
    assert without["retention.ms"]["synonyms"] == [] and without["retention.ms"]["is_default"]
    assert without[
        "leader.replication.throttled.replicas"]["config_type"] == ConfigType.LIST
    assert all(not e["read_only"] for e in without.values())


def test_broker_values_precedence_and_read_only() -> None:
    static = build_config({"broker.id": "3", "num.partitions": "4"})
    rate = "leader.replication.throttled.rate"
    entries = {e["name"]: e for e in broker_entries(
        static, {rate: "100"}, {rate: "200", "follower.replication.throttled.rate": "300"}, include_synonyms=True)}
    assert entries[rate]["value"] == "100" and entries[rate]["config_source"] == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [s["source"] for s in entries[rate]["synonyms"]] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    follower = entries["follower.replication.throttled.rate"]
    assert (follower["value"], follower["config_source"], follower["read_only"]) == (
        "300", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
    assert (entries["num.partitions"]["value"], entries["num.partitions"]["config_source"]) == (
        "4", ConfigSource.STATIC_BROKER_CONFIG)
    assert entries["num.partitions"]["read_only"] and entries["num.partitions"]["config_type"] == ConfigType.INT
    assert entries["auto.create.topics.enable"]["value"] == "true"
    assert entries["auto.create.topics.enable"]["config_source"] == ConfigSource.DEFAULT_CONFIG
    assert set(entries) == KNOWN_KEYS | BROKER_KEYS.keys()
    defaults = broker_default_entries({rate: "200"}, include_synonyms=False)
    assert [(e["name"], e["value"], e["config_source"]) for e in defaults] == [
        (rate, "200", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]


def test_current_value_renders_parsed_defaults_as_properties() -> None:
    cfg = build_config({"broker.id": "1"})
    assert current_value(cfg, "listeners") == "PLAINTEXT://127.0.0.1:9092"
    assert current_value(cfg, "unclean.leader.election.enable") == "false"
    assert current_value(cfg, "metrics.listener") is None
    assert current_value(build_config({"broker.id": "1", "num.partitions": "7"}), "num.partitions") == "7"


def test_cluster_id_znode_is_kafkas() -> None:
    new = cluster_id.new_cluster_id()
    assert len(new) == 22 and len(base64.urlsafe_b64decode(new + "==")) == 16
    assert cluster_id.encode(new) == b'{"version":"1","id":"' + new.encode() + b'"}'
    assert cluster_id.decode(cluster_id.encode(new)) == new
    for bad in (b"", b"null", b'{"version":"1"}', b'{"id":5}'):
        try:
            cluster_id.decode(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_authorized_operation_bitfields_are_kafkas() -> None:
    # AclEntry.supportedOperations (2.8) with Utils.to32BitField
    assert TOPIC_OPERATIONS == 3576 and CLUSTER_OPERATIONS == 8096 and NOT_REQUESTED == -2147483648


def test_controlled_shutdown_retry_keys_are_kafkas_with_its_defaults_and_types() -> None:
    entries = {e["name"]: e for e in broker_entries(build_config({"broker.id": "1"}), {}, {}, include_synonyms=False)}
    retries, backoff = entries["controlled.shutdown.max.retries"], entries["controlled.shutdown.retry.backoff.ms"]
    assert (retries["value"], retries["config_type"], retries["config_source"]) == (
        "3", ConfigType.INT, ConfigSource.DEFAULT_CONFIG)
    assert (backoff["value"], backoff["config_type"], backoff["config_source"]) == (
        "5000", ConfigType.LONG, ConfigSource.DEFAULT_CONFIG)
    assert retries["read_only"] and backoff["read_only"]
    given = build_config({"broker.id": "1", "controlled.shutdown.max.retries": "5",
                          "controlled.shutdown.retry.backoff.ms": "250"})
    assert (given.controlled_shutdown_max_retries, given.controlled_shutdown_retry_backoff_ms) == (5, 250)
    entries = {e["name"]: e for e in broker_entries(given, {}, {}, include_synonyms=False)}
    assert entries["controlled.shutdown.max.retries"]["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
