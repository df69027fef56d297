"""Records with headers on three brokers (RF=3, acks=all), with every client and every codec it offers:
keys, values, header keys and values, and timestamps come back byte for byte, and the followers hold
the leader's RecordBatch v2 bytes exactly. Old consumers (kafka-python pinned to 0.10.1, kcat with
broker.version.fallback=0.10.1) read the same records down-converted to magic 1, headers dropped.

The producers here run without idempotence. librdkafka (confluent-kafka, kcat), kafka-python and
KafkaJS write RecordBatch v2 only through Produce 3+, which is listed together with Fetch 4+ once
InitProducerId is served (broker.apis.produce.served_versions); until then their cases skip with
that reason. aiokafka writes v2 batches inside any Produce version, so its case always runs, and
the old consumers read what it wrote."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.apis.fetch import served_versions as fetch_versions
from broker.zk.server import ZooKeeperServer
from protocol.api_keys import ApiKey
from tests.support.brokers import BrokerProcess, start_together
from tests.support.cluster import FAST
from tests.support.messages import HeaderedMessage, headered_messages, read_headered_with_kafka_python
from tests.support.replication import partition_bytes
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect

pytestmark = pytest.mark.clients
N = 2_000


class Rf3:
    def __init__(self, brokers: list[BrokerProcess]) -> None:
        self.brokers = brokers
        self.bootstrap = ",".join(b.bootstrap for b in brokers)

    def create(self, topic: str) -> None:
        asyncio.run(create_topic(self.bootstrap, topic, 1, 3))

    def assert_replicas_identical(self, topic: str) -> bytes:
        """Every replica's log equals the leader's, byte for byte, and holds RecordBatch v2 only; the log."""
        async def same() -> bytes | None:
            blobs = [partition_bytes(b, topic, 0) for b in self.brokers]
            return blobs[0] if blobs[0] and all(b == blobs[0] for b in blobs) else None
        blob = asyncio.run(wait_for(f"identical replicas of {topic}", same, 30, 0.5))
        pos = 0
        while pos < len(blob):
            assert blob[pos + 16] == 2, f"magic {blob[pos + 16]} at byte {pos} of {topic}"
            pos += 12 + int.from_bytes(blob[pos + 8:pos + 12], "big")
        return blob


def stored_records(blob: bytes) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]], int]]:
    """(offset, key, value, headers, timestamp) of every record in log bytes, read by kafka-python."""
    from kafka.record import MemoryRecords

    mr, out = MemoryRecords(blob), []
    while (batch := mr.next_batch()) is not None:
        out.extend((r.offset, r.key, r.value, [(k, bytes(v)) for k, v in r.headers], r.timestamp) for r in batch)
    return out


@pytest.fixture(scope="module")
def rf3(tmp_path_factory: pytest.TempPathFactory, zk_server_session: ZooKeeperServer) -> Iterator[Rf3]:
    workdir = tmp_path_factory.mktemp("headers-rf3")
    zk = zk_server_session.connect_string + f"/{workdir.name}"
    brokers = [BrokerProcess(workdir, i, zk, dict(FAST)) for i in range(3)]
    try:
        start_together(brokers)
        cluster = Rf3(brokers)

        async def three_registered() -> bool:
            async with await connect(cluster.bootstrap) as conn:
                resp = await conn.request(ApiKey.METADATA, 1, {"topics": []})
                return len(resp["brokers"]) == 3
        asyncio.run(wait_for("three registered brokers", three_registered, 30))
        yield cluster
    finally:
        for b in brokers:
            b.kill()


def expected(msgs: list[HeaderedMessage]) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]], int]]:
    return [(i, k, v, h, t) for i, (k, v, h, t) in enumerate(msgs)]


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_headers(rf3: Rf3, codec: str | None) -> None:
    from kafka import KafkaProducer

    topic = f"hkp-{codec or 'none'}"
    rf3.create(topic)
    msgs = headered_messages(topic, N)
    p = KafkaProducer(bootstrap_servers=rf3.bootstrap, acks="all", compression_type=codec, linger_ms=5,
                      enable_idempotence=False, request_timeout_ms=30_000)
    try:
        futures = [p.send(topic, key=k, value=v, headers=h, timestamp_ms=t, partition=0) for k, v, h, t in msgs]
        p.flush(60)
        assert sorted(f.get(timeout=30).offset for f in futures) == list(range(N))
    finally:
        p.close(10)
    assert read_headered_with_kafka_python(rf3.bootstrap, topic, N) == expected(msgs)
    rf3.assert_replicas_identical(topic)
    if codec != "zstd":  # zstd has no place in magic 0/1: old consumers get UNSUPPORTED_COMPRESSION_TYPE
        assert_old_consumers_read(rf3, topic, msgs)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_headers(rf3: Rf3, codec: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = f"hck-{codec}"
    rf3.create(topic)
    msgs = headered_messages(topic, N)
    errors: list[str] = []
    p = Producer({"bootstrap.servers": rf3.bootstrap, "acks": "all", "compression.type": codec, "linger.ms": 5,
                  "enable.idempotence": False})
    for k, v, h, t in msgs:
        p.produce(topic, key=k, value=v, headers=h, timestamp=t, partition=0,
                  on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
        p.poll(0)
    assert p.flush(60) == 0 and errors == []
    c = Consumer({"bootstrap.servers": rf3.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes, bytes, list[tuple[str, bytes]], int]] = []
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.key(), m.value(), [(hk, hv or b"") for hk, hv in (m.headers() or [])],
                            m.timestamp()[1]))
    finally:
        c.close()
    assert got == expected(msgs)
    rf3.assert_replicas_identical(topic)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
async def test_aiokafka_headers(rf3: Rf3, codec: str | None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = f"haio-{codec or 'none'}"
    await create_topic(rf3.bootstrap, topic, 1, 3)
    msgs = headered_messages(topic, N)
    p = AIOKafkaProducer(bootstrap_servers=rf3.bootstrap, acks="all", compression_type=codec, linger_ms=5,
                         enable_idempotence=False)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v, headers=h, timestamp_ms=t, partition=0)
                   for k, v, h, t in msgs]
        offsets = [(await f).offset for f in futures]
    finally:
        await p.stop()
    assert sorted(offsets) == list(range(N))
    c = AIOKafkaConsumer(bootstrap_servers=rf3.bootstrap, group_id=None, enable_auto_commit=False)
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got: list[tuple[int, bytes, bytes, list[tuple[str, bytes]], int]] = []
        while len(got) < N:
            batch = await c.getmany(tp, timeout_ms=10_000)
            assert batch, f"stalled after {len(got)} messages"
            got.extend((m.offset, m.key, m.value, [(hk, bytes(hv)) for hk, hv in m.headers], m.timestamp)
                       for m in batch[tp])
    finally:
        await c.stop()
    # aiokafka's consumer reads headers through Fetch 4+; below it gets them down-converted, without.
    if fetch_versions()[1] >= 4:
        assert got == expected(msgs)
    else:
        assert got == [(o, k, v, [], t) for o, k, v, _, t in expected(msgs)]
    # Stored as sent, headers included, identically on the three replicas.
    blob = await asyncio.to_thread(rf3.assert_replicas_identical, topic)
    assert stored_records(blob) == expected(msgs)
    await asyncio.to_thread(assert_old_consumers_read, rf3, topic, msgs)


def assert_old_consumers_read(rf3: Rf3, topic: str, msgs: list[HeaderedMessage]) -> None:
    """kafka-python pinned to 0.10.1 (Fetch v3) and kcat without ApiVersions (fallback 0.10.1) read
    every record down-converted to magic 1: keys, values and timestamps as written, no headers."""
    old = read_headered_with_kafka_python(rf3.bootstrap, topic, len(msgs), api_version=(0, 10, 1))
    assert old == [(o, k, v, [], t) for o, k, v, _, t in expected(msgs)]
    run = subprocess.run(
        ["kcat", "-b", rf3.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-X", "api.version.request=false", "-X", "broker.version.fallback=0.10.1", "-f", "%o\t%k\t%s\t%T\n"],
        capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    lines = [line.split(b"\t") for line in run.stdout.split(b"\n")[:-1]]
    assert [(int(o), k, v, int(t)) for o, k, v, t in lines] == [(o, k, v, t) for o, k, v, _, t in expected(msgs)]


@pytest.fixture(scope="module")
def kafkajs(kafkajs_dir: Path) -> Path:
    return kafkajs_dir / "produce_headers.js"


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_kafkajs_headers(rf3: Rf3, kafkajs: Path, codec: str) -> None:
    topic = f"hkjs-{codec}"
    rf3.create(topic)
    msgs = headered_messages(topic, N)
    payload = json.dumps([[k.decode(), v.decode(), [[hk, base64.b64encode(hv).decode()] for hk, hv in h], t]
                          for k, v, h, t in msgs])
    run = subprocess.run(["node", str(kafkajs), rf3.bootstrap, topic, "-1", codec], input=payload.encode(),
                         capture_output=True, timeout=180)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    assert [code for _, code in json.loads(run.stdout)] == [0] * (N // 500)
    # KafkaJS's consumer needs groups; kafka-python reads the bytes back.
    assert read_headered_with_kafka_python(rf3.bootstrap, topic, N) == expected(msgs)
    rf3.assert_replicas_identical(topic)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_headers(rf3: Rf3, tmp_path: Path, codec: str) -> None:
    """kcat takes one set of text headers per run (-H) and stamps its own timestamps."""
    topic = f"hkcat-{codec}"
    rf3.create(topic)
    msgs = [(k, v) for k, v, _, _ in headered_messages(topic, N)]
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(k + b"\t" + v + b"\n" for k, v in msgs))
    before = int(time.time() * 1000)
    produced = subprocess.run(
        ["kcat", "-b", rf3.bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec, "-X", "acks=all",
         "-X", "linger.ms=5", "-H", "h-text=kcat value", "-H", "h-empty=", "-l", str(src)],
        capture_output=True, timeout=120)
    assert produced.returncode == 0, produced.stderr.decode()[-2000:]
    after = int(time.time() * 1000)
    consumed = subprocess.run(
        ["kcat", "-b", rf3.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-f", "%o\t%k\t%s\t%h\t%T\n"], capture_output=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr.decode()[-2000:]
    lines = [line.split(b"\t") for line in consumed.stdout.split(b"\n")[:-1]]
    assert [(int(o), k, v) for o, k, v, _, _ in lines] == [(i, k, v) for i, (k, v) in enumerate(msgs)]
    assert {h for _, _, _, h, _ in lines} == {b"h-text=kcat value,h-empty="}
    assert all(before <= int(t) <= after for *_, t in lines)
    rf3.assert_replicas_identical(topic)
    if codec == "zstd":
        return  # zstd has no place in magic 0/1: old consumers get UNSUPPORTED_COMPRESSION_TYPE
    # The same records for kcat as a 0.10.1 client (no ApiVersions, Fetch below v4): down-converted.
    old = subprocess.run(
        ["kcat", "-b", rf3.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-X", "api.version.request=false", "-X", "broker.version.fallback=0.10.1", "-f", "%o\t%k\t%s\t%T\n"],
        capture_output=True, timeout=120)
    assert old.returncode == 0, old.stderr.decode()[-2000:]
    old_lines = [line.split(b"\t") for line in old.stdout.split(b"\n")[:-1]]
    assert [(int(o), k, v, t) for o, k, v, t in old_lines] == [(int(o), k, v, t) for o, k, v, _, t in lines]
