"""A client that goes away while its response is pending costs the broker nothing (issue 15, item 8).

Reproduction: a request whose response comes late (a long-poll Fetch waiting out max_wait_ms,
a Produce held for its client-quota throttle time), then the client resets the connection.
The broker used to write the late response into the closed transport, and uvloop's
RuntimeError ("the handler is closed") reached the log as a traceback. The long poll is what
reproduced it (the transport keeps reading while a request is handled, so it sees the reset);
a held produce pauses reading, so its late write failed quietly, and it stays in the test so
that it keeps doing so.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.headers import encode_request_header
from protocol.records.message_set import build_message_set
from protocol.schema import request_codec
from tests.support.topics import create_topic
from tests.support.wire import connect, fetch, produce


def _frame(api_key: int, version: int, body: dict, client_id: str) -> bytes:
    payload = encode_request_header(api_key, version, 1, client_id) + request_codec(api_key, version).encode(body)
    return struct.pack(">i", len(payload)) + payload


def _read_by_broker(pid: int, port: int, client_port: int) -> bool:
    """The broker's socket for the client at `client_port` exists and holds nothing unread
    (rx_queue 0 in /proc/net/tcp): the broker has read what the client sent."""
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = (int(a.rsplit(":", 1)[1], 16) for a in fields[1:3])
            if local == port and remote == client_port:
                return int(fields[4].split(":")[1], 16) == 0
    return False


def _send_then_reset(pid: int, port: int, frame: bytes) -> None:
    """Send one request and reset the connection without reading the answer (SO_LINGER 0: RST, not
    FIN), once the broker has read the request (and so holds its answer; a fixed 0.3 s before)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(frame)
    deadline = time.monotonic() + 60
    while not _read_by_broker(pid, port, s.getsockname()[1]):
        assert time.monotonic() < deadline, "the broker did not read the request"
        time.sleep(0.01)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


async def test_late_response_to_a_reset_connection_is_dropped_quietly(broker_factory) -> None:  # noqa: ANN001
    # A produce quota of 10 KB/s: a 20 KB produce is answered after a throttle of about a second.
    broker = broker_factory(0, quota_producer_default="10000")
    async with await connect(broker) as conn:
        await create_topic(conn, "late")
    long_poll = _frame(ApiKey.FETCH, 3, {
        "replica_id": -1, "max_wait_ms": 1500, "min_bytes": 1, "max_bytes": 1 << 20,
        "topics": [{"topic": "late", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                     "partition_max_bytes": 1 << 20}]}]}, "poller")
    records = build_message_set([(None, b"x" * 20_000, 1_700_000_000_000)], magic=1)
    held = _frame(ApiKey.PRODUCE, 2, {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "late", "partition_data": [{"index": 0, "records": records}]}]}, "throttled")
    for frame in (long_poll, held, long_poll):
        await asyncio.to_thread(_send_then_reset, broker.proc.pid, broker.port, frame)
    await asyncio.sleep(3)  # every late answer is due by now (the fetch's 1.5 s, the produce's throttle)

    # The broker keeps serving, on a fresh connection, within a generous bound.
    async with await connect(broker, client_id="after") as conn:
        r = await asyncio.wait_for(produce(conn, "late", 0, [(b"k", b"v")]), 30)
        assert r["error_code"] == 0
        got = await asyncio.wait_for(fetch(conn, [("late", 0, 0, 1 << 20)]), 30)
        assert got[("late", 0)]["high_watermark"] == 2
    log = broker.log()
    assert "RuntimeError" not in log and "Traceback" not in log, log
