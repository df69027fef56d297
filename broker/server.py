"""One broker process: ZooKeeper registration, metadata, logs, the listener, metrics."""

from __future__ import annotations

import asyncio
import signal

import structlog

from broker import zk_layout as L
from broker.admin import Admin
from broker.apis import ALL_APIS
from broker.config import BrokerConfig
from broker.controller import Controller
from broker.dispatch import Dispatcher
from broker.metadata import Metadata, TopicMeta
from broker.metrics import Registry, serve_metrics
from broker.network import Listener
from broker.replica_manager import ReplicaManager
from broker.zk import NodeExistsError, ZkClient

log = structlog.get_logger()


class StartupError(RuntimeError):
    pass


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metrics = Registry()
        self.zk = ZkClient(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        self.replicas = ReplicaManager(config)
        self.metadata = Metadata(self.zk, self._partition_changed, self._topic_gone)
        self.controller = Controller(self.zk, self.broker_id)
        self.admin = Admin(self.zk, self.metadata, config.num_partitions, config.default_replication_factor)
        self.dispatcher = Dispatcher(self, ALL_APIS)
        lst = config.listeners[0]
        self.listener = Listener(self.dispatcher, lst.host, lst.port, config.socket_request_max_bytes)
        self._metrics_server: asyncio.Server | None = None
        self._stopped = asyncio.Event()
        self._register_gauges()

    def _register_gauges(self) -> None:
        m = self.metrics
        m.gauge("under_replicated_partitions", "Led partitions whose ISR is smaller than the replica set",
                lambda: [({}, sum(1 for p in self.replicas.partitions.values()
                                  if p.leader == self.broker_id and len(p.isr) < len(p.replicas)))])
        m.gauge("partitions", "Partitions hosted on this broker",
                lambda: [({}, len(self.replicas.partitions))])

    @property
    def cluster_id(self) -> str:
        return "minibroker"

    async def _partition_changed(self, topic: str, partition: int, meta: TopicMeta) -> None:
        state = meta.states.get(partition)
        replicas = meta.assignment.get(partition, [])
        if state is None or self.broker_id not in replicas:
            return
        if state.leader == self.broker_id:
            min_isr = self._topic_int(meta, "min.insync.replicas", self.config.min_insync_replicas)
            segment = self._topic_int(meta, "segment.bytes", self.config.log_segment_bytes)
            self.replicas.make_leader(topic, partition, replicas, state.leader_epoch, state.isr, min_isr, segment)

    @staticmethod
    def _topic_int(meta: TopicMeta, key: str, default: int) -> int:
        try:
            return int(meta.config.get(key, default))
        except ValueError:
            log.warning("topic.bad_config", topic=meta.name, key=key)
            return default

    async def _topic_gone(self, topic: str) -> None:
        self.replicas.remove_topic(topic)

    async def _register(self, new_session: bool) -> None:
        adv = self.config.advertised
        host = adv.host
        port = adv.port or self.listener.port
        info = L.BrokerInfo(self.broker_id, host, port)
        path = L.broker_path(self.broker_id)
        try:
            await self.zk.create(path, info.encode(), ephemeral=True, make_parents=True)
        except NodeExistsError:
            if new_session:
                raise StartupError(
                    f"broker.id={self.broker_id} is already registered at {path} by a live broker; "
                    "refusing to start") from None

    async def start(self) -> None:
        await self.zk.start(timeout=self.config.zookeeper_session_timeout_ms / 1000 + 10)
        for path in L.PERSISTENT_PATHS:
            await self.zk.ensure_path(path)
        await self.listener.start()
        await self._register(new_session=True)
        self.zk.on_session(self._on_session)
        await self.metadata.start()
        await self.controller.start()
        addr = self.config.metrics_address
        if addr:
            self._metrics_server = await serve_metrics(self.metrics, *addr)
        log.info("broker.started", host=self.listener.host, port=self.listener.port,
                 zookeeper=self.config.zookeeper_connect)

    async def _on_session(self, new_session: bool) -> None:
        if new_session:
            # The old session's ephemerals are gone with it; register again.
            try:
                await self._register(new_session=False)
            except Exception as e:
                log.error("broker.reregister_failed", error=str(e))

    async def stop(self) -> None:
        log.info("broker.stopping")
        await self.listener.stop()
        if self._metrics_server is not None:
            self._metrics_server.close()
        self.replicas.close()
        await self.zk.close()
        log.info("broker.stopped")
        self._stopped.set()

    async def run_until_signal(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await self.stop()
