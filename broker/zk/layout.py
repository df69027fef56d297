"""Kafka's own znode layout and JSON bodies, so Kafka's tools and habits carry over."""

from __future__ import annotations

import json
import re
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


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(data: bytes | None) -> Any:
    if data is None:
        raise ValueError("znode has no data")
    return json.loads(data.decode())


# Kafka's SecurityProtocol ids, as UpdateMetadata carries them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration. `host`/`port` are the endpoint of the listener it was read for
    (the inter-broker listener, for brokers and the controller); `endpoints` are all of them,
    in registration order (empty: one PLAINTEXT endpoint at host:port)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # Project field: where the broker serves /metrics (tools read progress there, as Kafka's
    # read JMX through "jmx_port"); Kafka's own readers ignore unknown fields.
    metrics_url: str | None = None
    endpoints: tuple[Endpoint, ...] = ()

    def all_endpoints(self) -> tuple[Endpoint, ...]:
        return self.endpoints or (Endpoint("PLAINTEXT", self.host, self.port),)

    def endpoint(self, listener: str) -> Endpoint | None:
        for ep in self.all_endpoints():
            if ep.listener == listener:
                return ep
        return None

    def encode(self) -> bytes:
        eps = self.all_endpoints()
        # Kafka's version 4 body: host/port name the PLAINTEXT listener's endpoint, if any
        # (for readers older than named listeners); endpoints and the protocol map are the truth.
        plain = next((ep for ep in eps if ep.listener == "PLAINTEXT"), None)
        return dumps({
            "version": 4, "host": plain.host if plain else None, "port": plain.port if plain else -1,
            "jmx_port": -1,
            "timestamp": str(int(time.time() * 1000)),
            "endpoints": [f"{ep.listener}://{ep.host}:{ep.port}" for ep in eps],
            "listener_security_protocol_map": {ep.listener: ep.security_protocol for ep in eps},
            "rack": self.rack,
            **({"metrics_url": self.metrics_url} if self.metrics_url else {}),
        })

    @classmethod
    def decode(cls, broker_id: int, data: bytes, listener: str | None = None) -> BrokerInfo:
        """`listener`: whose endpoint becomes host/port (absent: the top-level host/port, or else
        the first endpoint)."""
        obj = loads(data)
        protocols = obj.get("listener_security_protocol_map") or {}
        eps: list[Endpoint] = []
        for item in obj.get("endpoints") or []:
            name, _, hostport = str(item).partition("://")
            host, _, p = hostport.rpartition(":")
            eps.append(Endpoint(name, host.strip("[]"), int(p), str(protocols.get(name, name))))
        host, port = obj.get("host"), obj.get("port")
        chosen = next((ep for ep in eps if ep.listener == listener), None) if listener else None
        if chosen is not None:
            host, port = chosen.host, chosen.port
        elif not host or port in (None, -1):
            # v2+ registrations may leave host/port empty and rely on endpoints.
            host, port = eps[0].host, eps[0].port
        return cls(broker_id, str(host), int(port), obj.get("rack"), obj.get("metrics_url"), tuple(eps))


def encode_assignment(assignment: dict[int, list[int]]) -> bytes:
    return dumps({"version": 1, "partitions": {str(p): r for p, r in sorted(assignment.items())}})


def decode_assignment(data: bytes) -> dict[int, list[int]]:
    obj = loads(data)
    return {int(p): [int(b) for b in r] for p, r in obj["partitions"].items()}


# The "partitions" object of a topic znode: partition numbers to lists of broker ids, so no braces inside.
_PARTITIONS = re.compile(rb'"partitions"\s*:\s*\{([^{}]*)\}')
_FIRST = re.compile(rb'"0"\s*:\s*\[([^\]]*)\]')


@dataclass(frozen=True)
class AssignmentShape:
    """What the admin request paths need of a topic znode: its partition count, partition 0's
    replication factor, and where a grown assignment's entries go. Read from the bytes without
    building the assignment: a topic may have 100,000 partitions, and decoding one per request
    (32 at a time under the fuzzer) churned tens of MiB of small objects each time, which the
    allocators kept as RSS."""

    partitions: int
    replication_factor: int
    entries_end: int  # offset just after the last entry of the "partitions" object


def assignment_shape(data: bytes) -> AssignmentShape:
    """ValueError when `data` is not a topic znode in Kafka's layout."""
    m = _PARTITIONS.search(data)
    if m is None:
        raise ValueError("no partitions object")
    body = data[m.start(1):m.end(1)]
    count = body.count(b"[")  # one list per entry, and lists of ids hold no brackets
    first = _FIRST.search(body)
    if first is not None:
        rf = len([b for b in first.group(1).split(b",") if b.strip()])
    else:
        head = re.search(rb'\[([^\]]*)\]', body)
        rf = len([b for b in head.group(1).split(b",") if b.strip()]) if head is not None else 1
    return AssignmentShape(count, rf, m.end(1))


def grow_assignment(data: bytes, shape: AssignmentShape, additions: dict[int, list[int]]) -> bytes:
    """`data` with `additions` appended to its partitions object, every other byte kept as read."""
    added = ",".join(f'"{p}":[{",".join(map(str, r))}]' for p, r in sorted(additions.items())).encode()
    sep = b"," if shape.partitions else b""
    return data[:shape.entries_end] + sep + added + data[shape.entries_end:]


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
