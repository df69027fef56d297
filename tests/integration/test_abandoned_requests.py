"""Issue 15.6: requests whose client disconnected are released at once.

Long-poll Fetches (max_wait_ms 2^31-1, min_bytes out of reach) on a topic holding a megabyte,
each asking for all of it, are abandoned by their clients; within a few seconds the broker
holds none of their sockets in CLOSE-WAIT, its memory is back near where it was, and it
serves a new client (each checked as a condition with a generous deadline, for a loaded machine). The same for acks=all produces waiting on a follower that is gone, and
for produce responses held for their client's quota (KIP-13), whose sockets are not being read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.headers import encode_request_header
from protocol.records.message_set import build_message_set
from protocol.schema import request_codec
from tests.support.brokers import BrokerProcess
from tests.support.metrics import metric
from tests.support.tools import configs
from tests.support.topics import create_topic
from tests.support.waiting import wait_for
from tests.support.wire import connect, fetch, produce

TCP_ESTABLISHED = "01"
TCP_CLOSE_WAIT = "08"
DEADLINE_S = 60  # for what happens within a second or two on a quiet machine
FOREVER_MS = 2**31 - 1
MB = 1 << 20


def close_wait_sockets(pid: int, port: int) -> int:
    """The broker's listener-side sockets in CLOSE-WAIT (the peer closed, the broker has not)."""
    count = 0
    for table in ("tcp", "tcp6"):  # the listener may be dual-stack: IPv4 peers then show in tcp6
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == TCP_CLOSE_WAIT:
                count += 1
    return count


def read_whole(pid: int, port: int, connections: int) -> bool:
    """The broker has accepted `connections` on `port` and read every byte sent on them
    (rx_queue 0 in /proc/net/tcp: nothing left in the socket for the broker to read)."""
    established = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == TCP_ESTABLISHED:
                if int(fields[4].split(":")[1], 16):
                    return False
                established += 1
    return established >= connections


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def raw_request(api_key: ApiKey, version: int, body: dict, client_id: str = "abandoner") -> bytes:
    header = encode_request_header(api_key, version, 1, client_id)
    return b"".join(frame(header, request_codec(api_key, version).encode(body)))


async def abandon(pid: int, port: int, requests: list[bytes]) -> None:
    """Open one connection per request, send it, and close them all without reading a reply,
    once the broker has read every request (they wait there: a fixed second was not always
    enough on a loaded machine, and a request read after its client left is another case)."""
    writers = []
    for req in requests:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(req)
        writers.append(writer)
    for w in writers:
        await w.drain()
    await wait_for("every request read by the broker", lambda: read_whole(pid, port, len(requests)), DEADLINE_S)
    for w in writers:
        w.close()
    for w in writers:
        await w.wait_closed()  # our FIN is out: from here on the broker's side is CLOSE-WAIT until it closes


async def test_abandoned_long_poll_fetches_release_their_sockets_and_memory(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(0)
    assert broker.proc is not None
    pid = broker.proc.pid
    await create_topic(broker, "lp")
    async with await connect(broker) as conn:
        for _ in range(2):
            r = await produce(conn, "lp", 0, [(None, b"x" * 1000)] * 500)
            assert r["error_code"] == ErrorCode.NONE
        # Warm the read path once, so that what stays allocated after it is in the baseline.
        got = await fetch(conn, [("lp", 0, 0, 2 * MB)], max_bytes=2 * MB)
        assert len(got[("lp", 0)]["records"]) > 900_000
    before = rss_mb(pid)

    body = {"replica_id": -1, "max_wait_ms": FOREVER_MS, "min_bytes": FOREVER_MS, "max_bytes": 2 * MB,
            "topics": [{"topic": "lp", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 2 * MB}]}]}
    await abandon(pid, broker.port, [raw_request(ApiKey.FETCH, 3, body)] * 200)

    await wait_for("no CLOSE-WAIT sockets", lambda: close_wait_sockets(pid, broker.port) == 0, timeout=DEADLINE_S)
    # 200 held responses of a megabyte each would be 200 MB; allow for allocator slack.
    await wait_for(f"RSS back near {before:.0f} MB", lambda: rss_mb(pid) < before + 40, timeout=DEADLINE_S)

    async with await connect(broker) as conn:
        got = await asyncio.wait_for(fetch(conn, [("lp", 0, 0, 1024)]), DEADLINE_S)
        assert got[("lp", 0)]["error_code"] == ErrorCode.NONE and got[("lp", 0)]["records"]


async def test_abandoned_acks_all_produces_release_their_sockets(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    lag = {"replica_lag_time_max_ms": "60000"}
    leader = broker_factory(0, **lag)
    follower = broker_factory(1, zookeeper_session_timeout_ms="10000", **lag)
    assert leader.proc is not None
    pid = leader.proc.pid
    await create_topic(leader, "acks", assignment={0: [0, 1]})
    follower.kill()  # the ISR stays [0, 1] for the lag time: acks=all produces wait

    data = build_message_set([(None, b"y" * 100, 0)], magic=1)
    body = {"acks": -1, "timeout_ms": FOREVER_MS,
            "topic_data": [{"name": "acks", "partition_data": [{"index": 0, "records": data}]}]}
    await abandon(pid, leader.port, [raw_request(ApiKey.PRODUCE, 2, body)] * 50)

    await wait_for("no CLOSE-WAIT sockets", lambda: close_wait_sockets(pid, leader.port) == 0, timeout=DEADLINE_S)
    async with await connect(leader) as conn:
        got = await asyncio.wait_for(fetch(conn, [("acks", 0, 0, 1024)]), DEADLINE_S)
        assert got[("acks", 0)]["error_code"] == ErrorCode.NONE


async def test_abandoned_quota_held_produce_responses_release_their_sockets(
        broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(0, metrics=True)
    assert broker.proc is not None
    pid = broker.proc.pid
    await create_topic(broker, "held")
    r = configs(broker.zk_connect, "--entity-type", "clients", "--entity-name", "held", "--alter",
                "--add-config", "producer_byte_rate=10000")
    assert r.returncode == 0, r.stderr

    data = build_message_set([(None, b"z" * 1000, 0)] * 200, magic=1)
    body = {"acks": 1, "timeout_ms": 10000,
            "topic_data": [{"name": "held", "partition_data": [{"index": 0, "records": data}]}]}
    request = raw_request(ApiKey.PRODUCE, 2, body, client_id="held")

    def quota_applied() -> bool:
        try:
            return metric(broker, "client_quota_bytes_per_second", client_id="held", type="produce") == 10000
        except KeyError:
            return False

    async with await connect(broker, client_id="held") as conn:
        assert (await produce(conn, "held", 0, [(None, b"first")]))["error_code"] == ErrorCode.NONE
        await wait_for("the quota applied", quota_applied, timeout=DEADLINE_S)

    # 20 x 200 KB at 10 KB/s: every response is held for many seconds, with reading paused.
    await abandon(pid, broker.port, [request] * 20)
    await wait_for("no CLOSE-WAIT sockets", lambda: close_wait_sockets(pid, broker.port) == 0, timeout=DEADLINE_S)
    async with await connect(broker) as conn:
        got = await asyncio.wait_for(fetch(conn, [("held", 0, 0, 1024)]), DEADLINE_S)
        assert got[("held", 0)]["error_code"] == ErrorCode.NONE and got[("held", 0)]["records"]
