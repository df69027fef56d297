"""offsetsForTimes from confluent-kafka and kafka-python against the time index, on one real broker
with small segments (confluent-kafka's gzip batches on one partition, kafka-python's on the other): Kafka's answers (the first offset whose timestamp is >= T; -1 / None past
the end) before and after a clean restart, a kill -9, and a restart with every .timeindex deleted.
ListOffsets versions 0, 4 and 6 are also asked directly (epoch checks, v0's offset list)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from broker.apis.list_offsets import served_versions
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess
from tests.support.topics import create_topic
from tests.support.traffic import produce_one
from tests.support.wire import connect

pytestmark = pytest.mark.clients

TOPIC = "times"
N = 300
BASE_TS = 1_700_000_000_000


def timestamps(partition: int) -> list[int]:
    """Partition 0: rising in steps of 10 ms; partition 1: out of order, with repeats."""
    if partition == 0:
        return [BASE_TS + 10 * i for i in range(N)]
    return [BASE_TS + ((i * 37) % 101) * 10 + (i // 101) * 2000 for i in range(N)]


def expected(partition: int, target: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after target, (-1, -1) if none."""
    for off, ts in enumerate(timestamps(partition)):
        if ts >= target:
            return off, ts
    return -1, -1


def targets(partition: int) -> list[int]:
    ts = timestamps(partition)
    return sorted({0, BASE_TS - 1, BASE_TS, ts[1], ts[1] + 1, ts[N // 2], ts[N // 2] - 3, max(ts), max(ts) + 1,
                   ts[-1], BASE_TS + 1010, BASE_TS + 3005, 2 ** 62})


def produce(bootstrap: str) -> None:
    """confluent-kafka writes partition 0 (gzip, 7 records a batch), kafka-python partition 1."""
    failures: list[str] = []

    def delivered(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            failures.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": False,
                  "compression.codec": "gzip", "batch.num.messages": 7})
    for i, ts in enumerate(timestamps(0)):
        produce_one(p, TOPIC, b"v%d" % i, key=b"k%d" % i, partition=0, timestamp=ts, on_delivery=delivered)
    assert p.flush(60) == 0 and failures == []
    # batch_size below segment.bytes; no idempotence until InitProducerId is served.
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=300, enable_idempotence=False)
    try:
        futures = [kp.send(TOPIC, value=b"w%d" % i, partition=1, timestamp_ms=ts) for i, ts in enumerate(timestamps(1))]
        kp.flush(60)
        assert [f.get(timeout=30).offset for f in futures] == list(range(N))
    finally:
        kp.close(10)


def confluent_answers(bootstrap: str) -> dict[tuple[int, int], tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        out = {}
        # One timestamp per partition per request: a partition listed twice is INVALID_REQUEST.
        for i in range(max(len(targets(p)) for p in (0, 1))):
            asked = [TopicPartition(TOPIC, p, targets(p)[i]) for p in (0, 1) if i < len(targets(p))]
            got = c.offsets_for_times(asked, timeout=30)
            assert all(tp.error is None for tp in got), got
            # -1 is librdkafka's OFFSET_END, Kafka's "none".
            out |= {(g.partition, a.offset): (g.offset, -1) for a, g in zip(asked, got, strict=True)}
        return out
    finally:
        c.close()


def kafka_python_answers(bootstrap: str) -> dict[tuple[int, int], tuple[int, int]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=30_000)
    try:
        out = {}
        for p in (0, 1):
            tp = KpTopicPartition(TOPIC, p)
            for t in targets(p):
                found = c.offsets_for_times({tp: t})[tp]
                out[(p, t)] = (-1, -1) if found is None else (found.offset, found.timestamp)
        return out
    finally:
        c.close()


def check_clients(bootstrap: str) -> None:
    want = {(p, t): expected(p, t) for p in (0, 1) for t in targets(p)}
    assert kafka_python_answers(bootstrap) == want
    assert confluent_answers(bootstrap) == {k: (off, -1) for k, (off, _) in want.items()}


async def list_offsets(bootstrap: str, version: int, partitions: list[dict]) -> list[dict]:
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": partitions}]}
    async with await connect(bootstrap) as conn:
        resp = await conn.request(ApiKey.LIST_OFFSETS, version, body)
    return resp["topics"][0]["partitions"]


async def check_wire(bootstrap: str) -> int:
    """ListOffsets straight on the wire; returns partition 0's leader epoch."""
    target = timestamps(0)[123]
    newest = served_versions()[1]  # 6 (flexible) once InitProducerId is served, else 4
    (found,) = await list_offsets(bootstrap, newest, [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": target}])
    assert (found["error_code"], found["offset"], found["timestamp"]) == (0, 123, target)
    (latest,) = await list_offsets(bootstrap, newest, [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}])
    epoch = latest["leader_epoch"]
    assert (latest["offset"], latest["timestamp"]) == (N, -1) and epoch >= 0
    assert 0 <= found["leader_epoch"] <= epoch  # the epoch stamped in the record's batch
    current, unknown, twice, again = await list_offsets(bootstrap, 4, [
        {"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -2},
        {"partition_index": 1, "current_leader_epoch": epoch + 5, "timestamp": -1},
        {"partition_index": 2, "current_leader_epoch": -1, "timestamp": -1},
        {"partition_index": 2, "current_leader_epoch": -1, "timestamp": -2}])
    assert (current["error_code"], current["offset"]) == (0, 0)
    assert unknown["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert twice["error_code"] == again["error_code"] == ErrorCode.INVALID_REQUEST  # listed twice
    if epoch > 0:
        (fenced,) = await list_offsets(bootstrap, 4, [
            {"partition_index": 0, "current_leader_epoch": epoch - 1, "timestamp": -1}])
        assert fenced["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    (v0,) = await list_offsets(bootstrap, 0, [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 3}])
    offsets = v0["old_style_offsets"]
    assert offsets[0] == N and len(offsets) == 3 and offsets == sorted(offsets, reverse=True)
    return int(epoch)


def test_offsets_for_times_across_rolls_and_restarts(broker_factory: Callable[..., BrokerProcess]) -> None:
    # A 3 s ZooKeeper session (not 6 s): the restart after kill -9 waits for the dead one to expire.
    broker = broker_factory(log_segment_bytes="1024", auto_create_topics_enable="false",
                            zookeeper_session_timeout_ms="3000")
    asyncio.run(create_topic(broker, TOPIC, partitions=2))
    produce(broker.bootstrap)
    segments = sorted(broker.log_dir.glob(f"{TOPIC}-*/*.log"))
    for p in (0, 1):  # every partition rolled several times
        assert len([s for s in segments if s.parent.name == f"{TOPIC}-{p}"]) >= 4, segments
    check_clients(broker.bootstrap)
    first_epoch = asyncio.run(check_wire(broker.bootstrap))

    assert broker.stop() == 0  # clean: indexes trusted
    broker.start()
    check_clients(broker.bootstrap)
    assert asyncio.run(check_wire(broker.bootstrap)) >= first_epoch

    broker.kill()  # unclean: the active segments are recovered
    broker.start()
    check_clients(broker.bootstrap)

    assert broker.stop() == 0
    indexes = sorted(broker.log_dir.glob(f"{TOPIC}-*/*.timeindex"))
    assert len(indexes) == len(segments)
    for path in indexes:
        path.unlink()
    broker.start()
    check_clients(broker.bootstrap)  # answered from the rebuilt indexes
    # Sealed segments' files are written by their recovery; an active segment's at its next
    # roll, flush or close (never trusted before that: a crash first recovers it again).
    assert broker.stop() == 0
    assert sorted(broker.log_dir.glob(f"{TOPIC}-*/*.timeindex")) == indexes  # rebuilt
    assert any(p.stat().st_size > 0 for p in indexes)
    broker.start()
    check_clients(broker.bootstrap)
