"""What DescribeConfigs says about each config: Kafka 2.8's types, defaults, sources and synonyms.

Pure: it is given the broker's static config and the dynamic entity configs (as read from
ZooKeeper) and returns the entries, in Kafka's order of precedence (ConfigHelper.configSynonyms:
dynamic per-broker, dynamic cluster default, static server.properties, Kafka's default).

Which keys exist is decided elsewhere, once: a topic key is one broker.zk.config_entities serves
(TOPIC_KEYS), a dynamic broker key one of BROKER_KEYS, a static broker key one broker.config
parses. This module only describes them; tests hold the tables to those sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from broker.config import KNOWN_KEYS, LONG_MAX, BrokerConfig, current_value
from broker.zk import config_entities as E


class ConfigSource(IntEnum):
    """DescribeConfigsResponse.ConfigSource."""
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType(IntEnum):
    """DescribeConfigsResponse.ConfigType (the wire form of ConfigDef.Type)."""
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True)
class TopicKey:
    type: ConfigType
    default: str  # Kafka 2.8's LogConfig default, as its string form
    broker_synonyms: tuple[str, ...] = ()  # DynamicBrokerConfig.brokerConfigSynonyms, highest first


# LogConfig's keys this broker serves (broker.zk.config_entities.TOPIC_KEYS), with Kafka 2.8's
# defaults and LogConfig.TopicConfigSynonyms.
TOPIC_CATALOG: dict[str, TopicKey] = {
    E.LEADER_REPLICAS: TopicKey(ConfigType.LIST, ""),
    E.FOLLOWER_REPLICAS: TopicKey(ConfigType.LIST, ""),
    "min.insync.replicas": TopicKey(ConfigType.INT, "1", ("min.insync.replicas",)),
    "segment.bytes": TopicKey(ConfigType.INT, "1073741824", ("log.segment.bytes",)),
    "retention.ms": TopicKey(ConfigType.LONG, "604800000",
                             ("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    "retention.bytes": TopicKey(ConfigType.LONG, "-1", ("log.retention.bytes",)),
    "max.message.bytes": TopicKey(ConfigType.INT, "1048588", ("message.max.bytes",)),
    # Kafka's broker synonyms of these three (log.message.timestamp.type,
    # log.message.timestamp.difference.max.ms, compression.type) are not broker keys here: a topic
    # without its own value has Kafka's default.
    "message.timestamp.type": TopicKey(ConfigType.STRING, "CreateTime"),
    "message.timestamp.difference.max.ms": TopicKey(ConfigType.LONG, "9223372036854775807"),
    "compression.type": TopicKey(ConfigType.STRING, "producer"),
    "min.cleanable.dirty.ratio": TopicKey(ConfigType.DOUBLE, "0.5", ("log.cleaner.min.cleanable.ratio",)),
    "min.compaction.lag.ms": TopicKey(ConfigType.LONG, "0", ("log.cleaner.min.compaction.lag.ms",)),
    "max.compaction.lag.ms": TopicKey(ConfigType.LONG, "9223372036854775807",
                                      ("log.cleaner.max.compaction.lag.ms",)),
    "delete.retention.ms": TopicKey(ConfigType.LONG, "86400000", ("log.cleaner.delete.retention.ms",)),
    # Retention (issue 17). Kafka's broker synonym of segment.ms is log.roll.ms/log.roll.hours
    # (the issue's `log.segment.ms`), of file.delete.delay.ms log.segment.delete.delay.ms.
    "segment.ms": TopicKey(ConfigType.LONG, "604800000", ("log.roll.ms", "log.roll.hours")),
    "file.delete.delay.ms": TopicKey(ConfigType.LONG, "60000", ("log.segment.delete.delay.ms",)),
    "cleanup.policy": TopicKey(ConfigType.LIST, "delete", ("log.cleanup.policy",)),
}

# Broker synonyms in other units than their topic key (ms): a topic value taken from one is
# converted, as Kafka's LogConfig does (log.retention.hours=168 is retention.ms=604800000).
_SYNONYM_MS_FACTOR = {"log.retention.hours": 3_600_000, "log.retention.minutes": 60_000, "log.roll.hours": 3_600_000}

# Dynamic broker keys (broker.zk.config_entities.BROKER_KEYS): type and Kafka's default.
BROKER_DYNAMIC_CATALOG: dict[str, tuple[ConfigType, str]] = {
    E.LEADER_RATE: (ConfigType.LONG, str(LONG_MAX)),
    E.FOLLOWER_RATE: (ConfigType.LONG, str(LONG_MAX)),
    E.CLEANER_IO_RATE: (ConfigType.DOUBLE, "1.7976931348623157E308"),
}

# Types of the static keys (KafkaConfig's ConfigDef); any key not listed is a STRING.
_STATIC_TYPES: dict[str, ConfigType] = {
    **dict.fromkeys(("broker.id", "log.segment.bytes", "zookeeper.session.timeout.ms", "num.partitions",
                     "default.replication.factor", "min.insync.replicas", "socket.request.max.bytes",
                     "max.connections", "max.connections.per.ip", "max.in.flight.requests.per.connection",
                     "message.max.bytes", "replica.fetch.max.bytes",
                     "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms", "replica.fetch.min.bytes",
                     "replica.fetch.backoff.ms", "num.replica.fetchers", "replication.quota.window.num",
                     "replication.quota.window.size.seconds", "quota.window.num", "quota.window.size.seconds",
                     "controller.quota.window.num", "controller.quota.window.size.seconds",
                     "controlled.shutdown.max.retries", "log.retention.hours", "log.retention.minutes", "log.roll.hours",
                     "group.min.session.timeout.ms", "group.max.session.timeout.ms",
                     "group.initial.rebalance.delay.ms", "group.max.size", "offset.metadata.max.bytes",
                     "offsets.retention.minutes",
                     "offsets.topic.num.partitions", "offsets.topic.segment.bytes", "offsets.topic.compression.codec",
                     "offsets.load.buffer.size", "offsets.commit.timeout.ms"), ConfigType.INT),
    **dict.fromkeys(("offsets.topic.replication.factor", "offsets.commit.required.acks"), ConfigType.SHORT),
    **dict.fromkeys(("connections.max.idle.ms", "queued.max.request.bytes", "replica.lag.time.max.ms",
                     "quota.producer.default", "quota.consumer.default",
                     "replication.throttle.leftover.warn.ms", "controlled.shutdown.retry.backoff.ms",
                     "log.retention.ms", "log.retention.bytes", "log.page.cache.window.bytes",
                     "log.roll.ms", "log.retention.check.interval.ms", "log.segment.delete.delay.ms",
                     "log.cleaner.dedupe.buffer.size", "log.cleaner.min.compaction.lag.ms",
                     "log.cleaner.max.compaction.lag.ms", "log.cleaner.delete.retention.ms", "log.cleaner.backoff.ms",
                     "offsets.retention.check.interval.ms"),
                    ConfigType.LONG),
    **dict.fromkeys(("log.cleaner.io.max.bytes.per.second", "log.cleaner.min.cleanable.ratio"), ConfigType.DOUBLE),
    "log.cleanup.policy": ConfigType.LIST,
    "log.cleaner.threads": ConfigType.INT,
    **dict.fromkeys(("auto.create.topics.enable", "unclean.leader.election.enable",
                     "controlled.shutdown.enable", "log.cleaner.enable", "zookeeper.set.acl"), ConfigType.BOOLEAN),
}


def is_sensitive(name: str) -> bool:
    """Kafka hides PASSWORD-typed values; none is served yet, so this goes by the name."""
    return "password" in name or name.endswith(".jaas.config")


def _entry(name: str, value: str | None, source: ConfigSource, read_only: bool, config_type: ConfigType,
           synonyms: list[dict[str, Any]], include_synonyms: bool) -> dict[str, Any]:
    sensitive = is_sensitive(name)
    return {"name": name, "value": None if sensitive else value, "read_only": read_only,
            "is_default": source == ConfigSource.DEFAULT_CONFIG, "config_source": int(source),
            "is_sensitive": sensitive, "synonyms": synonyms if include_synonyms else [],
            "config_type": int(config_type), "documentation": None}


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict[str, Any]:
    return {"name": name, "value": None if is_sensitive(name) else value, "source": int(source)}


def _broker_synonyms(names: tuple[str, ...], static: BrokerConfig, dynamic_broker: Mapping[str, str],
                     dynamic_default: Mapping[str, str], skip_null_defaults: bool = False) -> list[dict[str, Any]]:
    """ConfigHelper.configSynonyms: every name's dynamic per-broker value, then the cluster
    defaults, then server.properties, then Kafka's defaults."""
    out = [_synonym(n, dynamic_broker[n], ConfigSource.DYNAMIC_BROKER_CONFIG) for n in names if n in dynamic_broker]
    out += [_synonym(n, dynamic_default[n], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            for n in names if n in dynamic_default]
    out += [_synonym(n, static.given[n], ConfigSource.STATIC_BROKER_CONFIG) for n in names if n in static.given]
    for n in names:
        if n in BROKER_DYNAMIC_CATALOG:
            out.append(_synonym(n, BROKER_DYNAMIC_CATALOG[n][1], ConfigSource.DEFAULT_CONFIG))
        elif n in KNOWN_KEYS:
            default = current_value(BrokerConfig(), n)
            # A topic's synonyms list no key without a default (Kafka: log.retention.ms, .minutes).
            if default is not None or not skip_null_defaults:
                out.append(_synonym(n, default, ConfigSource.DEFAULT_CONFIG))
    return out


def topic_entries(topic_config: Mapping[str, str], static: BrokerConfig, include_synonyms: bool,
                  dynamic_default: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every served topic key: the topic's override, else the broker's value, else Kafka's default."""
    out = []
    for name, key in sorted(TOPIC_CATALOG.items()):
        synonyms = _broker_synonyms(key.broker_synonyms, static, {}, dynamic_default or {}, skip_null_defaults=True)
        if name in topic_config:
            synonyms.insert(0, _synonym(name, topic_config[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if synonyms:
            value, source = synonyms[0]["value"], ConfigSource(synonyms[0]["source"])
            factor = _SYNONYM_MS_FACTOR.get(synonyms[0]["name"])
            if factor is not None and value is not None:
                value = str(int(value) * factor)  # e.g. log.retention.hours=168 is retention.ms=604800000
            if name == "retention.ms" and value is not None and int(value) < 0:
                value = "-1"  # KafkaConfig.logRetentionTimeMillis: any negative is -1
        else:
            value, source = key.default, ConfigSource.DEFAULT_CONFIG
        out.append(_entry(name, value, source, False, key.type, synonyms, include_synonyms))
    return out


def broker_entries(static: BrokerConfig, dynamic_broker: Mapping[str, str], dynamic_default: Mapping[str, str],
                   include_synonyms: bool) -> list[dict[str, Any]]:
    """One broker's configs (DescribeConfigs of BROKER `<id>`): static keys read-only, dynamic keys
    with their per-broker, cluster-default, or Kafka-default value."""
    out = []
    for name in sorted(KNOWN_KEYS | BROKER_DYNAMIC_CATALOG.keys()):
        synonyms = _broker_synonyms((name,), static, dynamic_broker, dynamic_default)
        dynamic = name in BROKER_DYNAMIC_CATALOG
        config_type = BROKER_DYNAMIC_CATALOG[name][0] if dynamic else _STATIC_TYPES.get(name, ConfigType.STRING)
        top = synonyms[0]
        source = ConfigSource(top["source"])
        value = top["value"] if source != ConfigSource.DEFAULT_CONFIG or dynamic else current_value(static, name)
        out.append(_entry(name, value, source, not dynamic, config_type, synonyms, include_synonyms))
    return out


def broker_default_entries(dynamic_default: Mapping[str, str], include_synonyms: bool) -> list[dict[str, Any]]:
    """DescribeConfigs of BROKER `""`: the cluster-wide dynamic defaults (`/config/brokers/<default>`) only."""
    out = []
    for name, value in sorted(dynamic_default.items()):
        config_type = BROKER_DYNAMIC_CATALOG.get(name, (ConfigType.UNKNOWN, ""))[0]
        synonyms = [_synonym(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
        out.append(_entry(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False, config_type, synonyms,
                          include_synonyms))
    return out


def topic_config_type(name: str) -> ConfigType | None:
    key = TOPIC_CATALOG.get(name)
    return None if key is None else key.type
