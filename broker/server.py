"""One broker process: assembles its parts (logs, fetchers, controller candidacy, listener,
dynamic config, metrics), registers in ZooKeeper, and runs them from start to stop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable

import structlog

from broker import log_cleaning
from broker.apis import ALL_APIS
from broker.apis.admin import Admin
from broker.apis.config_admin import ConfigAdmin
from broker.broker_metrics import register_quota_gauges, register_replication_gauges
from broker.config import TLS_PROTOCOLS, BrokerConfig, ConfigError
from broker.config_apply import ConfigApplier
from broker.controlled_shutdown import controlled_shutdown
from broker.controller.controller import Controller
from broker.dispatch import Dispatcher
from broker.group.coordinator import GroupCoordinator, group_config
from broker.group.offsets_topic import OffsetsTopic
from broker.group_metrics import register_group_metrics, snapshots
from broker.health import HEALTH_FILE_ENV, HealthFile
from broker.log.open_files import SEGMENT_FILES, soft_nofile_limit
from broker.loop_watchdog import from_environment as loop_watchdog
from broker.metadata import MetadataCache
from broker.metrics import Registry, serve_metrics
from broker.network import ConnectionLimits, Listener
from broker.replication.fetcher_manager import FetcherManager
from broker.replication.leftover_throttles import watch_leftover_throttles
from broker.replication.log_dir_failure import forget_earlier_failures
from broker.replication.replica_manager import ReplicaManager
from broker.replication.roles import PartitionRoles
from broker.replication.throttles import ReplicationThrottles
from broker.security.acl import Policy, parse_super_users
from broker.security.authorizer import Authorizer
from broker.security.inter_broker import inter_broker_security
from broker.security.sasl_listeners import SaslListeners
from broker.security.sasl_scram import CredentialCache
from broker.security.ssl_listener import ListenerTls
from broker.security.ssl_settings import SslSettingsError, listener_ssl_settings
from broker.signal import Signal
from broker.zk import layout as L
from broker.zk.client import NodeExistsError, NoNodeError, ZkClient, ZkUnavailable
from broker.zk.cluster_id import get_or_create_cluster_id
from broker.zk.config_entities import USERS
from broker.zk.dynamic_config import DynamicConfigManager, also
from broker.zk.producer_ids import ProducerIdManager
from broker.zk.topic_configs import TopicConfigs
from quotas.client import ClientQuotaManager
from quotas.controller_mutation import ControllerMutationQuotaManager

log = structlog.get_logger()


class StartupError(RuntimeError):
    pass


def _listener_tls(config: BrokerConfig) -> dict[str, ListenerTls]:
    """Each SSL / SASL_SSL listener's TLS context, its PEM files read now."""
    out = {}
    for lst in config.listeners:
        if config.listener_protocol(lst.name) in TLS_PROTOCOLS:
            try:
                out[lst.name] = ListenerTls.from_settings(
                    listener_ssl_settings(config, lst.name, config.listener_protocol(lst.name)))
            except SslSettingsError as e:
                raise ConfigError(e.key, e.value, e.why) from None
    return out


async def stop_phase(phases: dict[str, float], name: str, step: Callable[[], Awaitable[object]],
                     limit_s: float | None = None) -> bool:
    """One phase of Broker.stop: timed into `phases` and logged; given up after `limit_s`; a
    failure is logged, not raised, so that the phases after it (the logs' close) still run.
    Whether it completed: a phase that raised or was given up makes the process exit 1."""
    t0 = time.monotonic()
    done = False
    try:
        if limit_s is None:
            await step()
        else:
            await asyncio.wait_for(step(), limit_s)
        done = True
    except TimeoutError:
        log.warning("broker.stop_step_timeout", step=name, limit_s=limit_s)
    except Exception:
        log.exception("broker.stop_step_failed", step=name)
    phases[name] = round(time.monotonic() - t0, 3)
    log.info("broker.stop_phase", phase=name, s=phases[name])
    return done


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metrics = Registry()
        self.zk = ZkClient(config.zookeeper_connect, config.zookeeper_session_timeout_ms,
                           credentials=config.zookeeper_credentials, secure_acls=config.zookeeper_set_acl)
        self.metadata = MetadataCache(inter_broker_listener=config.inter_broker_listener_name)
        # TLS contexts first: a key or certificate that cannot be loaded stops start-up (ConfigError).
        self.listener_tls = _listener_tls(config)
        # How this broker reaches the others' inter.broker.listener.name endpoint.
        self.inter_broker_security = inter_broker_security(config, config.inter_broker_listener_name,
                                                           config.inter_broker_protocol)
        self.metadata_updated = Signal()
        # Segment descriptors are bounded (broker/log/open_files.py), below the soft RLIMIT_NOFILE.
        SEGMENT_FILES.configure(config.log_max_open_segment_files)
        log.info("broker.open_files", soft_limit=soft_nofile_limit(), max_open_segment_files=SEGMENT_FILES.capacity)
        self.replicas = ReplicaManager(config, self.zk, self.metrics)
        self.throttles = ReplicationThrottles(self.broker_id, config.replication_quota_window_num,
                                              config.replication_quota_window_size_seconds,
                                              lambda: time.monotonic() * 1000)
        self.fetchers = FetcherManager(config, self.replicas, self.throttles, self.throttles.follower_lag,
                                       security=self.inter_broker_security)
        # A failed log directory's partitions are fetched no more (Kafka's handleLogDirFailure).
        self.replicas.on_offline(self.fetchers.remove)
        self.topic_configs = TopicConfigs(self.zk)
        self.roles = PartitionRoles(config, self.replicas, self.fetchers, self.metadata, self.topic_configs)
        self.produce_quotas = ClientQuotaManager("produce", config.quota_window_num,
                                                 config.quota_window_size_seconds, config.quota_producer_default,
                                                 dict(config.quota_producer_override))
        self.fetch_quotas = ClientQuotaManager("fetch", config.quota_window_num, config.quota_window_size_seconds,
                                               config.quota_consumer_default, dict(config.quota_consumer_override))
        self.mutation_quotas = ControllerMutationQuotaManager(config.controller_quota_window_num,
                                                              config.controller_quota_window_size_seconds)
        self.log_cleaner = log_cleaning.build(config, self.replicas, self.topic_configs, self.metrics)
        self.config_applier = ConfigApplier(config.min_insync_replicas, self.throttles, self.topic_configs,
                                            self.replicas, self.produce_quotas, self.fetch_quotas,
                                            self.mutation_quotas, self.now_ms,
                                            log_cleaning.CleanerRate(config, self.log_cleaner))
        # SASL (issue 20): SCRAM credentials from /config/users, kept live by the config notifications.
        self.scram_credentials = CredentialCache()
        self.sasl = SaslListeners(
            {lst.name: config.listener_security_protocol_map.get(lst.name, "PLAINTEXT") for lst in config.listeners},
            config.listener_setting, self.scram_credentials,
            self.metrics.counter("authentication_failures_total", "SASL authentication failures, by listener and mechanism"),
            broker_id=self.broker_id, key_of=config.listener_setting_key)
        self.dynamic_config = DynamicConfigManager(
            self.zk, also(self.config_applier.handlers(), USERS, self.scram_credentials.on_user_config))
        self.controller = Controller(self.zk, self.broker_id, config.unclean_leader_election_enable,
                                     config.inter_broker_listener_name, security=self.inter_broker_security)
        self.admin = Admin(self.zk, self.metadata, config.num_partitions, config.default_replication_factor,
                           self.metadata_updated)
        self.producer_ids = ProducerIdManager(self.zk, self.broker_id)
        self.config_admin = ConfigAdmin(self.zk, config, self.metadata)
        self.group_coordinator = GroupCoordinator(self.broker_id, group_config(config))
        # `__consumer_offsets`: loads and unloads its partitions' groups as this broker's roles change.
        self.group_store = OffsetsTopic(config, self.zk, self.metadata, self.replicas, self.topic_configs)
        self.roles.add_listener(self.group_store)
        self.replicas.on_offline(self.group_store.offline)
        self.group_coordinator.bind_store(self.group_store)
        self.group_store.register(self.group_coordinator)
        self.authorizer = Authorizer(
            self.zk, Policy(parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found),
            bool(config.authorizer_class_name), self.broker_id,
            self.metrics.counter("authorization_denials_total", "Requests or resources refused by the authorizer, by API"))
        self.dispatcher = Dispatcher(self, ALL_APIS)
        # Every named listener is bound; each has its own connection limits (departure: Kafka
        # counts max.connections across listeners).
        self.listeners = [
            Listener(self.dispatcher, lst.host, lst.port, config.socket_request_max_bytes,
                     ConnectionLimits(config.max_connections, config.max_connections_per_ip,
                                      config.max_connections_per_ip_overrides, config.connections_max_idle_ms,
                                      config.queued_max_request_bytes,
                                      config.max_in_flight_requests_per_connection), name=lst.name,
                     security_protocol=config.listener_protocol(lst.name), tls=self.listener_tls.get(lst.name))
            for lst in config.listeners]
        self.listener = self.listeners[0]
        self.health = HealthFile(os.environ.get(HEALTH_FILE_ENV))
        self._metrics_server: asyncio.Server | None = None
        self._cluster_id = ""  # read from /cluster/id at start, before the listener opens
        self.metrics_url: str | None = None
        self._leftover_task: asyncio.Task[None] | None = None
        self._load_task: asyncio.Task[None] | None = None
        register_replication_gauges(self.metrics, self.replicas, self.throttles)
        register_quota_gauges(self.metrics, self.produce_quotas, self.fetch_quotas, self.mutation_quotas,
                              self.now_ms)
        register_group_metrics(self.metrics, lambda: snapshots(self.group_coordinator.machine), self._local_end)

    def _local_end(self, topic: str, partition: int) -> int | None:
        """A partition's end as consumers see it (the high watermark), where this broker holds a replica."""
        part = self.replicas.get(topic, partition)
        return None if part is None or part.offline else part.high_watermark

    @staticmethod
    def now_ms() -> float:
        return time.monotonic() * 1000

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def metadata_changed(self) -> None:
        self.metadata_updated.fire()

    # ---- lifecycle -------------------------------------------------------------------

    def registration(self) -> L.BrokerInfo:
        """Every advertised endpoint; host/port are the inter-broker listener's (duplicate-id check)."""
        bound = {lst.name: lst for lst in self.listeners}
        protocols = self.config.listener_security_protocol_map
        endpoints = tuple(
            # An empty host is this machine's name, as Kafka registers it; port 0 the one bound.
            L.Endpoint(adv.name, adv.host or socket.getfqdn(), adv.port or bound[adv.name].port,
                       protocols[adv.name])
            for adv in self.config.advertised_endpoints)
        inter = next(ep for ep in endpoints if ep.listener == self.config.inter_broker_listener_name)
        return L.BrokerInfo(self.broker_id, inter.host, inter.port, metrics_url=self.metrics_url, endpoints=endpoints)

    async def _register(self, new_session: bool) -> None:
        info = self.registration()
        path = L.broker_path(self.broker_id)
        deadline = time.monotonic() + self.config.zookeeper_session_timeout_ms / 1000 * 1.5 + 2
        while True:
            try:
                await self.zk.create(path, info.encode(), ephemeral=True, make_parents=True)
                await self._registered(path)
                return
            except NodeExistsError:
                pass
            try:
                data, _ = await self.zk.get(path)
                holder = L.BrokerInfo.decode(self.broker_id, data, self.config.inter_broker_listener_name)
            except NoNodeError:
                continue
            except Exception:
                holder = None
            # Our own previous incarnation (same endpoint, killed before its session
            # expired) goes away by itself; anything else is a live broker with our id.
            if holder is None or (holder.host, holder.port) != (info.host, info.port) or not new_session:
                if not new_session and holder is not None and (holder.host, holder.port) == (info.host, info.port):
                    await self._registered(path)
                    return
                raise StartupError(f"broker.id={self.broker_id} is already registered at {path} by a live "
                                   f"broker ({holder.host if holder else '?'}:{holder.port if holder else '?'}); "
                                   "refusing to start")
            if time.monotonic() > deadline:
                raise StartupError(f"{path} is still held by an earlier session; refusing to start")
            log.info("broker.waiting_for_previous_session", znode=path)
            await asyncio.sleep(0.5)

    async def _registered(self, path: str) -> None:
        """Notes this registration's czxid: the broker epoch controller requests must carry (KIP-380)."""
        try:
            czxid = await self.zk.czxid(path)
        except NoNodeError:
            return  # gone already (the session ended): the next registration sets it
        self.controller.epochs.registered(czxid)
        log.info("broker.registered", broker_epoch=czxid)

    async def _connect_zookeeper(self) -> None:
        """Waits for ZooKeeper as long as it takes, saying so in the log and the health file:
        a broker started before its ZooKeeper (or while it is down) neither exits nor waits mutely."""
        attempt_s = self.config.zookeeper_session_timeout_ms / 1000 + 10
        since = time.monotonic()
        while True:
            try:
                await self.zk.start(timeout=attempt_s)
                self.health.write("starting")
                return
            except ZkUnavailable as e:
                waited = int(time.monotonic() - since)
                log.warning("broker.zookeeper_unreachable", zookeeper=self.config.zookeeper_connect,
                            waited_s=waited, error=type(e).__name__)
                self.health.write(f"waiting for ZooKeeper at {self.config.zookeeper_connect} for {waited} s")
                await asyncio.sleep(2)

    async def start(self) -> None:
        # The logs on disk open on worker threads from now on; LeaderAndIsr waits for them, not start-up.
        self._load_task = asyncio.create_task(self.replicas.load_logs())
        self.health.write(f"connecting to ZooKeeper at {self.config.zookeeper_connect}")
        await self._connect_zookeeper()
        for path in L.PERSISTENT_PATHS:
            await self.zk.ensure_path(path)
        self._cluster_id = await get_or_create_cluster_id(self.zk)
        log.info("broker.cluster_id", cluster_id=self._cluster_id)
        await self.group_store.read_partition_count()  # before any FindCoordinator is answered
        await self.authorizer.start()  # the ACLs loaded before any request is served
        for listener in self.listeners:
            await listener.start()
        self.replicas.start()
        self.log_cleaner.start()
        self.group_coordinator.start()
        # Configs first, registration second (as Kafka's start-up does): registering makes the
        # controller hand out partitions, and a replica fetcher must not start unthrottled.
        await self.dynamic_config.start()
        addr = self.config.metrics_address
        if addr:
            # Before registering: the registration names the metrics endpoint.
            self._metrics_server = await serve_metrics(self.metrics, *addr)
            port = self._metrics_server.sockets[0].getsockname()[1]
            self.metrics_url = f"http://{addr[0]}:{port}/metrics"
        await forget_earlier_failures(self.zk, self.broker_id)
        await self._register(new_session=True)
        self.zk.on_session(self._on_session)
        await self.controller.start()
        self._leftover_task = asyncio.create_task(watch_leftover_throttles(
            self.throttles, self.zk, self.config.replication_throttle_leftover_warn_ms, self.now_ms))
        self.health.write("serving")
        log.info("broker.started", listeners=[f"{lst.name}://{lst.host}:{lst.port}" for lst in self.listeners],
                 zookeeper=self.config.zookeeper_connect)

    async def _on_session(self, new_session: bool) -> None:
        if new_session:
            # The old session's ephemerals went with it; register again.
            try:
                await self._register(new_session=False)
            except Exception as e:
                log.error("broker.reregister_failed", error=str(e))

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away before this broker exits."""
        await controlled_shutdown(self.broker_id, self.metadata, self.controller,
                                  max_retries=self.config.controlled_shutdown_max_retries,
                                  retry_backoff_ms=self.config.controlled_shutdown_retry_backoff_ms,
                                  security=self.inter_broker_security)

    async def stop(self, controlled: bool = True) -> bool:
        """Kafka 2.8's KafkaServer.shutdown order: controlled shutdown (leadership moved away while
        this broker still serves), then fetchers, controller, listeners, the coordinators, the logs
        (LogManager.shutdown: closed, synced, the clean-shutdown marker) and the ZooKeeper session.
        Every phase is timed (`broker.stop_phase`) and every wait on a peer is bounded, so SIGTERM
        ends in an exit whatever a peer is doing; a phase that fails is logged and the next runs
        (the logs must close whatever went wrong before them).

        Returns whether the logs were closed and made durable, the design's promise for SIGTERM
        ("logs are flushed, the process exits 0"): if not, `minibroker serve` exits 1 and the next
        start recovers them. A phase that raised or overran its bound before them is logged with
        the rest (`broker.stop_failed`) but the exit stays 0: Kafka 2.8 swallows each step's error
        (CoreUtils.swallow) and exits as for any SIGTERM.
        """
        log.info("broker.stopping")
        started = time.monotonic()
        phases: dict[str, float] = {}
        failed: list[str] = []

        async def phase(name: str, step: Callable[[], Awaitable[object]], limit_s: float | None = None) -> None:
            if not await stop_phase(phases, name, step, limit_s):
                failed.append(name)

        if self._leftover_task is not None:
            self._leftover_task.cancel()
        if controlled and self.config.controlled_shutdown_enable:
            await phase("controlled_shutdown", self.controlled_shutdown, 60)
        await phase("fetchers", self.fetchers.stop, 10)
        await phase("controller", self.controller.stop, 10)
        for lst in self.listeners:
            await phase(f"listener_{lst.name}", lst.stop, 10)
        if self._metrics_server is not None:
            self._metrics_server.close()
        self.authorizer.stop()
        await phase("group_coordinator", self.group_coordinator.stop)
        await phase("log_cleaner", self.log_cleaner.stop)
        await phase("group_store", self.group_store.stop)
        await phase("logs", self.replicas.stop)
        if self.replicas.stop_errors and "logs" not in failed:  # a storage error in the close itself
            failed.append("logs")
        await phase("zookeeper", self.zk.close, 10)
        log.info("broker.stopped", total_s=round(time.monotonic() - started, 3), phases=phases)
        logs_closed = "logs" not in failed
        if failed:
            log.error("broker.stop_failed", failed_phases=failed, log_close_errors=self.replicas.stop_errors,
                      exit_code=0 if logs_closed else 1)
        return logs_closed

    async def run_until_signal(self) -> bool:
        """Serves until SIGTERM or SIGINT, then stops: whether the shutdown completed (Broker.stop)."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        watchdog = loop_watchdog()  # a diagnostic, off unless MINIBROKER_LOOP_WATCHDOG_MS is set
        if watchdog is not None:
            watchdog.start()
        await self.start()
        await stop.wait()
        stopped = await self.stop()
        if watchdog is not None:
            watchdog.stop()
        return stopped
