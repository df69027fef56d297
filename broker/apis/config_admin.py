"""Config resources for DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (Kafka 2.8's
ConfigHelper and ZkAdminManager), over the same ZooKeeper writer as `minibroker configs`.

A TOPIC resource is `/config/topics/<t>` of an existing topic; a BROKER resource is this
broker's `/config/brokers/<id>`, or `/config/brokers/<default>` when the name is empty. Writes go
through broker.zk.config_writer.alter_entity (validate, entity znode, change notification), so a
value AlterConfigs accepts is exactly one the CLI accepts and the brokers apply through their
config watch. Errors are Kafka 2.8's, per resource: an unknown key INVALID_CONFIG, a value that
does not parse INVALID_REQUEST (Kafka's ConfigException path), an unknown topic
UNKNOWN_TOPIC_OR_PARTITION, another broker's id INVALID_REQUEST.

Departures: a broker key Kafka would store as a custom config (one it does not know) is refused
with INVALID_CONFIG, as the CLI refuses it; BROKER_LOGGER resources describe as an empty list (there
are no log4j loggers) and every logger change is refused as Kafka refuses a logger that does not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from broker import config_catalog as catalog
from broker.apis.admin import AdminError
from broker.config import KNOWN_KEYS, BrokerConfig
from broker.metadata import MetadataCache
from broker.zk.client import BadVersionError, ZkClient
from broker.zk.config_entities import (
    BROKER_KEYS,
    BROKERS,
    DEFAULT_ENTITY,
    TOPIC_KEYS,
    TOPICS,
    InvalidConfig,
    UnknownConfig,
    validate,
)
from broker.zk.config_writer import alter_entity, read_entity
from protocol.errors import ErrorCode


class ResourceType(IntEnum):
    """ConfigResource.Type."""
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class OpType(IntEnum):
    """AlterConfigOp.OpType."""
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def resource_type_name(code: int) -> str:
    try:
        return ResourceType(code).name
    except ValueError:
        return ResourceType.UNKNOWN.name


@dataclass(frozen=True)
class Entity:
    entity_type: str  # "topics" or "brokers"
    znode_name: str


class ConfigAdmin:
    def __init__(self, zk: ZkClient, config: BrokerConfig, metadata: MetadataCache) -> None:
        self.zk = zk
        self.config = config
        self.metadata = metadata

    # ---- resolving a resource --------------------------------------------------------------

    def _broker_id(self, name: str) -> int:
        try:
            return int(name)
        except ValueError:
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}") from None

    def entity(self, resource_type: int, name: str) -> Entity:
        """The entity znode a TOPIC or BROKER resource names, or Kafka's error for it."""
        if resource_type == ResourceType.TOPIC:
            # metadataCache.contains: an illegal name is simply not a topic, and never a znode path.
            if name not in self.metadata.topics:
                raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
            return Entity(TOPICS, name)
        if resource_type == ResourceType.BROKER:
            if not name:
                return Entity(BROKERS, DEFAULT_ENTITY)
            if self._broker_id(name) != self.config.broker_id:
                raise AdminError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected "
                                 f"{self.config.broker_id} or empty string, but received {name}")
            return Entity(BROKERS, str(self.config.broker_id))
        raise AdminError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {resource_type_name(resource_type)}")

    def own_logger_resource(self, name: str) -> None:
        if not name:
            raise AdminError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        if self._broker_id(name) != self.config.broker_id:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {self.config.broker_id} but received {name}")

    # ---- describing --------------------------------------------------------------------------

    async def describe(self, resource_type: int, name: str, include_synonyms: bool) -> list[dict[str, Any]]:
        if resource_type == ResourceType.BROKER_LOGGER:
            self.own_logger_resource(name)
            return []
        entity = self.entity(resource_type, name)
        if entity.entity_type == TOPICS:
            topic_config, _ = await read_entity(self.zk, TOPICS, name)
            default, _ = await read_entity(self.zk, BROKERS, DEFAULT_ENTITY)
            return catalog.topic_entries(topic_config, self.config, include_synonyms, default)
        default, _ = await read_entity(self.zk, BROKERS, DEFAULT_ENTITY)
        if entity.znode_name == DEFAULT_ENTITY:
            return catalog.broker_default_entries(default, include_synonyms)
        own, _ = await read_entity(self.zk, BROKERS, entity.znode_name)
        return catalog.broker_entries(self.config, own, default, include_synonyms)

    # ---- altering ------------------------------------------------------------------------------

    def _check(self, entity: Entity, config: Mapping[str, str]) -> None:
        """Kafka's validation order: unknown names first (INVALID_CONFIG), then values (INVALID_REQUEST)."""
        known = TOPIC_KEYS if entity.entity_type == TOPICS else BROKER_KEYS
        static = sorted(k for k in config if k not in known and k in KNOWN_KEYS)
        if entity.entity_type == BROKERS and static:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             f"Invalid config value for resource: Cannot update these configs dynamically: {static}")
        for key in config:
            if key not in known:
                kind = "topic" if entity.entity_type == TOPICS else "broker"
                raise AdminError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {key}")
        try:
            validate(entity.entity_type, dict(config))
        except UnknownConfig as e:  # not reached: names were checked above
            raise AdminError(ErrorCode.INVALID_CONFIG, str(e)) from None
        except InvalidConfig as e:
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource: {e}") from None

    async def replace(self, entity: Entity, config: Mapping[str, str], validate_only: bool) -> None:
        """AlterConfigs: the entity's whole config becomes `config`."""
        self._check(entity, config)
        if validate_only:
            return
        for _ in range(3):  # another writer between our read and our conditional set: read again
            current, _ = await read_entity(self.zk, entity.entity_type, entity.znode_name)
            try:
                await alter_entity(self.zk, entity.entity_type, entity.znode_name, config,
                                   [k for k in current if k not in config], force=True)
                return
            except (BadVersionError, InvalidConfig):  # validated above: only a concurrent create is left
                continue
        raise AdminError(ErrorCode.REQUEST_TIMED_OUT, f"{entity.entity_type}/{entity.znode_name} kept changing")

    async def apply_ops(self, entity: Entity, ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
        """IncrementalAlterConfigs: SET, DELETE, and APPEND/SUBTRACT on list keys, onto the current config."""
        for _ in range(3):
            current, _ = await read_entity(self.zk, entity.entity_type, entity.znode_name)
            merged = dict(current)
            for name, op, value in ops:
                if op == OpType.SET:
                    merged[name] = value or ""
                elif op == OpType.DELETE:
                    merged.pop(name, None)
                else:
                    merged[name] = self._list_op(entity, name, OpType(op), merged.get(name), value or "")
            self._check(entity, merged)
            if validate_only:
                return
            deletes = [k for k in current if k not in merged]
            try:
                await alter_entity(self.zk, entity.entity_type, entity.znode_name, merged, deletes, force=True)
                return
            except (BadVersionError, InvalidConfig):  # validated above: only a concurrent create is left
                continue
        raise AdminError(ErrorCode.REQUEST_TIMED_OUT, f"{entity.entity_type}/{entity.znode_name} kept changing")

    @staticmethod
    def _list_op(entity: Entity, name: str, op: OpType, current: str | None, value: str) -> str:
        config_type = catalog.topic_config_type(name) if entity.entity_type == TOPICS else None
        if config_type is None and name not in (TOPIC_KEYS if entity.entity_type == TOPICS else BROKER_KEYS):
            kind = "topic" if entity.entity_type == TOPICS else "broker"
            raise AdminError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {name}")
        if config_type != catalog.ConfigType.LIST:
            verb = "append" if op == OpType.APPEND else "subtract"
            raise AdminError(ErrorCode.INVALID_REQUEST, f"Config value {verb} is not allowed for config key: {name}")
        old = [v for v in (current if current is not None else "").split(",") if v != ""]
        given = [v for v in value.split(",") if v != ""]
        new = old + given if op == OpType.APPEND else [v for v in old if v not in given]
        return ",".join(new)
