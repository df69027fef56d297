"""The log stores RecordBatch v2: real producers' batches land as sent (headers, producer fields,
timestamps byte for byte), replicate as stored, and bad batches get Kafka's error for their
partition only (real ZooKeeper, real brokers)."""

from __future__ import annotations

import asyncio
import struct
import time

import crc32c
import pytest
from aiokafka import AIOKafkaProducer
from kafka import KafkaProducer
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import record_batch
from protocol.records.message_set import build_message_set
from tests.support.cluster import wait_identical_replicas
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.wire import connect

NOW_MS = 1_700_000_000_000


def headers_of(i: int) -> list[tuple[str, bytes]]:
    return [(f"h{j}", f"v{i}-{j}".encode() + bytes([j, 0, 255])) for j in range(i % 4)]


def stored_batches(blob: bytes) -> list:
    """Every batch in a replica's segment bytes, read by kafka-python (the independent reader)."""
    out = []
    records = MemoryRecords(blob)
    while (batch := records.next_batch()) is not None:
        out.append(batch)
    return out


def flatten(batches: list) -> list[tuple[int, bytes | None, bytes | None, int, list]]:
    return [(r.offset, r.key, r.value, r.timestamp, [(k, v) for k, v in r.headers]) for b in batches for r in b]


async def test_aiokafka_and_kafka_python_batches_are_stored_as_sent(broker) -> None:  # noqa: ANN001
    await create_topic(broker, "v2-h", 2)
    n = 300
    msgs = [(f"k{i}".encode() if i % 7 else None, f"value-{i}".encode() * (i % 5 + 1), NOW_MS + i, headers_of(i))
            for i in range(n)]
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=5, enable_idempotence=False)
    await p.start()
    try:
        futures = [await p.send("v2-h", key=k, value=v, partition=0, timestamp_ms=t, headers=h)
                   for k, v, t, h in msgs]
        await asyncio.gather(*futures)
    finally:
        await p.stop()

    def kafka_python() -> None:
        # api_version: kafka-python writes RecordBatch v2 (and headers) for brokers it takes for >= 0.11;
        # against Produce 0-2 it would infer 0.10 and write magic 1.
        kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=5, enable_idempotence=False,
                           api_version=(2, 8, 0))
        try:
            for k, v, t, h in msgs:
                kp.send("v2-h", key=k, value=v, partition=1, timestamp_ms=t, headers=h)
            kp.flush(30)
        finally:
            kp.close(10)
    await asyncio.to_thread(kafka_python)

    for partition in (0, 1):
        batches = stored_batches(partition_bytes(broker, "v2-h", partition))
        assert batches and {b.magic for b in batches} == {2}, partition
        assert flatten(batches) == [(i, k, v, t, h) for i, (k, v, t, h) in enumerate(msgs)], partition
        # Offsets assigned by the base offset: each batch follows the last, as the records do.
        assert [b.base_offset for b in batches] == [0] + [b.base_offset + b.last_offset_delta + 1
                                                          for b in batches[:-1]]


async def test_batches_replicate_as_stored(cluster) -> None:  # noqa: ANN001
    """RF=3: the followers' Fetch v3 carries the leader's v2 batches; every replica is byte-identical."""
    await cluster.create_topic("v2-rep", 1, 3)
    p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5, enable_idempotence=False,
                         compression_type="gzip")
    await p.start()
    try:
        futures = [await p.send("v2-rep", key=b"k%d" % i, value=b"v" * (i % 30), partition=0,
                                timestamp_ms=NOW_MS + i, headers=headers_of(i)) for i in range(2000)]
        metas = await asyncio.gather(*futures)
    finally:
        await p.stop()
    assert sorted(m.offset for m in metas) == list(range(2000))
    blob = await wait_identical_replicas(cluster, "v2-rep", 0, [0, 1, 2])
    got = flatten(stored_batches(blob))
    assert [(o, k, t, h) for o, k, _, t, h in got] == [
        (i, b"k%d" % i, NOW_MS + i, headers_of(i)) for i in range(2000)]


def _batch(n: int = 3, *, producer_id: int = -1, base_sequence: int = -1, transactional: bool = False,
           timestamp: int | None = None, value: bytes = b"v") -> bytearray:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                  producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                  base_sequence=base_sequence, batch_size=1 << 20)
    ts = timestamp if timestamp is not None else int(time.time() * 1000)
    for i in range(n):
        b.append(i, timestamp=ts, key=b"k", value=value, headers=[("h", b"x")])
    return bytearray(b.build())


def _recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, record_batch.CRC_AT, crc32c.crc32c(bytes(buf[record_batch.ATTRIBUTES_AT:])))
    return bytes(buf)


def _bad_inputs() -> dict[int, tuple[bytes, ErrorCode]]:
    bad_crc = _batch()
    bad_crc[-1] ^= 1
    wrong_count = _batch()
    struct.pack_into(">i", wrong_count, 57, 4)
    negative_delta = _batch()
    struct.pack_into(">i", negative_delta, record_batch.LAST_OFFSET_DELTA_AT, -1)
    overflowing_delta = _batch()
    struct.pack_into(">i", overflowing_delta, record_batch.LAST_OFFSET_DELTA_AT, (1 << 31) - 1)
    control = _batch(1)
    struct.pack_into(">h", control, record_batch.ATTRIBUTES_AT, record_batch.CONTROL_BIT)
    return {
        1: (bytes(bad_crc), ErrorCode.CORRUPT_MESSAGE),
        2: (_recrc(wrong_count), ErrorCode.INVALID_RECORD),
        3: (_recrc(negative_delta), ErrorCode.INVALID_RECORD),
        4: (bytes(_batch(1, value=b"x" * 3000)), ErrorCode.MESSAGE_TOO_LARGE),
        5: (bytes(_batch(2, producer_id=9, base_sequence=0, transactional=True)),
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        6: (_recrc(control), ErrorCode.INVALID_RECORD),
        7: (bytes(_batch(2, timestamp=NOW_MS - 10 * 86_400_000)), ErrorCode.INVALID_TIMESTAMP),
        8: (_recrc(overflowing_delta), ErrorCode.INVALID_RECORD),
    }


async def assert_served(broker, version: int) -> None:  # noqa: ANN001
    """Produce `version` is listed (Produce 3+ comes only with Fetch 4+ and InitProducerId, broker/apis/produce.py)."""
    async with await connect(broker) as conn:
        resp = await conn.request(ApiKey.API_VERSIONS, 0, {})
    top = next(k["max_version"] for k in resp["api_keys"] if k["api_key"] == ApiKey.PRODUCE)
    assert version <= top, f"Produce v{version} is not listed (Produce 0-{top})"


@pytest.mark.parametrize("version", [2, 3, 7, 8, 9])
async def test_bad_batches_fail_only_their_partition(broker, version: int) -> None:  # noqa: ANN001
    await assert_served(broker, version)
    topic = f"v2-bad-{version}"
    await create_topic(broker, topic, 10, configs={"max.message.bytes": "2000",
                                                   "message.timestamp.difference.max.ms": "3600000"})
    bad = _bad_inputs()
    good = {0: bytes(_batch(3)), 9: bytes(_batch(5))}
    parts = [{"index": i, "records": data} for i, (data, _) in bad.items()]
    parts[3:3] = [{"index": 0, "records": good[0]}]
    parts.append({"index": 9, "records": good[9]})
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": parts}]}
    async with await connect(broker) as conn, await connect(broker) as other:
        resp = await conn.request(ApiKey.PRODUCE, version, body)
        got = {p["index"]: p for p in resp["responses"][0]["partition_responses"]}
        assert {i: got[i]["error_code"] for i in bad} == {i: code for i, (_, code) in bad.items()}
        if version < 3:  # Kafka 2.8's request-wide answer is per partition here (broker/apis/produce.py)
            assert got[5]["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert (got[0]["error_code"], got[0]["base_offset"]) == (0, 0)
        assert (got[9]["error_code"], got[9]["base_offset"]) == (0, 0)
        if version >= 5:
            assert got[0]["log_start_offset"] == 0
        if version >= 8:
            assert [e["batch_index"] for e in got[7]["record_errors"]] == [0, 1]
            assert got[1]["error_message"] and got[0]["error_message"] is None
        # Nothing of a rejected batch was appended: every bad partition still ends at 0, and
        # takes the next good batch at offset 0; the other connection never noticed.
        lo = await other.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": i, "timestamp": -1} for i in range(10)]}]})
        ends = {p["partition_index"]: p["offset"] for p in lo["topics"][0]["partitions"]}
        assert ends == {i: 3 if i == 0 else 5 if i == 9 else 0 for i in range(10)}
        again = await other.request(ApiKey.PRODUCE, version, {**body, "topic_data": [
            {"name": topic, "partition_data": [{"index": i, "records": bytes(_batch(2))} for i in bad]}]})
        assert {p["index"]: (p["error_code"], p["base_offset"]) for p in again["responses"][0]["partition_responses"]} \
            == {i: (0, 0) for i in bad}
    for i in bad:
        assert {b.magic for b in stored_batches(partition_bytes(broker, topic, i))} == {2}


async def _produce_one(conn, topic: str, data: bytes, version: int) -> dict:  # noqa: ANN001
    resp = await conn.request(ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}]})
    return resp["responses"][0]["partition_responses"][0]


async def test_log_append_time_is_stamped_and_legacy_input_up_converted(broker) -> None:  # noqa: ANN001
    await create_topic(broker, "v2-lat", 1, configs={"message.timestamp.type": "LogAppendTime"})
    async with await connect(broker) as conn:
        before = int(time.time() * 1000)
        first = await _produce_one(conn, "v2-lat", bytes(_batch(2, timestamp=NOW_MS)), 2)
        assert first["error_code"] == 0 and first["log_append_time_ms"] >= before
        second = await _produce_one(conn, "v2-lat", build_message_set([(b"k", b"v", NOW_MS)], magic=1), 2)
        assert second["error_code"] == 0 and second["base_offset"] == 2
    batches = stored_batches(partition_bytes(broker, "v2-lat", 0))
    assert [b.magic for b in batches] == [2, 2]
    assert all(b.timestamp_type == 1 for b in batches)
    records = flatten(batches)
    assert [(o, t, h) for o, _, _, t, h in records[:2]] == [(i, first["log_append_time_ms"], [("h", b"x")])
                                                             for i in range(2)]
    assert [(o, k, v) for o, k, v, _, _ in records[2:]] == [(2, b"k", b"v")]


async def test_v3_takes_exactly_one_v2_batch(broker) -> None:  # noqa: ANN001
    await assert_served(broker, 3)
    await create_topic(broker, "v2-one", 1)
    one = bytes(_batch(2))
    async with await connect(broker) as conn:
        legacy = build_message_set([(b"k", b"v", NOW_MS)], magic=1)
        assert (await _produce_one(conn, "v2-one", legacy, 3))["error_code"] == ErrorCode.INVALID_RECORD
        assert (await _produce_one(conn, "v2-one", one + one, 3))["error_code"] == ErrorCode.INVALID_RECORD
        assert (await _produce_one(conn, "v2-one", one, 9))["base_offset"] == 0


async def test_topic_compression_type_recompresses(broker) -> None:  # noqa: ANN001
    await create_topic(broker, "v2-gz", 1, configs={"compression.type": "gzip"})
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks=1, linger_ms=5, enable_idempotence=False,
                         compression_type="lz4")
    await p.start()
    try:
        futures = [await p.send("v2-gz", key=b"k%d" % i, value=b"v" * i, partition=0, timestamp_ms=NOW_MS + i,
                                headers=headers_of(i)) for i in range(100)]
        await asyncio.gather(*futures)
    finally:
        await p.stop()
    batches = stored_batches(partition_bytes(broker, "v2-gz", 0))
    assert {b.compression_type for b in batches} == {1}  # gzip, whatever the producer used
    assert flatten(batches) == [(i, b"k%d" % i, b"v" * i, NOW_MS + i, headers_of(i)) for i in range(100)]


# ---- batches of many records: the record checks run as columns (protocol.records.record_scan) -----

MANY = 600  # well above record_scan.COLUMNS_FROM


def _many(keys: bool = True, timestamps: list[int] | None = None) -> bytearray:
    """MANY records of varied sizes, keys (record 250 without one when keys is False) and headers."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    now = int(time.time() * 1000)
    for i in range(MANY):
        key = None if not keys and i == 250 else b"key-%d" % i
        b.append(i, timestamp=timestamps[i] if timestamps else now + i % 9, key=key, value=b"v" * (i % 3 * 50),
                 headers=headers_of(i))
    return bytearray(b.build())


async def test_batches_of_many_records_are_checked_per_record_and_fail_alone(broker) -> None:  # noqa: ANN001
    await assert_served(broker, 9)
    await create_topic(broker, "v2-many", 4, configs={"cleanup.policy": "compact",
                                                       "message.timestamp.difference.max.ms": "3600000"})
    now = int(time.time() * 1000)
    late = [now - 7_200_000 if i % 100 == 7 else now for i in range(MANY)]
    # A stray byte after record 300 (the CRC over it right): the records after it do not parse.
    garbled = record_batch.batch_around(b"".join(
        record_batch.encode_record(i, 0, b"k", b"v" * 60) + (b"\x00" if i == 300 else b"") for i in range(MANY)),
        MANY, now, now)
    parts = [{"index": 0, "records": bytes(_many())}, {"index": 1, "records": bytes(_many(keys=False))},
             {"index": 2, "records": bytes(_many(timestamps=late))}, {"index": 3, "records": garbled}]
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": "v2-many", "partition_data": parts}]}
    async with await connect(broker) as conn:
        resp = await conn.request(ApiKey.PRODUCE, 9, body)
    got = {p["index"]: p for p in resp["responses"][0]["partition_responses"]}
    assert (got[0]["error_code"], got[0]["base_offset"]) == (0, 0)
    assert got[1]["error_code"] == ErrorCode.INVALID_RECORD
    assert [e["batch_index"] for e in got[1]["record_errors"]] == [250]
    assert got[2]["error_code"] == ErrorCode.INVALID_TIMESTAMP
    assert [e["batch_index"] for e in got[2]["record_errors"]] == list(range(7, MANY, 100))
    assert got[3]["error_code"] == ErrorCode.INVALID_RECORD and got[3]["record_errors"] == []
    stored = flatten(stored_batches(partition_bytes(broker, "v2-many", 0)))
    assert [(o, k, v, h) for o, k, v, _, h in stored] == [(i, b"key-%d" % i, b"v" * (i % 3 * 50), headers_of(i))
                                                          for i in range(MANY)]
    for i in (1, 2, 3):  # nothing of a rejected batch
        assert partition_bytes(broker, "v2-many", i) == b""


def test_confluent_kafka_large_batches_read_back_exactly(broker) -> None:  # noqa: ANN001
    """librdkafka's own batching (up to 10,000 records a batch, lz4 and uncompressed), read back."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    asyncio.run(create_topic(broker, "v2-librdkafka", 2))
    n = 20_000
    sent = [(b"k%d" % i if i % 3 else None, b"x" * (i % 200), [("h", b"%d" % i)] if i % 5 == 0 else None)
            for i in range(n)]
    for partition, codec in ((0, "none"), (1, "lz4")):
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 200, "batch.size": 1_000_000,
                      "compression.codec": codec, "enable.idempotence": False})
        for key, value, headers in sent:
            p.produce("v2-librdkafka", value=value, key=key, headers=headers, partition=partition)
            p.poll(0)
        assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "v2-librdkafka", "enable.auto.commit": False})
    c.assign([TopicPartition("v2-librdkafka", i, 0) for i in (0, 1)])
    got: dict[int, list] = {0: [], 1: []}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < 2 * n and time.monotonic() < deadline:
        for m in c.consume(10_000, 1):
            assert m.error() is None, m.error()
            got[m.partition()].append((m.offset(), m.key(), m.value(), m.headers()))
    c.close()
    for partition in (0, 1):
        assert got[partition] == [(i, k, v, h) for i, (k, v, h) in enumerate(sent)]
    batches = stored_batches(partition_bytes(broker, "v2-librdkafka", 0))
    assert max(len(list(b)) for b in batches) >= 1000  # large batches, so the columns ran
