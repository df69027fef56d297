"""broker.group.offsets_topic: the store's writes and loads over a real ReplicaManager and log.

The ReplicaManager and its logs are real (a temporary log directory, never started: nothing here
reaches ZooKeeper); the GroupLoadListener is a recorder. What the store promises the
coordinator: writes answered with the produce error code, loads that replay exactly what was
written, that yield to the event loop while they run, that a resignation cancels, and that a
repeated election does not repeat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.group.offsets_topic import OffsetsTopic
from broker.group.store import (
    KEEP_GROUP,
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    partition_for,
)
from broker.metadata import MetadataCache
from broker.metrics import Registry
from broker.replication.replica_manager import ReplicaManager
from broker.zk.client import ZkClient
from broker.zk.topic_configs import TopicConfigs
from protocol.errors import ErrorCode
from protocol.layouts import RECORD_BATCH_CRC_FROM
from protocol.records.records import decode_records

ME = 1
GROUP = GroupRecord("consumer", 2, "range", "m", 1_700_000_000_000,
                    (MemberRecord("m", None, "c", "/h", 1000, 1000, b"s", b"a"),))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.loaded: dict[int, tuple[dict[str, GroupRecord], dict[str, dict[tuple[str, int], CommittedOffset]]]] = {}

    def partition_loading(self, partition: int) -> None:
        self.events.append(("loading", partition))

    def partition_loaded(self, partition: int, groups: Mapping[str, GroupRecord],
                         offsets: Mapping[str, Mapping[tuple[str, int], CommittedOffset]]) -> None:
        self.events.append(("loaded", partition))
        self.loaded[partition] = (dict(groups), {g: dict(o) for g, o in offsets.items()})

    def partition_unloaded(self, partition: int) -> None:
        self.events.append(("unloaded", partition))


def committed(n: int) -> CommittedOffset:
    return CommittedOffset(n, 1, "", 1_700_000_000_000 + n)


def make(tmp_path: Path, **config: int) -> tuple[OffsetsTopic, ReplicaManager, Recorder]:
    cfg = BrokerConfig(broker_id=ME, log_dirs=[tmp_path], offsets_topic_num_partitions=4, **config)
    zk = ZkClient("127.0.0.1:1")  # never started
    replicas = ReplicaManager(cfg, zk, Registry())
    topic_configs = TopicConfigs(zk)
    topic_configs.set(OFFSETS_TOPIC, {"cleanup.policy": "compact"})
    store = OffsetsTopic(cfg, zk, MetadataCache(), replicas, topic_configs, wall_clock=lambda: 1_700_000_000_000)
    recorder = Recorder()
    store.register(recorder)
    return store, replicas, recorder


def lead(replicas: ReplicaManager, index: int, isr: list[int] | None = None, epoch: int = 0) -> None:
    replicas.become_leader(OFFSETS_TOPIC, index, isr or [ME], epoch, isr or [ME], 0, 1, 1, None)


async def loaded(recorder: Recorder, index: int) -> None:
    for _ in range(2000):
        if index in recorder.loaded:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"partition {index} never loaded: {recorder.events}")


@pytest.mark.parametrize("codec", [0, 1, 4])  # offsets.topic.compression.codec: none, gzip, zstd
async def test_write_then_load_replays_what_was_written(tmp_path: Path, codec: int) -> None:
    store, replicas, _ = make(tmp_path, offsets_topic_compression_codec=codec)
    index = store.partition_for("g")
    assert index == partition_for("g", 4)
    lead(replicas, index)
    assert await store.write("g", GROUP, {("t", 0): committed(1), ("t", 1): committed(2)}) == ErrorCode.NONE
    assert await store.write("g", KEEP_GROUP, {("t", 0): committed(3), ("t", 1): None}) == ErrorCode.NONE
    part = replicas.get(OFFSETS_TOPIC, index)
    assert part is not None and part.high_watermark == part.log_end_offset == 5
    # Kafka's layout: keys required, one batch per write, CreateTime of the write, the codec asked for.
    data = part.log.read(0, 1 << 20).read_bytes()
    assert data[RECORD_BATCH_CRC_FROM + 1] & 0x07 == codec
    batch = decode_records(data)
    assert all(r.key is not None for r in batch) and {r.timestamp for r in batch} == {1_700_000_000_000}

    # Another store (the next leader's) over the same log loads it.
    again, _, recorder = make(tmp_path)
    lead(again.replicas, index)
    again.became_leader(OFFSETS_TOPIC, index, 0)
    await loaded(recorder, index)
    assert recorder.events == [("loading", index), ("loaded", index)]
    assert recorder.loaded[index] == ({"g": GROUP}, {"g": {("t", 0): committed(3)}})
    assert again.is_loaded(index)
    await again.stop()


async def test_stop_ends_loads_in_progress(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path)
    index = store.partition_for("g")
    lead(replicas, index)
    for i in range(300):
        await store.write("g", KEEP_GROUP, {("t", 0): committed(i)})
    again, _, recorder = make(tmp_path, offsets_load_buffer_size=512)
    lead(again.replicas, index)
    again.became_leader(OFFSETS_TOPIC, index, 0)
    await again.stop()
    assert not again.is_loading(index) and not again.is_loaded(index)
    assert recorder.events == [("loading", index)]


async def test_write_where_this_broker_does_not_lead(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path)
    index = store.partition_for("g")
    assert await store.write("g", GROUP, {}) == ErrorCode.NOT_LEADER_FOR_PARTITION  # not hosted
    replicas.become_follower(OFFSETS_TOPIC, index, [2, ME], 2, 0, [2, ME], 0, 1, None)
    assert await store.write("g", GROUP, {}) == ErrorCode.NOT_LEADER_FOR_PARTITION
    part = replicas.get(OFFSETS_TOPIC, index)
    assert part is not None and part.log_end_offset == 0


async def test_write_waits_for_the_isr_then_times_out(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path, offsets_commit_timeout_ms=50)
    index = store.partition_for("g")
    lead(replicas, index, isr=[ME, 2])  # follower 2 never fetches: the high watermark stays
    assert await store.write("g", KEEP_GROUP, {("t", 0): committed(1)}) == ErrorCode.REQUEST_TIMED_OUT


async def test_required_acks_one_does_not_wait(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path, offsets_commit_timeout_ms=60_000, offsets_commit_required_acks=1)
    index = store.partition_for("g")
    lead(replicas, index, isr=[ME, 2])
    assert await store.write("g", KEEP_GROUP, {("t", 0): committed(1)}) == ErrorCode.NONE


async def test_storage_errors_are_answered_not_raised(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path)
    index = store.partition_for("g")
    lead(replicas, index)
    part = replicas.get(OFFSETS_TOPIC, index)
    assert part is not None
    part.offline = True
    assert await store.write("g", KEEP_GROUP, {("t", 0): committed(1)}) == ErrorCode.KAFKA_STORAGE_ERROR


async def test_too_large_a_write_is_the_produce_error(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path, message_max_bytes=200)
    index = store.partition_for("g")
    lead(replicas, index)
    big = GroupRecord("consumer", 1, "range", "m", 0, (MemberRecord("m", None, "c", "/h", 1, 1, b"x" * 500, b""),))
    assert await store.write("g", big, {}) == ErrorCode.MESSAGE_TOO_LARGE


async def test_a_big_load_yields_to_the_event_loop(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path, offsets_load_buffer_size=4096)
    index = store.partition_for("g")
    lead(replicas, index)
    for i in range(3000):
        assert await store.write("g", KEEP_GROUP, {("t", i % 100): committed(i)}) == ErrorCode.NONE

    again, _, recorder = make(tmp_path, offsets_load_buffer_size=4096)
    lead(again.replicas, index)
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)
    task = asyncio.create_task(ticker())
    again.became_leader(OFFSETS_TOPIC, index, 0)
    await loaded(recorder, index)
    done.set()
    await task
    # The load ran in many slices (3,000 batches, 4 KiB reads) with the loop served between them.
    assert ticks > 10
    assert recorder.loaded[index][1] == {"g": {("t", p): committed(2900 + p) for p in range(100)}}


async def test_resigning_cancels_a_load_and_unloads(tmp_path: Path) -> None:
    store, replicas, _ = make(tmp_path, offsets_load_buffer_size=1024)
    index = store.partition_for("g")
    lead(replicas, index)
    for i in range(500):
        await store.write("g", KEEP_GROUP, {("t", 0): committed(i)})
    again, _, recorder = make(tmp_path, offsets_load_buffer_size=1024)
    lead(again.replicas, index)
    again.became_leader(OFFSETS_TOPIC, index, 0)
    assert again.is_loading(index)
    await asyncio.sleep(0)
    again.resigned(OFFSETS_TOPIC, index)
    await asyncio.sleep(0.05)
    assert recorder.events == [("loading", index), ("unloaded", index)]
    assert not again.is_loading(index) and not again.is_loaded(index)
    again.resigned(OFFSETS_TOPIC, index)  # not leading: nothing to tell
    assert recorder.events == [("loading", index), ("unloaded", index)]


async def test_a_repeated_election_does_not_reload_and_other_topics_are_ignored(tmp_path: Path) -> None:
    store, replicas, recorder = make(tmp_path)
    index = store.partition_for("g")
    lead(replicas, index)
    store.became_leader(OFFSETS_TOPIC, index, 0)
    await loaded(recorder, index)
    store.became_leader(OFFSETS_TOPIC, index, 1)  # re-elected with a new epoch, still leading
    store.became_leader("orders", index, 0)
    store.resigned("orders", index)
    await asyncio.sleep(0.01)
    assert recorder.events == [("loading", index), ("loaded", index)]
    store.offline((OFFSETS_TOPIC, index))
    assert recorder.events[-1] == ("unloaded", index)


@pytest.mark.parametrize("count", [1, 4, 50])
async def test_partition_count_from_the_existing_topic(tmp_path: Path, count: int) -> None:
    store, _, _ = make(tmp_path)
    store.metadata.topics[OFFSETS_TOPIC] = dict.fromkeys(range(count))  # type: ignore[arg-type]
    assert store.partition_count == count
    store.metadata.topics[OFFSETS_TOPIC] = dict.fromkeys(range(7))  # type: ignore[arg-type]
    assert store.partition_count == count  # fixed once seen
    assert store.partition_for("some-group") == partition_for("some-group", count)
