"""Topic creation, deletion and partition growth, written to ZooKeeper in Kafka's layout.

The broker that takes an admin request writes the assignment (or the deletion marker)
and the controller does the rest, as in Kafka. Validation answers each topic with
Kafka's own error code, so one bad topic never fails the others in the same request.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass

import structlog

from broker.apis import assignment_bounds
from broker.metadata import MetadataCache, topic_name_error
from broker.signal import Signal
from broker.zk import layout as L
from broker.zk.client import BadVersionError, NodeExistsError, NoNodeError, ZkClient
from broker.zk.config_entities import TOPIC_KEYS, InvalidConfig, validate
from protocol.errors import ErrorCode
from protocol.topic import is_internal

log = structlog.get_logger()


class AdminError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _assignment(brokers: list[int], partitions: int, replication_factor: int, start_partition: int,
                rng: random.Random | None) -> Iterator[tuple[int, list[int]]]:
    """Kafka's rack-unaware assignment: round-robin from a random start, followers shifted."""
    n = len(brokers)
    if replication_factor > n:
        raise AdminError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    rng = rng or random.Random()
    brokers = sorted(brokers)
    start_index = rng.randrange(n)
    shift = rng.randrange(n)
    current = start_partition
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (n - 1)
            replicas.append(brokers[(first + step) % n])
        yield current, replicas
        current += 1


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int,
                    start_partition: int = 0, rng: random.Random | None = None) -> dict[int, list[int]]:
    return dict(_assignment(brokers, partitions, replication_factor, start_partition, rng))


_YIELD_EVERY = 2000  # partitions assigned between returns to the event loop (about a millisecond)


async def assign_replicas_async(brokers: list[int], partitions: int, replication_factor: int,
                                start_partition: int = 0) -> dict[int, list[int]]:
    """assign_replicas for the handlers: a large topic is assigned in slices, the loop served between.

    Equal replica lists are one shared list (the handlers only read them): the round robin repeats
    after a few brokers' worth of partitions, so 100,000 partitions need a handful of lists, not
    100,000 of them for a moment."""
    out: dict[int, list[int]] = {}
    shared: dict[tuple[int, ...], list[int]] = {}
    for i, (p, replicas) in enumerate(_assignment(brokers, partitions, replication_factor, start_partition, None)):
        out[p] = shared.setdefault(tuple(replicas), replicas)
        if i % _YIELD_EVERY == _YIELD_EVERY - 1:
            await asyncio.sleep(0)
    return out


def require_legal_existing_name(name: str) -> None:
    """An illegal name names no topic: answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka 2.8 does for
    DeleteTopics and CreatePartitions (it only looks the name up), and never made into a znode path."""
    err = topic_name_error(name)
    if err:
        raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, err)


def refuse_internal_deletion(name: str) -> None:
    """Internal topics are not deleted. Departure: Kafka 2.8's broker deletes them (only
    kafka-topics.sh --zookeeper refuses); issue 18 asks for the protection. INVALID_TOPIC_EXCEPTION is Kafka's
    answer to the other operations it refuses on internal topics (produce, DeleteRecords)."""
    if is_internal(name):
        raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic {name} is an internal topic and is not allowed to be deleted.")


async def encode_assignment_async(assignment: dict[int, list[int]]) -> bytes:
    """The bytes of broker.zk.layout.encode_assignment, built in slices with the loop served between:
    json.dumps of a 100,000-partition assignment holds the event loop for tens of milliseconds."""
    if len(assignment) <= _YIELD_EVERY:
        return L.encode_assignment(assignment)
    order = sorted(assignment)
    chunks = []  # one string per slice, not one per partition
    for i in range(0, len(order), _YIELD_EVERY):
        chunks.append(",".join(f'"{p}":[{",".join(map(str, assignment[p]))}]' for p in order[i:i + _YIELD_EVERY]))
        await asyncio.sleep(0)
    return b'{"version":1,"partitions":{' + ",".join(chunks).encode() + b"}}"


@dataclass
class TopicSpec:
    name: str
    num_partitions: int
    replication_factor: int
    assignment: dict[int, list[int]] | None
    configs: dict[str, str]


class Admin:
    def __init__(self, zk: ZkClient, metadata: MetadataCache, default_partitions: int, default_rf: int,
                 metadata_updated: Signal) -> None:
        self.zk = zk
        self.metadata = metadata
        self.default_partitions = default_partitions
        self.default_rf = default_rf
        self.metadata_updated = metadata_updated
        # One topic's validation and write at a time (CreateTopics, CreatePartitions, DeleteTopics):
        # an assignment the broker builds may hold 100,000 partitions, tens of MiB of small objects
        # for a moment; built side by side by many connections (the fuzzer's 32) their peaks added
        # up, and the heap they fragmented stayed in the RSS. Waiting for leaders is outside it.
        self.mutations = asyncio.Lock()
        self._creating_internal: set[str] = set()  # Kafka's AutoTopicCreationManager.inflightTopics

    async def _topic_exists(self, name: str) -> bool:
        return name in self.metadata.topics or await self.zk.exists(L.topic_path(name))

    async def validate_new_topic(self, spec: TopicSpec) -> dict[int, list[int]]:
        err = topic_name_error(spec.name)
        if err:
            raise AdminError(ErrorCode.INVALID_TOPIC_EXCEPTION, err)
        if await self._topic_exists(spec.name):
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.")
        try:
            for key, value in spec.configs.items():
                if key not in TOPIC_KEYS:
                    raise InvalidConfig(key, value, "unknown topic config")
            validate("topics", spec.configs)
        except InvalidConfig as e:
            raise AdminError(ErrorCode.INVALID_CONFIG, str(e)) from None
        brokers = await self.live_brokers()
        if spec.assignment:
            if spec.num_partitions not in (-1, 0) or spec.replication_factor not in (-1, 0):
                raise AdminError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions or replicationFactor and replicasAssignments were set.")
            if sorted(spec.assignment) != list(range(len(spec.assignment))):
                raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered from 0.")
            too_large = assignment_bounds.given_too_large(spec.name, 0, list(spec.assignment.values()))
            if too_large:
                raise AdminError(ErrorCode.INVALID_PARTITIONS, too_large)
            for replicas in spec.assignment.values():
                if not replicas or len(set(replicas)) != len(replicas):
                    raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate or empty replica list.")
                unknown = [b for b in replicas if b not in brokers]
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
        too_large = assignment_bounds.chosen_too_large(spec.name, 0, partitions, rf, brokers)
        if too_large:  # refused before a single entry is built
            raise AdminError(ErrorCode.INVALID_PARTITIONS, too_large)
        return await assign_replicas_async(brokers, partitions, rf)

    async def live_brokers(self) -> list[int]:
        """Registered brokers, read from ZooKeeper as Kafka's AdminUtils does: right after start-up
        this broker's metadata cache may not have heard from the controller yet."""
        try:
            ids = await self.zk.get_children(L.BROKER_IDS)
        except NoNodeError:
            return []
        return sorted(int(i) for i in ids if i.isdigit())

    async def create_topic(self, spec: TopicSpec, assignment: dict[int, list[int]] | None = None) -> dict[int, list[int]]:
        """Create a topic; `assignment` is the plan validate_new_topic just returned, if any."""
        if assignment is None:
            assignment = await self.validate_new_topic(spec)
        if spec.configs:
            path, body = f"/config/topics/{spec.name}", L.encode_entity_config(spec.configs)
            try:
                await self.zk.create(path, body, make_parents=True)
            except NodeExistsError:  # left behind by an earlier topic of the same name
                await self.zk.set(path, body)
        try:
            await self.zk.create(L.topic_path(spec.name), await encode_assignment_async(assignment),
                                 make_parents=True)
        except NodeExistsError:
            raise AdminError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{spec.name}' already exists.") from None
        log.info("topic.created", topic=spec.name, partitions=len(assignment))
        return assignment

    async def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                                    configs: dict[str, str]) -> None:
        """Create an internal topic with its own settings, once at a time per name (many clients
        asking FindCoordinator at once make one creation). With fewer live brokers than
        `replication_factor` the topic gets one replica per live broker and a warning (issue 18;
        Kafka 2.8 refuses the creation with INVALID_REPLICATION_FACTOR until enough brokers are up).
        An existing topic is no error."""
        if name in self._creating_internal:
            return
        self._creating_internal.add(name)
        try:
            brokers = await self.live_brokers()
            if not brokers:
                raise AdminError(ErrorCode.BROKER_NOT_AVAILABLE, "No live brokers.")
            rf = replication_factor
            if len(brokers) < rf:
                log.warning("internal_topic.replication_factor_lowered", topic=name, configured=rf,
                            live_brokers=len(brokers))
                rf = len(brokers)
            async with self.mutations:
                await self.create_topic(TopicSpec(name, partitions, rf, None, configs))
        except AdminError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        finally:
            self._creating_internal.discard(name)

    def has_leaders(self, name: str, partitions: int) -> bool:
        parts = self.metadata.topics.get(name, {})
        return len(parts) >= partitions and all(p.leader >= 0 for p in parts.values())

    async def partition_count(self, name: str) -> int:
        """How many partitions a topic has; UNKNOWN_TOPIC_OR_PARTITION when it does not exist."""
        require_legal_existing_name(name)
        parts = self.metadata.topics.get(name)
        if parts:
            return len(parts)
        try:
            data, _ = await self.zk.get(L.topic_path(name))
            return L.assignment_shape(data).partitions
        except NoNodeError:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "This server does not host this topic-partition.") from None
        except (ValueError, KeyError, TypeError):
            return 1

    async def delete_topic(self, name: str) -> None:
        require_legal_existing_name(name)
        if not await self._topic_exists(name):
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        refuse_internal_deletion(name)
        try:
            await self.zk.create(f"{L.DELETE_TOPICS}/{name}", b"", make_parents=True)
        except NodeExistsError:
            pass
        log.info("topic.deletion_requested", topic=name)

    async def validate_partition_growth(self, name: str, count: int,
                                        assignments: list[list[int]] | None) -> dict[int, list[int]]:
        require_legal_existing_name(name)
        try:
            data, _ = await self.zk.get(L.topic_path(name))
            shape = L.assignment_shape(data)
        except Exception:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.") from None
        current = shape.partitions
        if count <= current:
            raise AdminError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {current} partitions, {count} would not be an increase.")
        rf = shape.replication_factor
        if assignments:
            if len(assignments) != count - current:
                raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Increasing the number of partitions by {count - current} but "
                                 f"{len(assignments)} assignments provided.")
            too_large = assignment_bounds.given_too_large(name, current, assignments, len(data))
            if too_large:
                raise AdminError(ErrorCode.INVALID_PARTITIONS, too_large)
            live = await self.live_brokers()
            for a in assignments:
                if len(set(a)) != len(a) or any(b not in live for b in a):
                    raise AdminError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid replica assignment {a}.")
            return {current + i: list(a) for i, a in enumerate(assignments)}
        live = await self.live_brokers()
        too_large = assignment_bounds.chosen_too_large(name, current, count - current, rf, live, len(data))
        if too_large:
            raise AdminError(ErrorCode.INVALID_PARTITIONS, too_large)
        return await assign_replicas_async(live, count - current, rf, start_partition=current)

    async def add_partitions(self, name: str, additions: dict[int, list[int]]) -> None:
        """Write the grown assignment with a conditional set on what was read.

        A topic deleted or grown by someone else since the request was validated is answered
        with Kafka's error for that state (unknown topic; or INVALID_PARTITIONS naming the count
        it now has, since every growth starts at the current count, two always collide), never
        by overwriting the other change or letting the conflict out as a failed connection."""
        path = L.topic_path(name)
        try:
            data, version = await self.zk.get(path)
            shape = L.assignment_shape(data)
            if shape.partitions != min(additions):  # validated against another count: grown meanwhile
                raise AdminError(ErrorCode.INVALID_PARTITIONS,
                                 f"Topic {name} currently has {shape.partitions} partitions: it changed meanwhile")
            # The new entries appended to the bytes as read: no decode and re-encode of what exists.
            await self.zk.set(path, L.grow_assignment(data, shape, additions), version=version)
        except NoNodeError:
            raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} was deleted meanwhile") from None
        except BadVersionError:
            try:
                now = L.assignment_shape((await self.zk.get(path))[0]).partitions
            except NoNodeError:
                raise AdminError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Topic {name} was deleted meanwhile") from None
            raise AdminError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic {name} currently has {now} partitions: it changed meanwhile") from None
        log.info("topic.partitions_added", topic=name, partitions=shape.partitions + len(additions))
