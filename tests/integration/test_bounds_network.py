"""Issue 15, bounds on connections (broker.network.ConnectionLimits) with Kafka's keys:
`max.connections`, `max.connections.per.ip` (+ overrides), `connections.max.idle.ms` and
`queued.max.request.bytes`. Real ZooKeeper, a real broker process, raw sockets."""

from __future__ import annotations

import asyncio
import struct
import time

from protocol.api_keys import ApiKey
from protocol.headers import encode_request_header
from protocol.records.message_set import build_message_set
from protocol.schema import request_codec
from tests.support.brokers import start_together
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect

_SIZE = struct.Struct(">i")


def request_frame(api_key: ApiKey, version: int, body: dict, correlation_id: int = 1) -> bytes:
    payload = encode_request_header(api_key, version, correlation_id, "bounds") + \
        request_codec(api_key, version).encode(body)
    return _SIZE.pack(len(payload)) + payload


API_VERSIONS = request_frame(ApiKey.API_VERSIONS, 0, {})
DEADLINE_S = 30.0  # for an answer or a close that takes milliseconds on a quiet machine


async def open_from(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def slot_freed(port: int, source: str = "127.0.0.1", timeout: float = 10) -> bool:
    """True once a new connection from `source` is admitted and answers: the broker frees a closed
    connection's slot when it sees the close, which a loaded machine may take a moment to do."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conn = await open_from(port, source)
        try:
            if await answers(conn):
                return True
        finally:
            conn[1].close()
        await asyncio.sleep(0.1)
    return False


async def answers(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], timeout: float = DEADLINE_S) -> bool:
    """True when the connection answers an ApiVersions request; False when the broker closed it.
    (A refusal is a close, seen at once: the deadline is only for a loaded machine's answer.)"""
    reader, writer = conn
    try:
        writer.write(API_VERSIONS)
        await writer.drain()
        (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), timeout))
        await asyncio.wait_for(reader.readexactly(size), timeout)
        return True
    except (asyncio.IncompleteReadError, ConnectionError):
        return False


async def closed_within(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], timeout: float) -> bool:
    try:
        return await asyncio.wait_for(conn[0].read(1), timeout) == b""
    except ConnectionError:
        return True


def vm_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


async def test_max_connections_per_ip_override(broker_factory) -> None:  # noqa: ANN001
    # 127.0.0.2 is another loopback source address: the broker's own connections (from 127.0.0.1)
    # do not count against its limit.
    b = broker_factory(0, max_connections_per_ip_overrides="127.0.0.2:2")
    first = [await open_from(b.port, "127.0.0.2") for _ in range(2)]
    assert all([await answers(c) for c in first])
    extra = await open_from(b.port, "127.0.0.2")
    assert await closed_within(extra, DEADLINE_S)  # closed, before any request
    assert all([await answers(c) for c in first])  # the others are unaffected
    assert await answers(await open_from(b.port, "127.0.0.1"))  # another address has the default
    first[0][1].close()
    assert await slot_freed(b.port, "127.0.0.2")  # a slot freed is a slot


async def test_max_connections(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory(0, max_connections="6")
    # The broker's own controller channel holds a connection to it, opened to send the first
    # UpdateMetadata (Metadata lists the broker from then on). Waited for before counting: while
    # it is still retrying (a loaded machine), it can take the slot our close below frees, and
    # keep it, so that no connection of ours is admitted again.
    await wait_for("the controller's connection to its own broker", lambda: _lists_itself(b), 30)
    ours = []
    for _ in range(7):
        c = await open_from(b.port)
        if not await answers(c):
            break
        ours.append(c)
    else:
        raise AssertionError("a seventh connection was accepted with max.connections=6")
    assert 4 <= len(ours) <= 6
    assert all([await answers(c) for c in ours])
    ours[0][1].close()
    assert await slot_freed(b.port)


async def _lists_itself(b) -> bool:  # noqa: ANN001
    async with await connect(b) as conn:
        md = await conn.request(ApiKey.METADATA, 1, {"topics": []})
    return any(broker["node_id"] == b.broker_id for broker in md["brokers"])


async def test_connections_max_idle_ms(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory(0, connections_max_idle_ms="1000")
    idle = await open_from(b.port)
    busy = await open_from(b.port)
    assert await answers(idle) and await answers(busy)
    t0 = time.monotonic()
    closed = asyncio.create_task(closed_within(idle, DEADLINE_S))
    while not closed.done():
        assert await answers(busy)  # a connection in use is kept
        await asyncio.sleep(0.2)
    assert closed.result()
    assert time.monotonic() - t0 >= 0.9  # not before its idle time (how late is the machine's load)
    for _ in range(10):  # 2 s more of traffic: still open
        assert await answers(busy)
        await asyncio.sleep(0.2)


async def test_queued_max_request_bytes_bounds_memory_without_deadlock(broker_factory) -> None:  # noqa: ANN001
    b = broker_factory(0, queued_max_request_bytes=str(4 << 20), message_max_bytes=str(20 << 20))
    assert b.proc is not None
    async with await connect(b) as conn:
        await create_topic(conn, "queued", 4)
    value = b"q" * (16 << 20)
    frames = []
    for p in range(4):
        records = build_message_set([(None, value, 1_700_000_000_000)], magic=1)
        frames.append(request_frame(ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 30000, "topic_data": [
            {"name": "queued", "partition_data": [{"index": p, "records": records}]}]}))
    del value, records
    hwm_before = vm_kb(b.proc.pid, "VmHWM")

    async def produce_twice(frame: bytes) -> None:
        reader, writer = await open_from(b.port)
        for _ in range(2):
            writer.write(frame)
            await writer.drain()
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            body = await reader.readexactly(size)
            # correlation id, [topics: name, [partition, error_code, ...]]: the error code is 0
            name_len = struct.unpack_from(">h", body, 8)[0]
            (error_code,) = struct.unpack_from(">h", body, 8 + 2 + name_len + 4 + 4)
            assert error_code == 0
        writer.close()

    await asyncio.wait_for(asyncio.gather(*(produce_twice(frames[i % 4]) for i in range(16))), 120)
    growth_mb = (vm_kb(b.proc.pid, "VmHWM") - hwm_before) >> 10
    # 16 requests of 16 MB at once would hold 256 MB; bounded, about one at a time is read.
    assert growth_mb < 160, growth_mb
    async with await connect(b) as conn:
        lo = await conn.request(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [
            {"name": "queued", "partitions": [{"partition_index": p, "timestamp": -1} for p in range(4)]}]})
        assert sum(p["offset"] for p in lo["topics"][0]["partitions"]) == 32


async def test_queued_max_request_bytes_acks_all_with_a_follower(broker_factory) -> None:  # noqa: ANN001
    # Produces waiting for their follower must not keep the follower's fetches from being read.
    brokers = [broker_factory(i, start=False, queued_max_request_bytes=str(1 << 20), message_max_bytes=str(4 << 20),
                              replica_fetch_wait_max_ms="100") for i in range(2)]
    start_together(brokers)
    leader = brokers[0]
    async with await connect(leader) as conn:
        await create_topic(conn, "acks-all", assignment={0: [0, 1]})
    records = build_message_set([(None, b"a" * (2 << 20), 1_700_000_000_000)], magic=1)
    frame = request_frame(ApiKey.PRODUCE, 2, {"acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": "acks-all", "partition_data": [{"index": 0, "records": records}]}]})

    async def produce_all() -> list[int]:
        reader, writer = await open_from(leader.port)
        codes = []
        for _ in range(2):
            writer.write(frame)
            await writer.drain()
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            body = await reader.readexactly(size)
            name_len = struct.unpack_from(">h", body, 8)[0]
            codes.append(struct.unpack_from(">h", body, 8 + 2 + name_len + 4 + 4)[0])
        writer.close()
        return codes

    t0 = time.monotonic()
    results = await asyncio.wait_for(asyncio.gather(*(produce_all() for _ in range(6))), 60)
    assert all(code == 0 for codes in results for code in codes), results
    assert time.monotonic() - t0 < 10  # none waited out its 10 s timeout
