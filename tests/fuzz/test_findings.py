"""Defects the fuzz found, each replayed on its own from a minimal request built from its fuzz case.

Each test asserts Kafka's behaviour, failed on the broker as the fuzz found it, and passes since
its fix (issue 15: bounds, topic names, admin races, released connections, quiet shutdown). Each
names the fuzz case that found it.
"""

from __future__ import annotations

import asyncio
import shutil
import struct

import pytest

from broker.zk import layout as L
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.headers import decode_request_header, encode_request_header
from protocol.schema import request_codec
from tests.fuzz.runner import age_controller_epoch, answers, rss_bytes, socket_count, sockets_back, tracebacks
from tests.fuzz.seeds import load_seeds, retarget
from tests.support.topics import create_topic
from tests.support.wire import connect
from tests.support.zookeeper import zk_connect

pytestmark = pytest.mark.integration

RSS_LIMIT = 1 << 30


def _frame(key: ApiKey, version: int, body: dict, correlation_id: int = 1) -> bytes:
    data = encode_request_header(key, version, correlation_id, "fuzz-finding") + request_codec(key, version).encode(body)
    return struct.pack(">i", len(data)) + data


async def _forged_leader_and_isr(b, topic: str) -> dict:  # noqa: ANN001
    """LeaderAndIsr at the current version with the broker's real epochs (read from ZooKeeper):
    a forger who knows them gets past the KIP-380 checks, so the name checks must hold alone."""
    async with await connect(b) as conn:
        await create_topic(conn, "first")  # a controller has been elected and /controller_epoch exists
    async with zk_connect(b.zk_connect) as zk:
        controller_epoch = int((await zk.get(L.CONTROLLER_EPOCH))[0])
        broker_epoch = await zk.czxid(L.broker_path(b.broker_id))
    state = {"topic_name": topic, "partition_index": 0, "controller_epoch": controller_epoch, "leader": 0,
             "leader_epoch": 1, "isr": [0], "partition_epoch": 0, "replicas": [0]}
    body = {"controller_id": 0, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
            "topic_states": [{"topic_name": topic, "partition_states": [state]}],
            "live_leaders": [{"broker_id": 0, "host_name": "127.0.0.1", "port": b.port}]}
    async with await connect(b) as conn:
        return await conn.request(ApiKey.LEADER_AND_ISR, 2, body, 10)


async def _watched(b, aw):  # noqa: ANN001, ANN202
    """`aw`'s result, killing the broker and failing if its RSS passes RSS_LIMIT meanwhile
    (the machine is shared, and a broker building a huge assignment grows by gigabytes a second)."""
    task = asyncio.ensure_future(aw)
    while not task.done():
        await asyncio.wait({task}, timeout=0.1)
        if b.proc.poll() is None and rss_bytes(b.proc.pid) > RSS_LIMIT:
            b.kill()
            await asyncio.wait({task})
            pytest.fail("broker RSS passed 1 GiB; killed")
    return task.result()


@pytest.mark.parametrize("api", ["create_topics", "create_partitions"])
async def test_huge_partition_count_keeps_broker_answering(broker_factory, api: str) -> None:  # noqa: ANN001
    """Fuzz case `create_partitions-v3-tools int32@…=2147483647` (seed 15): a partition count of
    2^31-1 made the broker build the whole assignment on its event loop; it stopped answering
    anyone, the good client included, and refused new connections. Kafka answers such a request
    with an error (here: any error code) and keeps serving."""
    b = broker_factory(0)
    await create_topic(b, "small")
    if api == "create_topics":
        frame = _frame(ApiKey.CREATE_TOPICS, 4, {"topics": [
            {"name": "huge", "num_partitions": 0x7FFFFFFF, "replication_factor": 1, "assignments": [],
             "configs": []}], "timeout_ms": 1000})
    else:
        frame = _frame(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": "small", "count": 0x7FFFFFFF,
                                                                 "assignments": None}], "timeout_ms": 1000})
    reader, writer = await asyncio.open_connection("127.0.0.1", b.port)
    try:
        writer.write(frame)
        await writer.drain()
        await asyncio.sleep(0.5)
        assert await _watched(b, answers(b.port, timeout=5)), "broker stopped answering after a huge partition count"
        try:
            head = await _watched(b, asyncio.wait_for(reader.read(4), 10))
        except TimeoutError:
            pytest.fail("the request was not answered within 10 s")
        assert head, "the request was never answered (connection closed instead of an error code)"
    finally:
        writer.transport.abort()
    assert tracebacks(b.log_path.read_text()) == []


async def test_create_partitions_racing_delete_answers_with_error(broker_factory) -> None:  # noqa: ANN001
    """Fuzz seed 15, 3000 requests: CreatePartitions on a topic that a DeleteTopics removed between
    the handler's validation and its write let NoNodeError out of the handler: a traceback in the
    log (connection.failed) and the connection closed without an answer. Kafka answers
    UNKNOWN_TOPIC_OR_PARTITION (or INVALID_PARTITIONS) for a topic deleted under it."""
    b = broker_factory(0)
    closed: list[str] = []

    async def grow(name: str, stop: asyncio.Event) -> None:
        async with await connect(b) as conn:
            count = 2
            while not stop.is_set():
                try:
                    await conn.request(ApiKey.CREATE_PARTITIONS, 2, {"topics": [
                        {"name": name, "count": count, "assignments": None}], "timeout_ms": 0}, 10)
                except (ConnectionError, OSError) as e:
                    closed.append(f"{name}: {type(e).__name__}")
                    return
                count += 1

    async with await connect(b) as admin_conn:
        for i in range(10):
            name = f"race-{i}"
            await create_topic(admin_conn, name)
            stop = asyncio.Event()
            growers = [asyncio.create_task(grow(name, stop)) for _ in range(6)]
            await asyncio.sleep(0.2)
            await admin_conn.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": [name], "timeout_ms": 5000})
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*growers)
    assert tracebacks(b.log_path.read_text()) == []
    assert closed == [], "CreatePartitions was answered by closing the connection"


async def test_abandoned_long_poll_releases_its_socket(broker_factory) -> None:  # noqa: ANN001
    """Fuzz cases like `fetch-v3-confluent … int32@…=2147483647` (max_wait_ms mutated) followed by the
    client going away: the broker kept each socket (CLOSE-WAIT) for as long as the request's
    max_wait_ms, up to 24 days, so a client can exhaust the broker's file descriptors by
    connecting, long-polling and leaving. Kafka's selector closes a connection its peer closed
    (the parked fetch completes into nothing)."""
    b = broker_factory(0)
    await create_topic(b, "idle")
    assert b.proc is not None
    baseline = socket_count(b.proc.pid)
    body = {"replica_id": -1, "max_wait_ms": 0x7FFFFFFF, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": "idle", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 20}]}]}
    for _ in range(20):
        _, writer = await asyncio.open_connection("127.0.0.1", b.port)
        writer.write(_frame(ApiKey.FETCH, 3, body))
        await writer.drain()
        writer.close()
    assert await sockets_back(b.proc.pid, baseline, timeout=5) <= baseline


async def test_leader_and_isr_with_unusable_topic_name_answers_with_error(broker_factory) -> None:  # noqa: ANN001
    """Fuzz seed 15 (create APIs left out), `leader_and_isr-v0-… bitflip…`: a topic name holding a NUL
    byte reached mkdir, whose ValueError went up as a traceback (connection.failed) and closed
    the connection. The broker must answer (an error for that partition, e.g.
    KAFKA_STORAGE_ERROR or INVALID_TOPIC_EXCEPTION) and log no traceback."""
    b = broker_factory(0)
    resp = await _forged_leader_and_isr(b, "bad\x00name")
    assert resp["partition_errors"][0]["error_code"] != 0
    assert tracebacks(b.log_path.read_text()) == []


async def test_shutdown_with_a_parked_fetch_logs_no_traceback(broker_factory) -> None:  # noqa: ANN001
    """Seen at the end of every fuzz run: fetches parked for their max_wait_ms (mutated large) were
    cancelled by SIGTERM and asyncio printed "Exception in callback ... CancelledError" with a
    traceback for each. A clean shutdown cancels them quietly (and exits 0)."""
    b = broker_factory(0)
    await create_topic(b, "idle")
    body = {"replica_id": -1, "max_wait_ms": 60_000, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": "idle", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 20}]}]}
    _, writer = await asyncio.open_connection("127.0.0.1", b.port)
    writer.write(_frame(ApiKey.FETCH, 3, body))
    await writer.drain()
    await asyncio.sleep(0.5)
    assert await asyncio.to_thread(b.stop) == 0
    writer.transport.abort()
    assert tracebacks(b.log_path.read_text()) == []


async def test_leader_and_isr_topic_name_cannot_leave_log_dirs(broker_factory) -> None:  # noqa: ANN001
    """From the fuzz's directory check (a bit flip turns '-' into '/' in `fuzz-seed`): LeaderAndIsr
    takes its topic names as they come, and the partition directory is log.dirs/<topic>-<n>, so
    a name with '..' and '/' puts a partition directory outside log.dirs. Kafka refuses such
    names (Topic.validate: only [a-zA-Z0-9._-]); the broker must answer with an error and
    create nothing outside log.dirs."""
    b = broker_factory(0)
    resp = await _forged_leader_and_isr(b, "../../escaped")
    escaped = b.log_dir.parent.parent / "escaped-0"
    created = escaped.exists()
    shutil.rmtree(escaped, ignore_errors=True)  # pytest's temporary tree, outside the test's own dir
    assert not created, f"LeaderAndIsr created {escaped}"
    assert resp["partition_errors"][0]["error_code"] != 0


async def test_captured_epochs_are_stale_in_an_aged_cluster(broker_factory) -> None:  # noqa: ANN001
    """Fuzz case `update_metadata-v5-broker bitflip5` (seed 15, request 99,909 of 100,000): five
    bit flips turned the listener of the one live broker into 'PLAHJTMXT' and left the epochs
    alone. A freshly started broker has the very epochs the seeds were captured with (controller
    epoch 1, broker epoch 29), so the request was the controller's as far as KIP-380 can tell and
    was obeyed, as Kafka without ACLs obeys it; Metadata then listed no broker. The harness ages
    the cluster before fuzzing (tests/fuzz/runner.age_controller_epoch); then this request and
    every captured inter-broker seed is refused, and the cache keeps the broker."""
    b = broker_factory(0)
    await create_topic(b, "first")
    epoch = await age_controller_epoch(b.zk_connect, b.port, seed=15)
    assert epoch > 100_000
    finding = {"controller_id": 0, "controller_epoch": 1, "broker_epoch": 29, "topic_states": [
        {"topic_name": "cap-kcat", "partition_states": [
            {"partition_index": 0, "controller_epoch": 1, "leader": 0, "leader_epoch": 0, "isr": [0],
             "zk_version": 0, "replicas": [0], "offline_replicas": []}]}],
        "live_brokers": [{"id": 0, "endpoints": [{"port": b.port, "host": "127.0.0.1", "listener": "PLAHJTMXT",
                                                  "security_protocol": 0}], "rack": None}]}
    async with await connect(b) as conn:
        resp = await conn.request(ApiKey.UPDATE_METADATA, 5, finding)
        # Which refusal depends on whether the broker's own epoch (its registration's czxid)
        # still equals the captured 29: the broker creates more znodes at start-up since the ACL
        # paths, so KIP-380's check (Kafka's first) answers before the controller epoch's.
        assert resp["error_code"] in (ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.STALE_BROKER_EPOCH)
        for seed in load_seeds():
            if seed.api_key in (ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA):
                frame = retarget(seed, b.port).frame
                _, offset = decode_request_header(frame)
                body = request_codec(seed.api_key, seed.api_version).decode(frame[offset:])
                resp = await conn.request(ApiKey(seed.api_key), seed.api_version, body)
                codes = {resp.get("error_code", 0)} | {p["error_code"] for p in resp.get("partition_errors", [])}
                assert codes & {ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.STALE_BROKER_EPOCH}, (seed.name, resp)
    assert await answers(b.port), "Metadata lists no broker after the replay"
