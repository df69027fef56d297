"""broker.network on a SASL listener: before authentication, a size prefix above
`sasl.server.max.receive.size` closes the connection (after the failed-authentication delay)
without reading or allocating the frame's body, as Kafka 2.8's SaslServerAuthenticator.

A real listener on a real socket, the real SaslListeners/SaslSession, and a scripted dispatcher
in place of the broker's (it only records what reached it).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from broker.network import Connection, Listener, RequestReader
from broker.security.sasl_listeners import SaslListeners
from broker.security.sasl_scram import CredentialCache

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret";')
MAX_RECEIVE = 1000
DEADLINE_S = 30  # generous: a loaded machine; the delay itself is 50 ms


class Counter:
    def __init__(self) -> None:
        self.counts: dict[tuple[tuple[str, str], ...], float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.counts[key] = self.counts.get(key, 0.0) + amount


@dataclass
class Services:
    sasl: SaslListeners


class Script:
    """Stands in for broker.dispatch.Dispatcher: records each frame that reaches it."""

    def __init__(self, sasl: SaslListeners) -> None:
        self.services = Services(sasl)
        self.seen: list[int] = []

    async def handle(self, conn: Connection, frame: bytes) -> bool:
        self.seen.append(len(frame))
        conn.write([struct.pack(">i", 2), b"ok"])
        return True


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Listener, Script, Counter, list[int]]]:
    props = {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
             "connection.failed.authentication.delay.ms": "50", "sasl.server.max.receive.size": str(MAX_RECEIVE)}
    failures = Counter()
    sasl = SaslListeners({"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, lambda _l, k: props.get(k), CredentialCache(),
                         failures)  # type: ignore[arg-type]
    script = Script(sasl)
    bodies_read: list[int] = []  # every size the reader was asked to read a body of
    real_read_frame = RequestReader.read_frame
    real_frame_now = RequestReader.frame_now

    async def read_frame(self: RequestReader, size: int) -> bytearray:
        bodies_read.append(size)
        return await real_read_frame(self, size)

    def frame_now(self: RequestReader, size: int) -> bytearray | None:
        # A body taken from what was read ahead (else read_frame is asked next).
        frame = real_frame_now(self, size)
        if frame is not None:
            bodies_read.append(size)
        return frame
    monkeypatch.setattr(RequestReader, "read_frame", read_frame)
    monkeypatch.setattr(RequestReader, "frame_now", frame_now)
    listener = Listener(script, "127.0.0.1", 0, 100 << 20, name="SASL_PLAINTEXT",  # type: ignore[arg-type]
                        security_protocol="SASL_PLAINTEXT")
    await listener.start()
    try:
        yield listener, script, failures, bodies_read
    finally:
        await listener.stop()


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        await reader.read()
    except ConnectionError:
        return True
    return reader.at_eof()


async def test_an_oversized_prefix_before_authentication_closes_unread(
        served: tuple[Listener, Script, Counter, list[int]]) -> None:
    listener, script, failures, bodies_read = served
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    big = 50 << 20
    writer.write(struct.pack(">i", big) + b"\x00" * 512)  # a size, then the start of a body that never ends
    closed = await asyncio.wait_for(_closed(reader), DEADLINE_S)
    writer.close()
    assert closed
    assert big not in bodies_read and script.seen == []  # no buffer for it, nothing dispatched
    assert failures.counts == {(("listener", "SASL_PLAINTEXT"), ("mechanism", "none")): 1.0}


async def test_a_prefix_at_the_bound_is_read_and_other_connections_are_unaffected(
        served: tuple[Listener, Script, Counter, list[int]]) -> None:
    listener, script, failures, bodies_read = served
    bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", listener.port)
    bad_writer.write(struct.pack(">i", MAX_RECEIVE + 1))
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(struct.pack(">i", MAX_RECEIVE) + b"x" * MAX_RECEIVE)
    assert await asyncio.wait_for(reader.readexactly(6), DEADLINE_S) == b"\x00\x00\x00\x02ok"
    assert await asyncio.wait_for(_closed(bad_reader), DEADLINE_S)
    assert script.seen == [MAX_RECEIVE] and bodies_read == [MAX_RECEIVE]
    assert sum(failures.counts.values()) == 1.0
    writer.close()
    bad_writer.close()


async def test_other_listeners_are_not_bounded(served: tuple[Listener, Script, Counter, list[int]]) -> None:
    _, script, failures, _ = served
    plain = Listener(script, "127.0.0.1", 0, 100 << 20)  # type: ignore[arg-type]
    await plain.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", plain.port)
        writer.write(struct.pack(">i", 4 * MAX_RECEIVE) + b"x" * (4 * MAX_RECEIVE))
        assert await asyncio.wait_for(reader.readexactly(6), DEADLINE_S) == b"\x00\x00\x00\x02ok"
        writer.close()
    finally:
        await plain.stop()
    assert script.seen == [4 * MAX_RECEIVE] and not failures.counts


@pytest.mark.parametrize("size", [-1, 200 << 20])  # negative; above socket.request.max.bytes (100 MiB here)
async def test_a_prefix_the_listener_refuses_anyway_is_an_authentication_failure_before_authentication(
        served: tuple[Listener, Script, Counter, list[int]], size: int) -> None:
    """Before authentication Kafka reads every frame through the SASL authenticator's bounded
    receive: a negative size, or one above socket.request.max.bytes (which is above
    sasl.server.max.receive.size too), fails the authentication (counted, logged, closed after
    the delay) as any prefix above the SASL bound does, rather than being a bare bad frame."""
    listener, script, failures, bodies_read = served
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(struct.pack(">i", size))
    assert await asyncio.wait_for(_closed(reader), DEADLINE_S)
    writer.close()
    assert bodies_read == [] and script.seen == []
    assert failures.counts == {(("listener", "SASL_PLAINTEXT"), ("mechanism", "none")): 1.0}
