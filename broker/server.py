"""One broker process: ZooKeeper registration, controller candidacy, logs, fetchers, listener, metrics."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import structlog

from broker.apis import ALL_APIS
from broker.apis.admin import Admin
from broker.config import BrokerConfig
from broker.controller.controller import Controller
from broker.dispatch import Dispatcher
from broker.metadata import MetadataCache
from broker.metrics import Registry, bounded, serve_metrics
from broker.network import Listener
from broker.replication.fetcher_manager import FetcherManager
from broker.replication.leftover_throttles import LeftoverThrottleWatch
from broker.replication.replica_manager import ReplicaManager
from broker.replication.roles import PartitionRoles
from broker.replication.throttles import ReplicationThrottles
from broker.signal import Signal
from broker.zk import layout as L
from broker.zk.client import NodeExistsError, NoNodeError, ZkClient
from broker.zk.config_entities import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT_ENTITY,
    PRODUCER_BYTE_RATE,
    desanitize,
)
from broker.zk.dynamic_config import DynamicConfigManager
from broker.zk.topic_configs import TopicConfigs, topic_int
from fetcher.connection import KafkaConnection
from quotas.client import ClientQuotaManager
from quotas.controller_mutation import ControllerMutationQuotaManager

log = structlog.get_logger()
CONTROLLED_SHUTDOWN = 7


class StartupError(RuntimeError):
    pass


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metrics = Registry()
        self.zk = ZkClient(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        self.metadata = MetadataCache()
        self.metadata_updated = Signal()
        self.replicas = ReplicaManager(config, self.zk, self.metrics)
        self.throttles = ReplicationThrottles(self.broker_id, config.replication_quota_window_num,
                                              config.replication_quota_window_size_seconds,
                                              lambda: time.monotonic() * 1000)
        self.fetchers = FetcherManager(config, self.replicas, self.throttles, self.throttles.follower_lag)
        self.topic_configs = TopicConfigs(self.zk)
        self.roles = PartitionRoles(config, self.replicas, self.fetchers, self.metadata, self.topic_configs)
        self.produce_quotas = ClientQuotaManager("produce", config.quota_window_num,
                                                 config.quota_window_size_seconds, config.quota_producer_default,
                                                 dict(config.quota_producer_override))
        self.fetch_quotas = ClientQuotaManager("fetch", config.quota_window_num, config.quota_window_size_seconds,
                                               config.quota_consumer_default, dict(config.quota_consumer_override))
        self.mutation_quotas = ControllerMutationQuotaManager(config.controller_quota_window_num,
                                                              config.controller_quota_window_size_seconds)
        self.dynamic_config = DynamicConfigManager(self.zk, {
            "brokers": self._on_broker_config, "topics": self._on_topic_config,
            "clients": self._on_client_config})
        self.controller = Controller(self.zk, self.broker_id, config.unclean_leader_election_enable)
        self.admin = Admin(self.zk, self.metadata, config.num_partitions, config.default_replication_factor,
                           self.metadata_updated)
        self.dispatcher = Dispatcher(self, ALL_APIS)
        lst = config.listeners[0]
        self.listener = Listener(self.dispatcher, lst.host, lst.port, config.socket_request_max_bytes)
        self._metrics_server: asyncio.Server | None = None
        self.metrics_url: str | None = None
        self._leftover_task: asyncio.Task[None] | None = None
        m = self.metrics
        m.gauge("sum_replica_lag", "Messages the followers of led partitions are behind",
                lambda: [({}, self.replicas.sum_replica_lag())])
        m.gauge("leader_replication_throttled_rate", "Throttled replication bytes/s sent as leader (KIP-73)",
                lambda: [({}, self.throttles.leader.measured_rate())])
        m.gauge("follower_replication_throttled_rate", "Throttled replication bytes/s fetched as follower (KIP-73)",
                lambda: [({}, self.throttles.follower.measured_rate())])
        m.gauge("leader_replication_throttle_bytes_per_second", "Leader throttle in force (absent: unlimited)",
                lambda: [] if self.throttles.leader.quota is None else [({}, self.throttles.leader.quota)])
        m.gauge("follower_replication_throttle_bytes_per_second", "Follower throttle in force (absent: unlimited)",
                lambda: [] if self.throttles.follower.quota is None else [({}, self.throttles.follower.quota)])

        m.gauge("client_byte_rate", "Bytes/s per client id and quota type (KIP-13)", self._client_rates)
        m.gauge("client_throttle_time_ms", "Average throttle per client id and quota type over the quota window",
                self._client_throttles)
        m.gauge("client_quota_bytes_per_second", "Client byte-rate quota in force (absent: unlimited)",
                self._client_quotas)
        m.gauge("controller_mutation_rate", "Partition mutations/s per client id (KIP-599)",
                lambda: self._mutation_metric(self.mutation_quotas.rate))
        m.gauge("controller_mutation_tokens", "Token bucket credit per client id (absent: unlimited)",
                lambda: self._mutation_metric(self.mutation_quotas.tokens))
        m.gauge("controller_mutation_throttle_time_ms", "Average mutation throttle per client id",
                lambda: self._mutation_metric(self.mutation_quotas.throttle_time_avg))

    @staticmethod
    def now_ms() -> float:
        return time.monotonic() * 1000

    def _client_rates(self) -> list[tuple[dict[str, str], float]]:
        now = self.now_ms()
        return [({"client_id": c, "type": q.kind}, q.rate(c, now))
                for q in (self.produce_quotas, self.fetch_quotas) for c in q.clients()]

    def _client_throttles(self) -> list[tuple[dict[str, str], float]]:
        now = self.now_ms()
        return [({"client_id": c, "type": q.kind}, q.throttle_time_avg(c, now))
                for q in (self.produce_quotas, self.fetch_quotas) for c in q.clients()]

    def _client_quotas(self) -> list[tuple[dict[str, str], float]]:
        out = []
        for q in (self.produce_quotas, self.fetch_quotas):
            for c in q.clients():
                bound = q.quota(c)
                if bound is not None:
                    out.append(({"client_id": c, "type": q.kind}, bound))
        return out

    def _mutation_metric(self, fn: Any) -> list[tuple[dict[str, str], float]]:
        now = self.now_ms()
        out = []
        for c in list(self.mutation_quotas.clients):
            v = fn(c, now)
            if v is not None:
                out.append(({"client_id": c}, v))
        return out

    @property
    def cluster_id(self) -> str:
        return "minibroker"

    def metadata_changed(self) -> None:
        self.metadata_updated.fire()

    # ---- dynamic config ----------------------------------------------------------------

    async def _on_broker_config(self, name: str, config: dict[str, str]) -> None:
        self.throttles.on_broker_config(name, config)

    async def _on_client_config(self, znode_name: str, config: dict[str, str]) -> None:
        # Kafka URL-encodes client ids in znode names (so "/" and odd characters fit).
        name = znode_name if znode_name == DEFAULT_ENTITY else desanitize(znode_name)

        def num(key: str) -> float | None:
            return None if key not in config else float(config[key])

        self.produce_quotas.set_entity_quota(name, num(PRODUCER_BYTE_RATE))
        self.fetch_quotas.set_entity_quota(name, num(CONSUMER_BYTE_RATE))
        self.mutation_quotas.set_entity_quota(name, num(CONTROLLER_MUTATION_RATE), self.now_ms())
        log.info("quota.client_config", client_id=bounded(name), producer_byte_rate=num(PRODUCER_BYTE_RATE),
                 consumer_byte_rate=num(CONSUMER_BYTE_RATE), controller_mutation_rate=num(CONTROLLER_MUTATION_RATE))

    async def _on_topic_config(self, topic: str, config: dict[str, str]) -> None:
        self.topic_configs.set(topic, config)
        self.throttles.on_topic_config(topic, config)
        min_isr = topic_int(topic, config, "min.insync.replicas", self.config.min_insync_replicas)
        self.replicas.set_min_insync_replicas(topic, min_isr)

    # ---- lifecycle -------------------------------------------------------------------

    async def _register(self, new_session: bool) -> None:
        adv = self.config.advertised
        info = L.BrokerInfo(self.broker_id, adv.host, adv.port or self.listener.port, metrics_url=self.metrics_url)
        path = L.broker_path(self.broker_id)
        deadline = time.monotonic() + self.config.zookeeper_session_timeout_ms / 1000 * 1.5 + 2
        while True:
            try:
                await self.zk.create(path, info.encode(), ephemeral=True, make_parents=True)
                return
            except NodeExistsError:
                pass
            try:
                data, _ = await self.zk.get(path)
                holder = L.BrokerInfo.decode(self.broker_id, data)
            except NoNodeError:
                continue
            except Exception:
                holder = None
            # Our own previous incarnation (same endpoint, killed before its session
            # expired) goes away by itself; anything else is a live broker with our id.
            if holder is None or (holder.host, holder.port) != (info.host, info.port) or not new_session:
                if not new_session and holder is not None and (holder.host, holder.port) == (info.host, info.port):
                    return
                raise StartupError(f"broker.id={self.broker_id} is already registered at {path} by a live "
                                   f"broker ({holder.host if holder else '?'}:{holder.port if holder else '?'}); "
                                   "refusing to start")
            if time.monotonic() > deadline:
                raise StartupError(f"{path} is still held by an earlier session; refusing to start")
            log.info("broker.waiting_for_previous_session", znode=path)
            await asyncio.sleep(0.5)

    async def start(self) -> None:
        await self.zk.start(timeout=self.config.zookeeper_session_timeout_ms / 1000 + 10)
        for path in L.PERSISTENT_PATHS:
            await self.zk.ensure_path(path)
        await self.listener.start()
        self.replicas.start()
        # Configs first, registration second (as Kafka's start-up does): registering makes the
        # controller hand out partitions, and a replica fetcher must not start unthrottled.
        await self.dynamic_config.start()
        addr = self.config.metrics_address
        if addr:
            # Before registering: the registration names the metrics endpoint.
            self._metrics_server = await serve_metrics(self.metrics, *addr)
            port = self._metrics_server.sockets[0].getsockname()[1]
            self.metrics_url = f"http://{addr[0]}:{port}/metrics"
        await self._register(new_session=True)
        self.zk.on_session(self._on_session)
        await self.controller.start()
        self._leftover_task = asyncio.create_task(self._watch_leftover_throttles())
        log.info("broker.started", host=self.listener.host, port=self.listener.port,
                 zookeeper=self.config.zookeeper_connect)

    async def _watch_leftover_throttles(self) -> None:
        grace = self.config.replication_throttle_leftover_warn_ms
        watch = LeftoverThrottleWatch(grace, self.now_ms())
        while True:
            await asyncio.sleep(min(grace / 4000, 30))
            acting = self.throttles.acting()
            try:
                reassigning = bool(acting) and await self.zk.exists(L.REASSIGN)
            except Exception:
                continue  # ZooKeeper away: judge again on the next round
            if watch.observe(bool(acting), reassigning, self.now_ms()):
                log.warning("throttle.leftover", idle_s=round(watch.idle_ms(self.now_ms()) / 1000),
                            leader_rate=self.throttles.leader.quota, follower_rate=self.throttles.follower.quota,
                            topics=acting,
                            hint="no reassignment is running: run `minibroker reassign --verify` for the last "
                                 "move, or remove the rates and replica lists with `minibroker configs`")

    async def _on_session(self, new_session: bool) -> None:
        if new_session:
            # The old session's ephemerals went with it; register again.
            try:
                await self._register(new_session=False)
            except Exception as e:
                log.error("broker.reregister_failed", error=str(e))

    async def controlled_shutdown(self, attempts: int = 3) -> None:
        """Ask the controller to move leadership away before this broker exits."""
        for attempt in range(attempts):
            cid = self.metadata.controller_id
            if cid == self.broker_id and self.controller.active:
                remaining = await self.controller.controlled_shutdown(self.broker_id)
                if not remaining:
                    log.info("broker.controlled_shutdown_done")
                    return
            else:
                info = self.metadata.brokers.get(cid)
                if info is None:
                    return
                try:
                    async with await KafkaConnection.open(info.host, info.port, f"broker-{self.broker_id}", 5) as c:
                        resp = await c.request(CONTROLLED_SHUTDOWN, 1, {"broker_id": self.broker_id}, 30)
                    if resp["error_code"] == 0 and not resp["remaining_partitions"]:
                        log.info("broker.controlled_shutdown_done")
                        return
                except Exception as e:
                    log.info("broker.controlled_shutdown_retry", attempt=attempt, error=type(e).__name__)
            await asyncio.sleep(1)
        log.warning("broker.controlled_shutdown_incomplete")

    async def stop(self, controlled: bool = True) -> None:
        log.info("broker.stopping")
        if self._leftover_task is not None:
            self._leftover_task.cancel()
        if controlled and self.config.controlled_shutdown_enable:
            try:
                await asyncio.wait_for(self.controlled_shutdown(), 60)
            except TimeoutError:
                log.warning("broker.controlled_shutdown_timeout")
        # Each step is bounded: SIGTERM must end in an exit, whatever a peer is doing.
        for name, step in (("fetchers", self.fetchers.stop), ("controller", self.controller.stop),
                           ("listener", self.listener.stop)):
            try:
                await asyncio.wait_for(step(), 10)
            except TimeoutError:
                log.warning("broker.stop_step_timeout", step=name)
        if self._metrics_server is not None:
            self._metrics_server.close()
        await self.replicas.stop()
        try:
            await asyncio.wait_for(self.zk.close(), 10)
        except TimeoutError:
            log.warning("broker.stop_step_timeout", step="zookeeper")
        log.info("broker.stopped")

    async def run_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        await self.stop()
