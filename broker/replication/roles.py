"""The controller's role decisions applied on this broker: LeaderAndIsr and StopReplica.

A partition state with an older leader epoch than the one held is refused; otherwise the
ReplicaManager makes this broker leader or follower (with the topic's `segment.bytes`,
`min.insync.replicas` and retention settings, broker.log_config), and the partition is taken from or handed to a replica fetcher
for its leader. A partition whose log cannot be opened or truncated (its log directory failed)
is answered KAFKA_STORAGE_ERROR, as Kafka's LeaderAndIsr does.
Registered RoleListeners hear of each partition this broker now leads (after the change is
applied) and of each it no longer leads (follower, StopReplica, storage error), as Kafka's
KafkaApis tells its coordinators (onElection/onResignation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import structlog

from broker.config import BrokerConfig
from broker.log import KafkaStorageError
from broker.log_config import LogConfig, log_config
from broker.metadata import MetadataCache
from broker.replication.fetcher_manager import FetcherManager
from broker.replication.replica_manager import ReplicaManager
from broker.zk import layout as L
from broker.zk.topic_configs import TopicConfigs, topic_int
from protocol.errors import ErrorCode
from protocol.topic import topic_partition_error

log = structlog.get_logger()
PREPARE_FROM = 64  # partition states in a LeaderAndIsr from which new directories are made ahead (prepare)


class RoleListener(Protocol):
    """Told of every leadership change applied here (the `__consumer_offsets` store loads and
    unloads its groups on them, as Kafka's KafkaApis calls onElection/onResignation)."""

    def became_leader(self, topic: str, index: int, leader_epoch: int) -> None: ...

    def resigned(self, topic: str, index: int) -> None:
        """No longer leader here: a follower now, stopped (StopReplica), or its log is offline."""
        ...


class RoleBatch:
    """What the partition states of one LeaderAndIsr share: each topic's LogConfig, resolved once
    (not once a partition: ~10 µs each), and whether each partition's role is logged (`log_each`;
    a request of thousands says how many in one event instead, see apis/leader_and_isr.py)."""

    def __init__(self, log_each: bool = True) -> None:
        self.log_each = log_each
        self.log_configs: dict[str, tuple[dict[str, str], LogConfig]] = {}


class PartitionRoles:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, fetchers: FetcherManager,
                 metadata: MetadataCache, topic_configs: TopicConfigs) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.replicas = replicas
        self.fetchers = fetchers
        self.metadata = metadata
        self.topic_configs = topic_configs
        self._listeners: list[RoleListener] = []

    @staticmethod
    def batch(log_each: bool = True) -> RoleBatch:
        """A RoleBatch for one LeaderAndIsr's partition states (handlers see this class only)."""
        return RoleBatch(log_each)

    def add_listener(self, listener: RoleListener) -> None:
        self._listeners.append(listener)

    def _tell(self, call: Callable[[RoleListener], None]) -> None:
        for listener in self._listeners:
            try:
                call(listener)
            except Exception:  # a listener's failure must not undo or stop the role change
                log.exception("partition.role_listener_failed")

    async def apply_partition_state(self, ps: dict[str, Any], leaders: dict[int, tuple[str, int]],
                                    batch: RoleBatch | None = None) -> ErrorCode:
        """One partition state of a LeaderAndIsr request; `leaders` are its live leaders' addresses.
        `batch`: what the request's partition states share (see RoleBatch)."""
        batch = batch or RoleBatch()
        topic, index = ps["topic_name"], ps["partition_index"]
        replicas = list(ps["replicas"])
        if self.broker_id not in replicas:
            return ErrorCode.NONE
        await self.replicas.wait_loaded()  # the logs found on disk at start-up (ReplicaManager.load_logs)
        if ps["leader_epoch"] < 0:
            # No controller writes one (a partition's first epoch is 0); Kafka's check of the
            # request's epoch against its NoEpoch (-1) refuses it the same way.
            log.warning("partition.invalid_leader_epoch", topic=topic, partition=index, got=ps["leader_epoch"])
            return ErrorCode.STALE_CONTROLLER_EPOCH
        current = self.replicas.get(topic, index)
        if current is not None and ps["leader_epoch"] < current.leader_epoch:
            log.warning("partition.stale_leader_epoch", topic=topic, partition=index,
                        got=ps["leader_epoch"], have=current.leader_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH
        cfg = await self.topic_configs.get(topic)
        segment = topic_int(topic, cfg, "segment.bytes", self.config.log_segment_bytes)
        memo = batch.log_configs.get(topic)
        if memo is None or memo[0] != cfg:
            memo = batch.log_configs[topic] = (dict(cfg), log_config(topic, cfg, self.config))
        try:
            code = self._apply(topic, index, replicas, ps, leaders, segment, cfg, memo[1], batch.log_each)
        except KafkaStorageError as e:
            self._tell(lambda listener: listener.resigned(topic, index))
            self.fetchers.remove((topic, index))
            log.info("partition.storage_error", topic=topic, partition=index, error=str(e))
            if ps["leader"] == self.broker_id:
                # Kafka's controller learns offline replicas from this answer; ours from the notification.
                self.replicas.dir_failures.remind(self.replicas.log_dir)
            return ErrorCode.KAFKA_STORAGE_ERROR
        if ps["leader"] == self.broker_id:
            if code == ErrorCode.NONE:
                self._tell(lambda listener: listener.became_leader(topic, index, ps["leader_epoch"]))
        else:
            self._tell(lambda listener: listener.resigned(topic, index))
        return code

    def _apply(self, topic: str, index: int, replicas: list[int], ps: dict[str, Any],
               leaders: dict[int, tuple[str, int]], segment: int, cfg: dict[str, str], topic_log_config: LogConfig,
               log_each: bool) -> ErrorCode:
        leader = ps["leader"]
        zk_version = ps.get("partition_epoch", ps.get("zk_version", 0))
        if leader == self.broker_id:
            self.fetchers.remove((topic, index))
            min_isr = topic_int(topic, cfg, "min.insync.replicas", self.config.min_insync_replicas)
            part = self.replicas.become_leader(topic, index, replicas, ps["leader_epoch"], ps["isr"], zk_version,
                                               ps["controller_epoch"], min_isr, segment, log_each)
            self.replicas.set_log_config(part, topic_log_config)
            if log_each:
                log.info("partition.leader", topic=topic, partition=index, leader_epoch=ps["leader_epoch"])
            return ErrorCode.NONE
        part = self.replicas.become_follower(topic, index, replicas, leader, ps["leader_epoch"], ps["isr"],
                                             zk_version, ps["controller_epoch"], segment, log_each)
        self.replicas.set_log_config(part, topic_log_config)
        addr = leaders.get(leader)
        info = self.metadata.brokers.get(leader)
        if addr is not None:
            info = L.BrokerInfo(leader, addr[0], addr[1])
        if info is None:
            self.fetchers.remove((topic, index))
            log.warning("partition.leader_unknown", topic=topic, partition=index, leader=leader)
            return ErrorCode.LEADER_NOT_AVAILABLE
        self.fetchers.add(part, info)
        if log_each:
            log.info("partition.follower", topic=topic, partition=index, leader=leader, leader_epoch=ps["leader_epoch"])
        return ErrorCode.NONE

    async def prepare(self, states: list[dict[str, Any]]) -> list[tuple[str, int]]:
        """Before a LeaderAndIsr of many partition states is applied: the directories of its
        partitions new here made off the event loop, several at once (ReplicaManager.make_new_log_dirs).
        The partitions whose were made, for `discard_unused` once the states are applied."""
        keys = [(ps["topic_name"], ps["partition_index"]) for ps in states
                if self.broker_id in ps["replicas"] and ps["leader_epoch"] >= 0
                and topic_partition_error(ps["topic_name"], ps["partition_index"]) == ErrorCode.NONE]
        if len(keys) >= PREPARE_FROM:
            return await self.replicas.make_new_log_dirs(keys)
        return []

    def discard_unused(self, made: list[tuple[str, int]]) -> None:
        """After the states (all, or those a cancellation or a failure let run): the directories
        `prepare` made for partitions none of them opened are removed (ReplicaManager.remove_unused_new_dirs)."""
        if made:
            self.replicas.remove_unused_new_dirs(made)

    async def sync_changes(self) -> None:
        """After a LeaderAndIsr's partition states, before its answer: their epoch checkpoints on disk."""
        await self.replicas.sync_epochs()

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        """Stop fetching a partition, and delete its log if asked."""
        self._tell(lambda listener: listener.resigned(topic, index))
        self.fetchers.remove((topic, index))
        self.replicas.stop_replica(topic, index, delete)

    def forget_deleted_topics(self, topics: set[str]) -> None:
        """After deletions: the cached configs of the topics of which no partition is left here go,
        or every topic name this broker ever hosted would keep an entry (one pass, not one per partition)."""
        if not topics:
            return
        hosted = {t for t, _ in self.replicas.partitions}
        for topic in topics - hosted:
            self.topic_configs.forget(topic)
