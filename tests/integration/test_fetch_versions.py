"""Fetch 0-12 on a real broker over the wire: stored RecordBatch v2 served as is from v4, down-converted
for v0-3 consumers, Kafka's v4+ fields, declined sessions, leader epochs; on three brokers, followers
replicate v2 batches (headers and all) byte for byte over Fetch v3.

Batches go in as aiokafka sends them (RecordBatch v2 inside Produce v2, stored as sent), so the
down-conversion and replication cases run whatever table is served; the Fetch 4-12 cases skip
until Fetch 4-12 is listed (with Produce 3-9, once InitProducerId is served)."""

from __future__ import annotations

import struct

from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records.records import decode_records
from tests.support.cluster import wait_identical_replicas
from tests.support.topics import create_topic
from tests.support.wire import connect

T0 = 1_700_000_000_000


def v2_batch(n: int, codec: int = 0, start: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(start, start + n):
        b.append(i - start, timestamp=T0 + i, key=b"k%d" % i, value=value(i), headers=[("h", b"x%d" % i)])
    data = bytes(b.build())
    assert data[22] & 0x07 == codec, "kafka-python sent it uncompressed"
    return data


def value(i: int) -> bytes:
    return b"v%d-" % i + b"x" * 100  # compressible, so kafka-python keeps the codec


async def produce_v2(conn, topic: str, batch: bytes, acks: int = 1) -> dict:  # noqa: ANN001
    body = {"acks": acks, "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    resp = await conn.request(ApiKey.PRODUCE, 2, body)  # as aiokafka sends them
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 0, part
    return part


def fetch_body(topic: str, offset: int = 0, pmax: int = 1 << 20, **extra: int) -> dict:
    part = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": pmax,
            "current_leader_epoch": extra.pop("current_leader_epoch", -1)}
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 10 << 20,
            "topics": [{"topic": topic, "partitions": [part]}], **extra}


def magics(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos + 17 <= len(data):
        out.append(data[pos + 16])
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


async def test_v4_to_v12_serve_stored_batches_and_kafkas_fields(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "fv")
        await produce_v2(conn, "fv", v2_batch(5))
        await produce_v2(conn, "fv", v2_batch(3, codec=1, start=5))
        stored = None
        for version in range(4, 13):
            for isolation in (0, 1):
                resp = await conn.request(ApiKey.FETCH, version, fetch_body("fv", isolation_level=isolation))
                p = resp["responses"][0]["partitions"][0]
                assert (p["error_code"], p["high_watermark"], p["last_stable_offset"]) == (0, 8, 8), (version, p)
                if version >= 5:
                    assert p["log_start_offset"] == 0
                assert p["aborted_transactions"] == ([] if isolation else None)
                if version >= 7:
                    assert (resp["error_code"], resp["session_id"]) == (0, 0)
                if version >= 11:
                    assert p["preferred_read_replica"] == -1
                assert magics(p["records"]) == [2, 2]
                stored = stored or p["records"]
                assert p["records"] == stored  # the log's bytes, whatever the version
        got = decode_records(stored)
        assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == [
            (i, T0 + i, b"k%d" % i, value(i)) for i in range(8)]


async def test_old_fetch_versions_get_down_converted_records(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "fdc")
        await produce_v2(conn, "fdc", v2_batch(4))
        await produce_v2(conn, "fdc", v2_batch(4, codec=1, start=4))
        for version, magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
            resp = await conn.request(ApiKey.FETCH, version, fetch_body("fdc", offset=2))
            data = resp["responses"][0]["partitions"][0]["records"]
            # Uncompressed: one message per record from the fetch offset; compressed: one wrapper.
            assert magics(data) == [magic] * 3, (version, magics(data))
            got = decode_records(data)
            assert [(r.offset, r.key, r.value) for r in got] == [(i, b"k%d" % i, value(i)) for i in range(2, 8)]
            assert [r.timestamp for r in got] == ([-1] * 6 if magic == 0 else [T0 + i for i in range(2, 8)])


async def test_sessions_are_declined_and_leader_epochs_checked(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "fs")
        await produce_v2(conn, "fs", v2_batch(2))
        for version in (7, 11, 12):
            # A new session (id 0, epoch 0) gets a full answer and session id 0: none is created.
            resp = await conn.request(ApiKey.FETCH, version, fetch_body("fs", session_id=0, session_epoch=0))
            assert resp["session_id"] == 0 and resp["responses"][0]["partitions"][0]["records"]
            # An incremental fetch names a session this broker never handed out.
            resp = await conn.request(ApiKey.FETCH, version, fetch_body("fs", session_id=5, session_epoch=1))
            assert (resp["error_code"], resp["session_id"], resp["responses"]) == (
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        resp = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": "fs"}]})
        assert resp["topics"][0]["error_code"] == 0
        for version in (9, 12):
            ok = await conn.request(ApiKey.FETCH, version, fetch_body("fs", current_leader_epoch=-1))
            assert ok["responses"][0]["partitions"][0]["error_code"] == 0
            ahead = await conn.request(ApiKey.FETCH, version, fetch_body("fs", current_leader_epoch=1000))
            p = ahead["responses"][0]["partitions"][0]
            assert (p["error_code"], p["high_watermark"], p["records"]) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, b"")


async def test_followers_replicate_v2_batches_as_stored(cluster) -> None:  # noqa: ANN001
    await cluster.create_topic("frep", 1, 3)
    state = await cluster.wait_isr("frep", 0, {0, 1, 2})
    leader = cluster.by_id(state["leader"])
    async with await connect(leader) as conn:
        for i in range(0, 40, 4):
            await produce_v2(conn, "frep", v2_batch(4, codec=(i // 4) % 4, start=i), acks=-1)
    blob = await wait_identical_replicas(cluster, "frep", 0, [0, 1, 2])
    assert set(magics(blob)) == {2}
    got = decode_records(blob)
    assert [(r.offset, r.key, r.value) for r in got] == [(i, b"k%d" % i, value(i)) for i in range(40)]
    # Headers and timestamps travelled too (kafka-python reads them; decode_records does not).
    mr, headers = MemoryRecords(blob), []
    while (batch := mr.next_batch()) is not None:
        headers.extend((r.offset, r.timestamp, list(r.headers)) for r in batch)
    assert headers == [(i, T0 + i, [("h", b"x%d" % i)]) for i in range(40)]


async def test_a_new_leader_fences_the_old_leader_epoch(cluster) -> None:  # noqa: ANN001
    await cluster.create_topic("fence", 1, 3)
    state = await cluster.wait_isr("fence", 0, {0, 1, 2})
    leader = cluster.by_id(state["leader"])
    # A new leader fences a fetch that names the old leader epoch (Fetch v9+'s current_leader_epoch).
    old_epoch = state["leader_epoch"]
    leader.kill()

    async def new_leader() -> dict | None:
        st = await cluster.state("fence", 0)
        return st if st["leader"] not in (-1, leader.broker_id) and st["leader_epoch"] > old_epoch else None
    state = await cluster.wait_for("a new leader of fence-0", new_leader)
    async with await connect(cluster.by_id(state["leader"])) as conn:
        async def answer(epoch: int) -> int:
            resp = await conn.request(ApiKey.FETCH, 11, fetch_body("fence", current_leader_epoch=epoch))
            return resp["responses"][0]["partitions"][0]["error_code"]
        async def served() -> bool:
            return await answer(state["leader_epoch"]) == 0
        await cluster.wait_for("the new leader serving its epoch", served)
        assert await answer(old_epoch) == ErrorCode.FENCED_LEADER_EPOCH
        assert await answer(state["leader_epoch"] + 1) == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_kip74_limits_apply_to_down_converted_sizes(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "fk74", 2)
        batch = v2_batch(10)
        for p in (0, 1):
            body = {"acks": 1, "timeout_ms": 10_000,
                    "topic_data": [{"name": "fk74", "partition_data": [{"index": p, "records": batch}]}]}
            resp = await conn.request(ApiKey.PRODUCE, 2, body)
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        stored = len(batch)
        message = 12 + 4 + 1 + 1 + 8 + 4 + 2 + 4 + len(value(0))  # a magic-1 entry of k0/value(0)
        limit = stored + 20  # the stored batch fits; its ten converted messages (~1.4 KB) do not
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "topics": [
            {"topic": "fk74", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": limit},
                                             {"partition": 1, "fetch_offset": 0, "partition_max_bytes": limit}]}]}
        resp = await conn.request(ApiKey.FETCH, 3, body)
        first, second = (p["records"] for p in resp["responses"][0]["partitions"])
        # The first partition with data may exceed its limit by the first stored batch, converted whole.
        assert len(decode_records(first)) == 10 and len(first) > limit
        # Later partitions get the whole converted messages that fit, no more.
        got = decode_records(second)
        assert len(second) <= limit and len(second) + message > limit
        assert [(r.offset, r.value) for r in got] == [(i, value(i)) for i in range(len(got))]
        assert magics(second) == [1] * len(got)


async def test_zstd_reaches_only_consumers_that_know_it(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "fz", configs={"compression.type": "zstd"})
        await create_topic(conn, "fzp")  # compression.type producer: the batch decides
        for topic in ("fz", "fzp"):
            body = {"transactional_id": None, "acks": 1, "timeout_ms": 10_000,
                    "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": v2_batch(5, codec=4)}]}]}
            resp = await conn.request(ApiKey.PRODUCE, 7, body)
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0

        async def answer(topic: str, version: int) -> dict:
            resp = await conn.request(ApiKey.FETCH, version, fetch_body(topic))
            return resp["responses"][0]["partitions"][0]
        for version in (10, 12):
            for topic in ("fz", "fzp"):
                p = await answer(topic, version)
                assert p["error_code"] == 0 and [r.offset for r in decode_records(p["records"])] == list(range(5))
        # Kafka refuses a zstd topic to consumers below Fetch v10, and zstd cannot be down-converted.
        for version in (3, 4, 9):
            p = await answer("fz", version)
            assert (p["error_code"], p["records"]) == (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, b""), version
        assert (await answer("fzp", 3))["error_code"] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert magics((await answer("fzp", 9))["records"]) == [2]
