"""Topic creation, deletion and partition growth, written to ZooKeeper in Kafka's layout.

Validation answers each topic with Kafka's own error code, so one bad topic never
fails the others in the same request. Until the controller exists (the cluster issue)
the broker that takes the request also writes the initial partition states.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import structlog

from broker import zk_layout as L
from broker.metadata import Metadata, topic_name_error
from broker.zk import NodeExistsError, NoNodeError, ZkClient
from protocol.errors import ErrorCode

log = structlog.get_logger()

# Topic-level configs this broker understands; others are refused with INVALID_CONFIG.
TOPIC_CONFIGS = {
    "min.insync.replicas", "segment.bytes", "retention.ms", "retention.bytes", "cleanup.policy",
    "message.format.version", "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas", "unclean.leader.election.enable", "max.message.bytes",
    "compression.type",
}


class AdminError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int,
                    start_partition: int = 0, rng: random.Random | None = None) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: round-robin from a random start, followers shifted."""
    n = len(brokers)
    if replication_factor > n:
        raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    rng = rng or random.Random()
    brokers = sorted(brokers)
    start_index = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    current = start_partition
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1)
            replicas.append(brokers[(first + step) % n])
        out[current] = replicas
        current += 1
    return out


@dataclass
class TopicSpec:
    name: str
    num_partitions: int
    replication_factor: int
    assignment: dict[int, list[int]] | None
    configs: dict[str, str]


class Admin:
    def __init__(self, zk: ZkClient, metadata: Metadata, default_partitions: int, default_rf: int) -> None:
        self.zk = zk
        self.metadata = metadata
        self.default_partitions = default_partitions
        self.default_rf = default_rf

    def validate_new_topic(self, spec: TopicSpec) -> dict[int, list[int]]:
        err = topic_name_error(spec.name)
        if err:
            raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION, err)
        if spec.name in self.metadata.topics:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.")
        for key in spec.configs:
            if key not in TOPIC_CONFIGS:
                raise AdminError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
        brokers = sorted(self.metadata.brokers)
        if spec.assignment:
            if spec.num_partitions not in (-1, 0) or spec.replication_factor not in (-1, 0):
                raise AdminError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions or replicationFactor and replicasAssignments were set.")
            if sorted(spec.assignment) != list(range(len(spec.assignment))):
                raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered from 0.")
            for replicas in spec.assignment.values():
                if not replicas or len(set(replicas)) != len(replicas):
                    raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate or empty replica list.")
                unknown = [b for b in replicas if b not in self.metadata.brokers]
                if unknown:
                    raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown brokers {unknown}.")
            return spec.assignment
        partitions = self.default_partitions if spec.num_partitions == -1 else spec.num_partitions
        rf = self.default_rf if spec.replication_factor == -1 else spec.replication_factor
        if partitions <= 0:
            raise AdminError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if rf <= 0:
            raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if not brokers:
            raise AdminError(ErrorCode.BROKER_NOT_AVAILABLE, "No live brokers.")
        if rf > 1:
            # Followers do not fetch yet (the cluster issue); accepting rf > 1 now would
            # promise copies that do not exist.
            raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             "Replication factor above 1 needs replica fetchers, which this build lacks.")
        return assign_replicas(brokers, partitions, rf)

    async def create_topic(self, spec: TopicSpec) -> None:
        assignment = self.validate_new_topic(spec)
        if spec.configs:
            path, body = f"/config/topics/{spec.name}", L.encode_entity_config(spec.configs)
            try:
                await self.zk.create(path, body, make_parents=True)
            except NodeExistsError:  # left behind by an earlier topic of the same name
                await self.zk.set(path, body)
        try:
            await self.zk.create(L.topic_path(spec.name), L.encode_assignment(assignment), make_parents=True)
        except NodeExistsError:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.") from None
        await self._write_initial_states(spec.name, assignment)
        log.info("topic.created", topic=spec.name, partitions=len(assignment))

    async def _write_initial_states(self, topic: str, assignment: dict[int, list[int]]) -> None:
        live = set(self.metadata.brokers)
        for p, replicas in sorted(assignment.items()):
            alive = [b for b in replicas if b in live]
            leader = alive[0] if alive else -1
            state = L.PartitionState(leader=leader, leader_epoch=0, controller_epoch=1, isr=alive)
            path = L.partition_state_path(topic, p)
            try:
                await self.zk.create(path, state.encode(), make_parents=True)
            except NodeExistsError:
                await self.zk.set(path, state.encode())

    async def delete_topic(self, name: str) -> None:
        if name not in self.metadata.topics:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        try:
            await self.zk.create(f"{L.DELETE_TOPICS}/{name}", b"", make_parents=True)
        except NodeExistsError:
            pass
        await self.zk.delete_recursive(L.topic_path(name))
        try:
            await self.zk.delete(f"/config/topics/{name}")
        except NoNodeError:
            pass
        await self.zk.delete(f"{L.DELETE_TOPICS}/{name}")
        log.info("topic.deleted", topic=name)

    def validate_partition_growth(self, name: str, count: int,
                                  assignments: list[list[int]] | None) -> dict[int, list[int]]:
        meta = self.metadata.topics.get(name)
        if meta is None:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        current = len(meta.assignment)
        if count <= current:
            raise AdminError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {current} partitions, {count} would not be an increase.")
        rf = len(meta.assignment[0]) if meta.assignment else 1
        if assignments:
            if len(assignments) != count - current:
                raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {count - current} but "
                                 f"{len(assignments)} assignments provided.")
            return {current + i: list(a) for i, a in enumerate(assignments)}
        return assign_replicas(sorted(self.metadata.brokers), count - current, rf, start_partition=current)

    async def add_partitions(self, name: str, additions: dict[int, list[int]]) -> None:
        meta = self.metadata.topics[name]
        full = dict(meta.assignment)
        full.update(additions)
        await self.zk.set(L.topic_path(name), L.encode_assignment(full))
        await self._write_initial_states(name, additions)
        log.info("topic.partitions_added", topic=name, partitions=len(full))
