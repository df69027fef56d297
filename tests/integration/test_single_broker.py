"""One real broker process and a real ZooKeeper, driven over the wire by the project's own client."""

from __future__ import annotations

import asyncio
import functools
import shutil
import socket
import struct
import time

import pytest

from broker.apis import ALL_APIS
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records.message_set import build_message_set, decode_records
from tests.support.tools import topics
from tests.support.topics import create_topic, wait_leaders
from tests.support.wire import connect, fetch, produce


async def test_produce_fetch_round_trip_all_acks(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "rt", 2)
        sent = []
        for acks in (1, -1, 0):
            batch = [(f"k{acks}-{i}".encode(), f"v{acks}-{i}".encode() * 3) for i in range(100)]
            r = await produce(conn, "rt", 0, batch, acks=acks)
            if acks != 0:
                assert r["error_code"] == 0
                assert r["base_offset"] == len(sent)
            sent += batch
        # acks=0 has no response; the next request on the same connection is ordered after it.
        lo = await conn.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": "rt", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        assert lo["topics"][0]["partitions"][0]["offset"] == 300
        got = await fetch(conn, [("rt", 0, 0, 10 << 20)])
        recs = decode_records(got[("rt", 0)]["records"])
        assert [(r.key, r.value) for r in recs] == sent
        assert [r.offset for r in recs] == list(range(300))
        assert got[("rt", 0)]["high_watermark"] == 300


async def test_list_offsets_v0_and_v1(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "lo")
        await produce(conn, "lo", 0, [(b"k", b"v")] * 7)
        v0 = await conn.request(ApiKey.LIST_OFFSETS, 0, {"replica_id": -1, "topics": [{"name": "lo", "partitions": [
            {"partition_index": 0, "timestamp": -2, "max_num_offsets": 1}]}]})
        assert v0["topics"][0]["partitions"][0]["old_style_offsets"] == [0]
        v1 = await conn.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [{"name": "lo", "partitions": [
            {"partition_index": 0, "timestamp": -1}, {"partition_index": 5, "timestamp": -1}]}]})
        ps = v1["topics"][0]["partitions"]
        assert ps[0]["offset"] == 7
        assert ps[1]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_kip74_response_max_bytes(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "k74", 3)
        big = b"x" * 5000
        for p in range(3):
            await produce(conn, "k74", p, [(b"a", big), (b"b", big)])
        # v3: the first batch of the first non-empty partition comes back whole (here both
        # records, produced as one RecordBatch v2 and down-converted) although it exceeds both
        # limits; later partitions whose first batch does not fit get nothing.
        got = await fetch(conn, [("k74", 0, 0, 1000), ("k74", 1, 0, 1000), ("k74", 2, 0, 1000)],
                          version=3, max_bytes=1000)
        first = decode_records(got[("k74", 0)]["records"])
        assert [r.value for r in first] == [big, big]
        assert got[("k74", 1)]["records"] == b"" and got[("k74", 1)]["error_code"] == 0
        assert got[("k74", 2)]["records"] == b""
        # A roomy response limit is shared in request order.
        got = await fetch(conn, [("k74", 2, 0, 20000), ("k74", 0, 0, 20000)], version=3, max_bytes=12000)
        assert len(decode_records(got[("k74", 2)]["records"])) == 2
        assert got[("k74", 0)]["records"] == b""  # 12000 - ~10060 left: less than one message
        # v2: a partial message is returned as is (clients tolerate it).
        got = await fetch(conn, [("k74", 0, 0, 1000)], version=2)
        assert len(got[("k74", 0)]["records"]) == 1000
        assert decode_records(got[("k74", 0)]["records"]) == []


async def test_long_poll_woken_by_append(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as c1, await connect(broker) as c2:
        await create_topic(c1, "lp")
        start = time.monotonic()
        waiter = asyncio.create_task(fetch(c1, [("lp", 0, 0, 1 << 20)], max_wait_ms=5000, min_bytes=1))
        await asyncio.sleep(0.3)
        assert not waiter.done()
        await produce(c2, "lp", 0, [(b"k", b"wake")])
        got = await waiter
        elapsed = time.monotonic() - start
        assert [r.value for r in decode_records(got[("lp", 0)]["records"])] == [b"wake"]
        assert elapsed < 4.5  # woken by the append, not by max_wait
        # With nothing to wait for, max_wait bounds the answer.
        t0 = time.monotonic()
        got = await fetch(c1, [("lp", 0, 1, 1 << 20)], max_wait_ms=300, min_bytes=1)
        assert got[("lp", 0)]["records"] == b""
        assert time.monotonic() - t0 >= 0.25


async def test_not_enough_replicas(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "nr", configs={"min.insync.replicas": "2"})
        r = await produce(conn, "nr", 0, [(b"k", b"v")], acks=-1)
        assert r["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
        r = await produce(conn, "nr", 0, [(b"k", b"v")], acks=1)
        assert r["error_code"] == 0 and r["base_offset"] == 0


async def test_bad_crc_appends_nothing(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "crc")
        data = bytearray(build_message_set([(b"k", b"value", 0)], magic=1))
        data[12] ^= 0xFF  # first CRC byte
        body = {"acks": 1, "timeout_ms": 1000,
                "topic_data": [{"name": "crc", "partition_data": [{"index": 0, "records": bytes(data)}]}]}
        r = (await conn.request(ApiKey.PRODUCE, 2, body))["responses"][0]["partition_responses"][0]
        assert r["error_code"] == ErrorCode.CORRUPT_MESSAGE
        ok = await produce(conn, "crc", 0, [(b"k", b"good")])
        assert ok["error_code"] == 0 and ok["base_offset"] == 0


async def test_invalid_topic_names(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        bad = "bad/name"
        md = await conn.request(ApiKey.METADATA, 1, {"topics": [{"name": bad}, {"name": "x" * 250}]})
        assert [t["error_code"] for t in md["topics"]] == [ErrorCode.INVALID_TOPIC_EXCEPTION] * 2
        resp = await conn.request(ApiKey.CREATE_TOPICS, 1, {"topics": [
            {"name": bad, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "fine", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {"name": "zero", "num_partitions": 0, "replication_factor": 1, "assignments": [], "configs": []},
        ], "timeout_ms": 1000})
        codes = {t["name"]: t["error_code"] for t in resp["topics"]}
        assert codes == {bad: ErrorCode.INVALID_TOPIC_EXCEPTION, "fine": 0, "zero": ErrorCode.INVALID_PARTITIONS}


async def test_offsets_out_of_range(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "oor")
        await produce(conn, "oor", 0, [(b"k", b"v")] * 3)
        got = await fetch(conn, [("oor", 0, -1, 1024)])
        assert got[("oor", 0)]["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        got = await fetch(conn, [("oor", 0, 4, 1024)])
        assert got[("oor", 0)]["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        got = await fetch(conn, [("oor", 0, 3, 1024)])
        assert got[("oor", 0)]["error_code"] == 0 and got[("oor", 0)]["records"] == b""
        got = await fetch(conn, [("nope", 0, 0, 1024)])
        assert got[("nope", 0)]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _raw(broker) -> socket.socket:  # noqa: ANN001
    host, port = broker.bootstrap.split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    return s


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return True


def _api_versions_frame(version: int, correlation_id: int = 7) -> bytes:
    body = struct.pack(">hhih", ApiKey.API_VERSIONS, version, correlation_id, 1) + b"t"
    return struct.pack(">i", len(body)) + body


async def test_bad_frames_cost_only_their_connection(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as healthy:
        await create_topic(healthy, "bf")
        cases = {
            "oversize": struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 8,
            "negative": struct.pack(">i", -5),
            "garbage_header": struct.pack(">i", 3) + b"\x01\x02\x03",
            "unknown_api_key": struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, 0),
            "unsupported_metadata": struct.pack(">i", 10) + struct.pack(">hhih", ApiKey.METADATA, 99, 1, 0),
            "malformed_body": struct.pack(">i", 14) + struct.pack(">hhih", ApiKey.METADATA, 1, 1, 0) + b"\x7f\xff\xff\xff",
        }
        for name, payload in cases.items():
            s = _raw(broker)
            s.sendall(payload)
            assert _closed(s), name
            s.close()
        # A client that disconnects mid-request.
        s = _raw(broker)
        s.sendall(struct.pack(">ihh", 100, ApiKey.METADATA, 1))
        s.close()
        r = await produce(healthy, "bf", 0, [(b"k", b"still serving")])
        assert r["error_code"] == 0
    assert "connection.bad_frame_size" in broker.log()


async def test_unsupported_api_versions_keeps_connection(broker) -> None:  # noqa: ANN001
    s = _raw(broker)
    s.sendall(_api_versions_frame(99))
    size = struct.unpack(">i", s.recv(4))[0]
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    corr, err, n = struct.unpack_from(">ihi", data)
    assert (corr, err) == (7, ErrorCode.UNSUPPORTED_VERSION)
    entries = [struct.unpack_from(">hhh", data, 10 + 6 * i) for i in range(n)]
    assert (ApiKey.API_VERSIONS, 0, 3) in entries
    s.sendall(_api_versions_frame(0, 8))  # the same connection still answers
    size = struct.unpack(">i", s.recv(4))[0]
    assert size > 6
    s.close()


async def test_sigterm_exits_zero_and_data_survives(broker) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        await create_topic(conn, "st")
        await produce(conn, "st", 0, [(b"k", str(i).encode()) for i in range(50)])
    assert broker.stop() == 0
    assert "broker.stopped" in broker.log()
    broker.start()
    async with await connect(broker) as conn:
        await wait_leaders(conn, "st", 1)
        got = await fetch(conn, [("st", 0, 0, 1 << 20)])
        assert [r.value for r in decode_records(got[("st", 0)]["records"])] == [str(i).encode() for i in range(50)]


async def test_sigterm_exits_one_when_a_log_cannot_be_closed(broker) -> None:  # noqa: ANN001
    """A failed shutdown exits 1 (Kafka 2.8's shutdown hook halts with 1), saying which phase
    failed: here the partition's directory is removed under the running broker, so its close
    cannot write the indexes or the producer snapshot, and no clean-shutdown marker is left.
    The second produce starts past index.interval.bytes (an index point), so the close has index
    files to make: one whose log says all they would makes none (broker.log.segment) and, like
    Kafka's, does not notice its directory is gone."""
    async with await connect(broker) as conn:
        await create_topic(conn, "gone")
        for _ in range(2):
            await produce(conn, "gone", 0, [(b"k", b"v" * 5000)])
    shutil.rmtree(broker.log_dir / "gone-0")
    assert broker.stop() == 1
    out = broker.log()
    assert "broker.stop_failed" in out and "broker.stopped" in out
    assert not (broker.log_dir / ".kafka_cleanshutdown").exists()


def test_duplicate_broker_id_refused(broker, broker_factory) -> None:  # noqa: ANN001
    twin = broker_factory(0, start=False)
    twin.start(wait=False)
    assert twin.proc is not None
    assert twin.proc.wait(30) == 1
    assert "already registered" in twin.log()


def test_topics_command(broker) -> None:  # noqa: ANN001
    run = functools.partial(topics, broker.bootstrap, timeout=60)

    r = run("--create", "--topic", "cli", "--partitions", "3", "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    r = run("--create", "--topic", "cli", "--partitions", "3", "--replication-factor", "1")
    assert r.returncode == 1 and "TOPIC_ALREADY_EXISTS" in r.stderr
    r = run("--alter", "--topic", "cli", "--partitions", "5")
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 10
    while True:
        r = run("--describe", "--topic", "cli")
        if r.stdout.count("Leader: 0") == 5 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "PartitionCount: 5" in r.stdout and r.stdout.count("Leader: 0") == 5, r.stdout
    assert "cli" in run("--list").stdout.split()
    assert run("--delete", "--topic", "cli").returncode == 0
    deadline = time.monotonic() + 10
    while "cli" in run("--list").stdout.split() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "cli" not in run("--list").stdout.split()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_api_versions_lists_registry(broker, version: int) -> None:  # noqa: ANN001
    async with await connect(broker) as conn:
        resp = await conn.request(ApiKey.API_VERSIONS, version,
                                  {"client_software_name": "t", "client_software_version": "1"})
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
        assert keys[ApiKey.PRODUCE] == (0, 9) and keys[ApiKey.FETCH] == (0, 12) and keys[ApiKey.METADATA] == (0, 11)
        # what the broker process serves is its registry, and the admin half is Kafka 2.8's
        assert keys == {api.key: api.versions for api in ALL_APIS}
        assert {k: keys[k] for k in (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS,
                                     ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS,
                                     ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DESCRIBE_CLUSTER)} == {
            ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 11), ApiKey.CREATE_TOPICS: (0, 7),
            ApiKey.DELETE_TOPICS: (0, 6), ApiKey.CREATE_PARTITIONS: (0, 3), ApiKey.DESCRIBE_CONFIGS: (0, 4),
            ApiKey.ALTER_CONFIGS: (0, 2), ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1), ApiKey.DESCRIBE_CLUSTER: (0, 0)}
        assert all(lo == 0 for lo, _ in keys.values())
