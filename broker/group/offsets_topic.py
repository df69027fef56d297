"""`__consumer_offsets` as the group coordinator's store (broker.group.store.GroupStore).

Which partition owns a group: Kafka's `partitionFor` over the topic's partition count. As
Kafka's GroupMetadataManager, the count is the existing topic's (read from its znode at
start-up), else `offsets.topic.num.partitions`; a topic that appears later (created by any
broker) fixes it to its own count the first time this broker's metadata shows it, and it never
changes after that (partitions added to the topic later are not used, as in Kafka).

Writes (Kafka's storeGroup/storeOffsets): one RecordBatch v2 of the write's records
(broker.group.offsets_log.records_for), CreateTime now, compressed with
`offsets.topic.compression.codec`, appended as a leader append through the ReplicaManager (the
produce path's validation: the topic's max.message.bytes, keys required as on any compacted
topic) with `offsets.commit.required.acks` (-1: wait for the ISR, up to
`offsets.commit.timeout.ms`). The answer is the produce error code; a storage error is
KAFKA_STORAGE_ERROR, never an exception. A partition this broker does not lead is
NOT_LEADER_OR_FOLLOWER.

Loading (Kafka's onElection/onResignation): the store is a RoleListener
(broker.replication.roles). When this broker becomes leader of one of the topic's partitions
it tells the GroupLoadListener `partition_loading`, replays the log from its start to its end in
reads of `offsets.load.buffer.size` (broker.group.offsets_log.Replay; bytes read off the event
loop, the loop served after every few batches), then `partition_loaded` with the groups and
offsets. A repeated election (a new leader epoch while it still leads) changes nothing: what
the coordinator holds is what the log holds. When it stops leading (follower, StopReplica, its
log offline) a load in progress is cancelled and the listener told `partition_unloaded`. A load
that fails (a storage error, a corrupt batch) is logged and the partition stays loading, so its
groups answer COORDINATOR_LOAD_IN_PROGRESS rather than serve what may be half the state; the
next election loads it again. Departure: Kafka 2.8 marks such a partition loaded with whatever
it had read before the failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import structlog

from broker.config import BrokerConfig
from broker.group.offsets_log import Replay, records_for
from broker.group.store import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupLoadListener,
    GroupRecord,
    TopicPartition,
    _Keep,
    partition_for,
)
from broker.log import KafkaStorageError
from broker.metadata import MetadataCache
from broker.zk import layout as L
from broker.zk.client import NoNodeError, ZkClient
from broker.zk.topic_configs import TopicConfigs, topic_int
from protocol.errors import ErrorCode
from protocol.records import record_batch
from protocol.records.errors import RecordsError
from protocol.records.validator import ValidationConfig

if TYPE_CHECKING:
    from broker.replication.replica_manager import Partition, ReplicaManager

log = structlog.get_logger()

# The produce version whose validation a write gets: RecordBatch v2 only (Produce 3+).
_PRODUCE_VERSION = 8
_BATCHES_BETWEEN_YIELDS = 64


def _wall_ms() -> int:
    return int(time.time() * 1000)


class OffsetsTopic:
    """The GroupStore of this broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig, zk: ZkClient, metadata: MetadataCache, replicas: ReplicaManager,
                 topic_configs: TopicConfigs, wall_clock: Callable[[], int] = _wall_ms) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.zk = zk
        self.metadata = metadata
        self.replicas = replicas
        self.topic_configs = topic_configs
        self.wall_clock = wall_clock
        self._partition_count = config.offsets_topic_num_partitions
        self._count_fixed = False
        self._listener: GroupLoadListener | None = None
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._loaded: set[int] = set()

    def register(self, listener: GroupLoadListener) -> None:
        """The coordinator, told of every partition loaded and unloaded from now on (register
        it before the broker starts: elections before it are not told again)."""
        self._listener = listener

    # ---- which partition ---------------------------------------------------------------

    async def read_partition_count(self) -> None:
        """At start-up: an existing topic's partition count wins over the configured one."""
        try:
            data, _ = await self.zk.get(L.topic_path(OFFSETS_TOPIC))
            self._fix_count(L.assignment_shape(data).partitions)
        except NoNodeError:
            pass
        except ValueError:
            log.warning("offsets_topic.bad_topic_znode", broker_id=self.broker_id)

    def _fix_count(self, count: int) -> None:
        if count != self._partition_count:
            log.warning("offsets_topic.partition_count_differs", broker_id=self.broker_id, partitions=count,
                        configured=self.config.offsets_topic_num_partitions)
        self._partition_count = count
        self._count_fixed = True

    @property
    def partition_count(self) -> int:
        if not self._count_fixed:
            parts = self.metadata.topics.get(OFFSETS_TOPIC)
            if parts:
                self._fix_count(len(parts))
        return self._partition_count

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    # ---- writes ------------------------------------------------------------------------

    async def write(self, group_id: str, group: GroupRecord | None | _Keep,
                    offsets: Mapping[TopicPartition, CommittedOffset | None]) -> int:
        index = self.partition_for(group_id)
        records = records_for(group_id, group, offsets)
        try:
            cfg = await self.topic_configs.get(OFFSETS_TOPIC)
            # No await from this check to the append: leadership cannot change in between.
            part = self.replicas.get(OFFSETS_TOPIC, index)
            if part is None or part.leader != self.broker_id:
                return ErrorCode.NOT_LEADER_FOR_PARTITION
            if not records:
                return ErrorCode.NONE
            batch = record_batch.build_batch([(self.wall_clock(), key, value, ()) for key, value in records],
                                             codec=self.config.offsets_topic_compression_codec)
            validation = ValidationConfig(
                max_message_bytes=topic_int(OFFSETS_TOPIC, cfg, "max.message.bytes", self.config.message_max_bytes),
                compacted=True)
            acks = self.config.offsets_commit_required_acks
            result = self.replicas.append(part, batch, acks, validation, _PRODUCE_VERSION)
            if result.error_code != ErrorCode.NONE or acks != -1:
                return result.error_code
            return await self.replicas.wait_for_hw(part, result.last_offset + 1,
                                                   self.config.offsets_commit_timeout_ms / 1000)
        except KafkaStorageError:
            return ErrorCode.KAFKA_STORAGE_ERROR
        except Exception:  # never raises: the coordinator answers its client with an error
            log.exception("offsets_topic.write_failed", broker_id=self.broker_id, partition=index)
            return ErrorCode.UNKNOWN_SERVER_ERROR

    # ---- loading (RoleListener) --------------------------------------------------------

    def became_leader(self, topic: str, index: int, leader_epoch: int) -> None:
        if topic != OFFSETS_TOPIC or index in self._loading or index in self._loaded:
            return
        log.info("offsets_topic.loading", broker_id=self.broker_id, partition=index, leader_epoch=leader_epoch)
        if self._listener is not None:
            self._listener.partition_loading(index)
        self._loading[index] = asyncio.get_running_loop().create_task(self._load(index))

    def resigned(self, topic: str, index: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        task = self._loading.pop(index, None)
        if task is not None:
            task.cancel()
        elif index not in self._loaded:
            return
        self._loaded.discard(index)
        log.info("offsets_topic.unloaded", broker_id=self.broker_id, partition=index)
        if self._listener is not None:
            self._listener.partition_unloaded(index)

    async def stop(self) -> None:
        """At shutdown, before the logs close: loads in progress end (the listener is not told)."""
        tasks = list(self._loading.values())
        self._loading.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def offline(self, tp: tuple[str, int]) -> None:
        """ReplicaManager.on_offline: the partition's log directory failed."""
        self.resigned(*tp)

    def is_loading(self, index: int) -> bool:
        return index in self._loading

    def is_loaded(self, index: int) -> bool:
        return index in self._loaded

    async def _load(self, index: int) -> None:
        started = time.monotonic()
        try:
            part = self.replicas.get(OFFSETS_TOPIC, index)
            if part is None:
                raise KafkaStorageError(self.replicas.log_dir, "load", OSError("no log"))
            replay = await self._replay(part)
        except asyncio.CancelledError:
            raise
        except (KafkaStorageError, RecordsError, OSError) as e:
            log.error("offsets_topic.load_failed", broker_id=self.broker_id, partition=index, error=str(e))
            return
        except Exception:
            log.exception("offsets_topic.load_failed", broker_id=self.broker_id, partition=index)
            return
        if self._loading.get(index) is not asyncio.current_task():
            return  # resigned meanwhile
        del self._loading[index]
        self._loaded.add(index)
        log.info("offsets_topic.loaded", broker_id=self.broker_id, partition=index, groups=len(replay.groups),
                 groups_with_offsets=len(replay.offsets), records=replay.records, skipped=replay.skipped,
                 elapsed_ms=int((time.monotonic() - started) * 1000))
        if self._listener is not None:
            self._listener.partition_loaded(index, replay.groups, replay.offsets)

    async def _replay(self, part: Partition) -> Replay:
        """Kafka's doLoadGroupsAndOffsets: from the log start to the log end, while this broker leads."""
        replay = Replay()
        offset = part.log.log_start_offset
        buffer = self.config.offsets_load_buffer_size
        while offset < part.log_end_offset and part.leader == self.broker_id and not part.offline:
            piece = self.replicas.read(part, offset, buffer, consumer=False, min_one_message=True,
                                       allow_partial=False)
            data = await asyncio.to_thread(piece.read_bytes)
            if not data:
                break
            moved = offset
            for i, after in enumerate(replay.apply(data)):
                moved = after
                if i % _BATCHES_BETWEEN_YIELDS == _BATCHES_BETWEEN_YIELDS - 1:
                    await asyncio.sleep(0)
            if moved <= offset:
                break  # nothing whole in what was read: the end of what can be read
            offset = moved
        return replay
