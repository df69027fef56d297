"""The `__consumer_offsets` store across leader changes, on real brokers (issue 18, deliverable 2).

Three brokers on a real ZooKeeper: brokers 0 and 1 run in this test's process (real listeners,
real replication, real controller), so their GroupStore is written through and their
GroupLoadListener observed directly, as the group coordinator will; broker 2 is a `minibroker
serve` process. A partition led by 0 with replicas [0, 1, 2]:

- writes through broker 0's store (a group with members, a later commit superseding an earlier
  one, an expire timestamp, a simple consumer's offsets without a group) are acknowledged by the
  ISR; broker 1's store refuses them (NOT_LEADER_OR_FOLLOWER) while it follows;
- broker 0 stops (controlled shutdown): broker 1 becomes leader, its listener is told
  `partition_loading` then `partition_loaded` with exactly the groups and offsets written;
- broker 0 comes back and catches up; tombstones (the group, one offset, a simple consumer's
  only offset) are written through broker 1's store; broker 1 stops: broker 0 leads again and
  its listener loads the partition without what the tombstones removed;
- the bytes are Kafka's: a real client (confluent-kafka) reads the partition and every key and
  value decodes with Kafka's schemas.

Compaction keeps the topic bounded (issue 18's test): 10,000 commits of one group, over five
partitions of a topic, through the store of a one-broker cluster (the topic's replication factor
lowered to 1, segments of 16 KiB); once the cleaner has run, the cleaned segments hold each key
at most once and their bytes shrink to less than one segment, and a reload gives exactly the
latest offsets.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from broker.config import build_config
from broker.group.store import (
    KEEP_GROUP,
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    partition_for,
)
from broker.server import Broker
from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.group_metadata import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from protocol.records.records import decode_records
from tests.support.brokers import BrokerProcess
from tests.support.cluster import FAST
from tests.support.ports import free_port
from tests.support.waiting import wait_for
from tests.support.wire import connect

pytestmark = pytest.mark.integration

TopicPartitionKey = tuple[str, int]


class Recorder:
    """A GroupLoadListener that keeps what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.loaded: dict[int, tuple[dict[str, GroupRecord], dict[str, dict[TopicPartitionKey, CommittedOffset]]]] = {}

    def partition_loading(self, partition: int) -> None:
        self.events.append(("loading", partition))

    def partition_loaded(self, partition: int, groups: Mapping[str, GroupRecord],
                         offsets: Mapping[str, Mapping[TopicPartitionKey, CommittedOffset]]) -> None:
        self.events.append(("loaded", partition))
        self.loaded[partition] = (dict(groups), {g: dict(o) for g, o in offsets.items()})

    def partition_unloaded(self, partition: int) -> None:
        self.events.append(("unloaded", partition))
        self.loaded.pop(partition, None)


def in_process_broker(workdir: Path, broker_id: int, zk_connect: str,
                      **overrides: str) -> tuple[Broker, Recorder]:
    config = build_config({"broker.id": str(broker_id), "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                           "log.dirs": str(workdir / f"logs-{broker_id}"), "zookeeper.connect": zk_connect, **FAST,
                           **overrides})
    broker = Broker(config)
    recorder = Recorder()
    broker.group_store.register(recorder)
    return broker, recorder


def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.listener.port}"


MEMBERS = (MemberRecord("consumer-1-aaa", None, "consumer-1", "/127.0.0.1", 300000, 10000, b"\x00\x01sub-a",
                        b"\x00\x01assign-a"),
           MemberRecord("consumer-2-bbb", "static-2", "consumer-2", "/127.0.0.2", 300000, 45000, b"\x00\x01sub-b",
                        b"\x00\x01assign-b"))
GROUP = GroupRecord("consumer", 7, "range", "consumer-1-aaa", 1_700_000_000_000, MEMBERS)


def committed(n: int, expire: int | None = None) -> CommittedOffset:
    return CommittedOffset(n, -1 if expire else 3, f"m{n}", 1_700_000_000_000 + n, expire)


async def test_store_round_trip_across_leader_changes(tmp_path: Path, zk_server: ZooKeeperServer) -> None:
    zk = zk_server.connect_string
    b0, rec0 = in_process_broker(tmp_path, 0, zk)
    b1, rec1 = in_process_broker(tmp_path, 1, zk)
    p2 = BrokerProcess(tmp_path, 2, zk, FAST)
    running = [b0, b1]
    try:
        await b0.start()
        await b1.start()
        await asyncio.to_thread(p2.start)

        # FindCoordinator creates the topic; wait until every partition has a leader here.
        async def created() -> bool:
            conn = await connect(bootstrap(b0))
            try:
                resp = await conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "any", "key_type": 0})
            finally:
                await conn.close()
            parts = b0.metadata.topics.get(OFFSETS_TOPIC, {})
            return resp["error_code"] == ErrorCode.NONE and len(parts) == 50 and all(
                p.leader >= 0 for p in parts.values())
        await wait_for("__consumer_offsets with leaders", created, timeout=90, interval=0.3)
        parts = b0.metadata.topics[OFFSETS_TOPIC]
        p = next(i for i, info in sorted(parts.items()) if info.replicas == [0, 1, 2] and info.leader == 0)
        groups = [g for g in (f"group-{i}" for i in range(5000)) if partition_for(g, 50) == p][:2]
        g_members, g_simple = groups
        await wait_for(f"broker 0 loaded partition {p}", lambda: p in rec0.loaded, timeout=30)
        assert rec0.events.index(("loading", p)) < rec0.events.index(("loaded", p))
        assert rec0.loaded[p] == ({}, {})

        store0, store1 = b0.group_store, b1.group_store
        assert await store0.write(g_members, GROUP, {("orders", 0): committed(5), ("orders", 1): committed(6)}) == 0
        assert await store0.write(g_members, KEEP_GROUP, {("orders", 0): committed(50)}) == 0  # supersedes 5
        assert await store0.write(g_members, KEEP_GROUP,
                                  {("payments", 2): committed(9, expire=1_900_000_000_000)}) == 0
        assert await store0.write(g_simple, KEEP_GROUP, {("logs", 4): committed(400)}) == 0
        assert await store1.write(g_members, KEEP_GROUP, {("orders", 0): committed(1)}) == \
            ErrorCode.NOT_LEADER_FOR_PARTITION
        expected_offsets = {g_members: {("orders", 0): committed(50), ("orders", 1): committed(6),
                                        ("payments", 2): committed(9, expire=1_900_000_000_000)},
                            g_simple: {("logs", 4): committed(400)}}

        # Leadership moves to broker 1: it loads exactly what was written.
        assert p not in rec1.loaded
        await b0.stop()
        running.remove(b0)
        await wait_for(f"broker 1 loaded partition {p}", lambda: p in rec1.loaded, timeout=60)
        assert ("loading", p) in rec1.events
        assert rec1.loaded[p] == ({g_members: GROUP}, expected_offsets)

        # Broker 0 returns and catches up; tombstones go through broker 1's store.
        b0, rec0 = in_process_broker(tmp_path, 0, zk)
        await b0.start()
        running.append(b0)

        async def in_isr() -> bool:
            info = b1.metadata.topics[OFFSETS_TOPIC][p]
            return info.leader == 1 and 0 in info.isr
        await wait_for("broker 0 back in the ISR", in_isr, timeout=60, interval=0.3)
        assert await store1.write(g_members, None, {("orders", 1): None}) == 0
        assert await store1.write(g_simple, KEEP_GROUP, {("logs", 4): None}) == 0
        store1_partition = b1.replicas.get(OFFSETS_TOPIC, p)
        assert store1_partition is not None
        end = store1_partition.log_end_offset

        await b1.stop()
        running.remove(b1)
        await wait_for(f"broker 0 loaded partition {p} again", lambda: p in rec0.loaded, timeout=60)
        assert rec0.loaded[p] == ({}, {g_members: {("orders", 0): committed(50),
                                                   ("payments", 2): committed(9, expire=1_900_000_000_000)}})

        # A real client reads Kafka's bytes: every key and value decodes with Kafka's schemas.
        consumer = Consumer({"bootstrap.servers": f"{bootstrap(b0)},{p2.bootstrap}", "group.id": "reader",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(OFFSETS_TOPIC, p, 0)])
            seen = []
            while True:
                m = await asyncio.to_thread(consumer.poll, 10)
                assert m is not None, f"stalled after {len(seen)} records"
                if m.error():
                    assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                    break
                seen.append((m.offset(), m.key(), m.value()))
        finally:
            await asyncio.to_thread(consumer.close)
        assert [o for o, _, _ in seen] == list(range(end))
        kinds = []
        for _, key, value in seen:
            decoded = decode_key(key)
            if isinstance(decoded, GroupMetadataKey):
                kinds.append(("group", decoded.group, None if value is None else decode_group_value(value).generation))
            else:
                assert isinstance(decoded, OffsetCommitKey)
                kinds.append((decoded.topic, decoded.partition,
                              None if value is None else decode_offset_value(value).offset))
        assert kinds == [("group", g_members, 7), ("orders", 0, 5), ("orders", 1, 6), ("orders", 0, 50),
                         ("payments", 2, 9), ("logs", 4, 400), ("group", g_members, None), ("orders", 1, None),
                         ("logs", 4, None)]
    finally:
        for b in running:
            await b.stop(controlled=False)
        await asyncio.to_thread(p2.kill)


async def find_coordinator_once(broker: Broker) -> bool:
    conn = await connect(bootstrap(broker))
    try:
        resp = await conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "any", "key_type": 0})
    finally:
        await conn.close()
    return resp["error_code"] == ErrorCode.NONE


async def test_compaction_keeps_the_topic_bounded(tmp_path: Path, zk_server: ZooKeeperServer) -> None:
    settings = {"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "16384",
                "log.cleaner.backoff.ms": "200"}
    broker, recorder = in_process_broker(tmp_path, 0, zk_server.connect_string, **settings)
    try:
        await broker.start()
        await wait_for("a coordinator", lambda: find_coordinator_once(broker), timeout=60, interval=0.3)
        await wait_for("partition 0 loaded", lambda: 0 in recorder.loaded, timeout=30)
        store = broker.group_store
        assert await store.write("g", GROUP, {}) == 0
        for i in range(10_000):
            assert await store.write("g", KEEP_GROUP, {("orders", i % 5): committed(i)}) == 0
        latest = {("orders", p): committed(9_995 + p) for p in range(5)}
        part = broker.replicas.get(OFFSETS_TOPIC, 0)
        assert part is not None and part.log_end_offset == 10_001

        def cleaned_keys() -> Counter[bytes] | None:
            files = sorted(part.log.directory.glob("*.log"))
            if len(files) < 2:
                return None
            keys: Counter[bytes] = Counter()
            for f in files[:-1]:  # the active segment is never cleaned
                for r in decode_records(f.read_bytes()):
                    assert r.key is not None
                    keys[r.key] += 1
            return keys if keys and max(keys.values()) == 1 else None
        keys = await wait_for("cleaned segments holding each key once", cleaned_keys, timeout=120, interval=0.5)
        assert len(keys) <= 6  # the group and its five offsets
        # 10,000 records took ~1 MiB in ~70 segments; cleaned, those hold a few hundred bytes (each
        # empty segment stays until a later pass merges it, as in Kafka: groups are sized before cleaning).
        cleaned_bytes = sum(f.stat().st_size for f in sorted(part.log.directory.glob("*.log"))[:-1])
        assert cleaned_bytes < 16384

        # What is left loads as the latest state (the store told to resign and lead again, as
        # a leader change would).
        store.resigned(OFFSETS_TOPIC, 0)
        assert 0 not in recorder.loaded
        store.became_leader(OFFSETS_TOPIC, 0, part.leader_epoch)
        await wait_for("reloaded", lambda: recorder.loaded.get(0), timeout=30)
        assert recorder.loaded[0] == ({"g": GROUP}, {"g": latest})
    finally:
        await broker.stop(controlled=False)
