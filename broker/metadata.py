"""What this broker knows of the cluster, kept current by ZooKeeper watches.

Brokers come from `/brokers/ids`, topics from `/brokers/topics/<t>` and partition
leadership from each partition's state znode, in Kafka's JSON. A corrupt or partial
znode is logged and skipped: one bad znode must not take the broker down.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from broker import zk_layout as L
from broker.zk import ZkClient

log = structlog.get_logger()

LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_LENGTH = 249


def topic_name_error(name: str | None) -> str | None:
    """Kafka's Topic.validate, as a message (None when the name is legal)."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_LENGTH} characters"
    if not LEGAL_TOPIC.match(name):
        return f"Topic name \"{name[:MAX_TOPIC_LENGTH]}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


@dataclass
class TopicMeta:
    name: str
    assignment: dict[int, list[int]] = field(default_factory=dict)
    states: dict[int, L.PartitionState] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)


PartitionListener = Callable[[str, int, "TopicMeta"], Awaitable[None]]
TopicGoneListener = Callable[[str], Awaitable[None]]


class Metadata:
    def __init__(self, zk: ZkClient, on_partition: PartitionListener, on_topic_gone: TopicGoneListener) -> None:
        self.zk = zk
        self.brokers: dict[int, L.BrokerInfo] = {}
        self.topics: dict[str, TopicMeta] = {}
        self.controller_id = -1
        self._on_partition = on_partition
        self._on_topic_gone = on_topic_gone
        self._watched: set[str] = set()

    async def start(self) -> None:
        await self.zk.watch_children(L.BROKER_IDS, self._brokers_changed)
        await self.zk.watch_children(L.BROKER_TOPICS, self._topics_changed)
        await self.zk.watch_data(L.CONTROLLER, self._controller_changed)

    async def _controller_changed(self, data: bytes | None) -> None:
        try:
            self.controller_id = int(L.loads(data)["brokerid"]) if data else -1
        except (ValueError, KeyError, TypeError):
            log.warning("metadata.bad_controller_znode")
            self.controller_id = -1

    async def _brokers_changed(self, children: list[str]) -> None:
        fresh: dict[int, L.BrokerInfo] = {}
        for child in children:
            try:
                bid = int(child)
                data, _ = await self.zk.get(L.broker_path(bid))
                fresh[bid] = L.BrokerInfo.decode(bid, data)
            except Exception as e:  # a vanished or corrupt registration: skip it
                log.warning("metadata.bad_broker_znode", znode=child, error=type(e).__name__)
        self.brokers = fresh

    async def _topics_changed(self, children: list[str]) -> None:
        current = set(children)
        for gone in [t for t in self.topics if t not in current]:
            del self.topics[gone]
            await self._on_topic_gone(gone)
        for topic in sorted(current):
            if topic not in self.topics:
                self.topics[topic] = TopicMeta(topic)
            path = L.topic_path(topic)
            if path not in self._watched:
                self._watched.add(path)
                await self.zk.watch_data(path, self._assignment_cb(topic))
                await self.zk.watch_data(f"/config/topics/{topic}", self._topic_config_cb(topic))

    def _topic_config_cb(self, topic: str) -> Callable[[bytes | None], Awaitable[None]]:
        async def cb(data: bytes | None) -> None:
            meta = self.topics.get(topic)
            if meta is None:
                return
            try:
                meta.config = L.decode_entity_config(data)
            except Exception:
                log.warning("metadata.bad_topic_config", topic=topic)
        return cb

    def _assignment_cb(self, topic: str) -> Callable[[bytes | None], Awaitable[None]]:
        async def cb(data: bytes | None) -> None:
            meta = self.topics.get(topic)
            if meta is None or data is None:
                return
            try:
                meta.assignment = L.decode_assignment(data)
            except Exception:
                log.warning("metadata.bad_topic_znode", topic=topic)
                return
            for p in sorted(meta.assignment):
                path = L.partition_state_path(topic, p)
                if path not in self._watched:
                    self._watched.add(path)
                    await self.zk.watch_data(path, self._state_cb(topic, p))
        return cb

    def _state_cb(self, topic: str, partition: int) -> Callable[[bytes | None], Awaitable[None]]:
        async def cb(data: bytes | None) -> None:
            meta = self.topics.get(topic)
            if meta is None or data is None:
                return
            try:
                state = L.PartitionState.decode(data)
            except Exception:
                log.warning("metadata.bad_partition_state", topic=topic, partition=partition)
                return
            meta.states[partition] = state
            await self._on_partition(topic, partition, meta)
        return cb
