"""Kafka's own znode layout and JSON bodies, so Kafka's tools and habits carry over."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ISR_CHANGE = "/isr_change_notification"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN = "/admin/reassign_partitions"
CONFIG_CHANGES = "/config/changes"
CONFIG_ROOT = "/config"

CONSUMERS = "/consumers"
BROKER_SEQID = "/brokers/seqid"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_DIR_EVENT = "/log_dir_event_notification"
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers", "ips")  # Kafka 2.8's ConfigType.all

# Kafka 2.8's ZkData.PersistentZkPaths, created at start (under the chroot): monitoring and
# admin tools expect every one of them, even those this broker never writes.
PERSISTENT_PATHS = (CONSUMERS, BROKER_IDS, BROKER_TOPICS, CONFIG_CHANGES, DELETE_TOPICS, BROKER_SEQID,
                    ISR_CHANGE, PRODUCER_ID_BLOCK, LOG_DIR_EVENT,
                    *(f"{CONFIG_ROOT}/{t}" for t in CONFIG_ENTITY_TYPES))


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes | None) -> Any:
    if data is None:
        raise ValueError("znode has no data")
    return json.loads(data.decode())


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # Project field: where the broker serves /metrics (tools read progress there, as Kafka's
    # read JMX through "jmx_port"); Kafka's own readers ignore unknown fields.
    metrics_url: str | None = None

    def encode(self) -> bytes:
        return dumps({
            "version": 4, "host": self.host, "port": self.port, "jmx_port": -1,
            "timestamp": str(int(time.time() * 1000)),
            "endpoints": [f"PLAINTEXT://{self.host}:{self.port}"],
            "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
            "rack": self.rack,
            **({"metrics_url": self.metrics_url} if self.metrics_url else {}),
        })

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        obj = loads(data)
        host, port = obj.get("host"), obj.get("port")
        if not host or port in (None, -1):
            # v2+ registrations may leave host/port empty and rely on endpoints.
            ep = obj["endpoints"][0]
            hostport = ep.split("://", 1)[1]
            host, _, p = hostport.rpartition(":")
            port = int(p)
        return cls(broker_id, str(host), int(port), obj.get("rack"), obj.get("metrics_url"))


def encode_assignment(assignment: dict[int, list[int]]) -> bytes:
    return dumps({"version": 1, "partitions": {str(p): r for p, r in sorted(assignment.items())}})


def decode_assignment(data: bytes) -> dict[int, list[int]]:
    obj = loads(data)
    return {int(p): [int(b) for b in r] for p, r in obj["partitions"].items()}


@dataclass
class PartitionState:
    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: list[int] = field(default_factory=list)

    def encode(self) -> bytes:
        return dumps({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                      "controller_epoch": self.controller_epoch, "isr": self.isr})

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        obj = loads(data)
        return cls(int(obj["leader"]), int(obj["leader_epoch"]), int(obj["controller_epoch"]),
                   [int(b) for b in obj["isr"]])


def encode_entity_config(config: dict[str, str]) -> bytes:
    return dumps({"version": 1, "config": config})


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = loads(data)
    cfg = obj.get("config") or {}
    return {str(k): str(v) for k, v in cfg.items()}


# Kafka 2.8's ProducerIdManager: blocks of 1000 producer ids, both ends inclusive, the ids as
# strings (JSON numbers would lose precision in readers that parse them as doubles).
PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_ID_BLOCK_VERSION = 1


@dataclass(frozen=True)
class ProducerIdBlock:
    broker_id: int
    block_start: int
    block_end: int

    def encode(self) -> bytes:
        return dumps({"version": PRODUCER_ID_BLOCK_VERSION, "broker": self.broker_id,
                      "block_start": str(self.block_start), "block_end": str(self.block_end)})

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        obj = loads(data)
        return cls(int(obj["broker"]), int(str(obj["block_start"])), int(str(obj["block_end"])))

    def next_block(self, broker_id: int) -> ProducerIdBlock:
        return ProducerIdBlock(broker_id, self.block_end + 1, self.block_end + PRODUCER_ID_BLOCK_SIZE)


def first_producer_id_block(broker_id: int) -> ProducerIdBlock:
    return ProducerIdBlock(broker_id, 0, PRODUCER_ID_BLOCK_SIZE - 1)
