"""broker.network: a client that goes away while its request waits is let go at once.

A real listener on a real socket, with a scripted dispatcher in place of the broker's. Every
wait is for a condition, with a deadline far beyond what a loaded machine needs (DEADLINE_S);
what "at once" means is held by the scripted waits being far longer still (FOREVER_S), so a
connection let go before the deadline was let go by the hang-up, not by its wait ending.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.network import READ_AHEAD_MAX, Connection, Listener
from tests.support.waiting import wait_for

DEADLINE_S = 60.0  # for a condition that holds within milliseconds on a quiet machine
FOREVER_S = 3600.0  # a held response's throttle time, an admin request's run: never reached


class Script:
    """Stands in for broker.dispatch.Dispatcher: each frame's first byte says what to do."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.waiting = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def handle(self, conn: Connection, frame: bytes) -> bool:
        self.seen.append(frame)
        kind = frame[:1]
        if kind == b"W":  # a long poll: waits for ever, abandonable
            await conn.run_abandonable(self._wait())
        elif kind == b"H":  # a response held for its quota
            conn.hold([b"\x00\x00\x00\x01R"], FOREVER_S)
        elif kind == b"M":  # a plain mute (acks=0 throttled): nothing held
            conn.mute_for(0.3)
        elif kind == b"A":  # an admin request: runs to its end, long after its client has gone
            self.waiting.set()
            await asyncio.sleep(FOREVER_S)
        return True

    async def _wait(self) -> None:
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


class EagerScript(Script):
    """The same, each request started in the reading task up to its first wait (as the broker's
    dispatcher starts Produce and Fetch: broker.network.Connection.start, eager)."""

    @staticmethod
    def starts_at_once(frame: bytes) -> bool:
        return True


@pytest.fixture(params=[False, True], ids=["task", "eager"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Listener, Script]]:
    script = EagerScript() if request.param else Script()
    listener = Listener(script, "127.0.0.1", 0, 1 << 20)  # type: ignore[arg-type]
    await listener.start()
    try:
        yield listener, script
    finally:
        await listener.stop()


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def closed_by_server(listener: Listener) -> None:
    while listener.connections:
        await asyncio.sleep(0.01)


async def send_and_close(listener: Listener, *frames: bytes, wait: Any = None) -> None:  # noqa: ANN401
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"".join(frame(f) for f in frames))
    await writer.drain()
    if wait is not None:
        await asyncio.wait_for(wait(), DEADLINE_S)
    writer.close()
    await writer.wait_closed()


async def test_a_waiting_request_is_cancelled_when_its_client_closes(served: tuple[Listener, Script]) -> None:
    listener, script = served
    await send_and_close(listener, b"W", wait=script.waiting.wait)
    await asyncio.wait_for(script.cancelled.wait(), DEADLINE_S)
    await asyncio.wait_for(closed_by_server(listener), DEADLINE_S)


async def test_a_request_from_a_client_already_gone_runs_to_its_first_wait(served: tuple[Listener, Script]) -> None:
    listener, script = served
    await send_and_close(listener, b"W")
    await asyncio.wait_for(script.cancelled.wait(), DEADLINE_S)
    assert script.seen == [b"W"]  # it ran (a Produce would have appended), then was let go
    await asyncio.wait_for(closed_by_server(listener), DEADLINE_S)


async def test_a_held_response_is_dropped_when_its_client_hangs_up(served: tuple[Listener, Script]) -> None:
    listener, script = served
    await send_and_close(listener, b"H", b"next")
    await asyncio.wait_for(closed_by_server(listener), DEADLINE_S)  # not after the hold (FOREVER_S)
    assert script.seen == [b"H"]


async def test_a_plain_mute_still_reads_what_the_client_sent_before_closing(served: tuple[Listener, Script]) -> None:
    listener, script = served
    await send_and_close(listener, b"M", b"after")
    await asyncio.wait_for(closed_by_server(listener), DEADLINE_S)
    assert script.seen == [b"M", b"after"]


async def test_stopping_the_listener_still_cancels_a_live_client(served: tuple[Listener, Script]) -> None:
    listener, script = served
    _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(frame(b"W"))
    await asyncio.wait_for(script.waiting.wait(), DEADLINE_S)
    await listener.stop()
    assert script.cancelled.is_set() and not listener.connections
    writer.close()


def server_socket_closed(listener: Listener) -> bool:
    return all(c.writer.transport.is_closing() for c in listener.connections)


async def test_a_request_that_runs_to_its_end_releases_the_socket_when_its_client_closes(
        served: tuple[Listener, Script]) -> None:
    # Kafka's selector closes a disconnected channel at once and drops the late response; a
    # client must not hold the broker's file descriptors with requests left behind it.
    listener, script = served
    await send_and_close(listener, b"A", wait=script.waiting.wait)
    await wait_for("the server side of the socket closed",
                   lambda: listener.connections and server_socket_closed(listener), DEADLINE_S, 0.01)
    assert not script.cancelled.is_set()


async def test_a_client_that_left_a_burst_behind_its_long_poll_is_let_go(served: tuple[Listener, Script]) -> None:
    # Frames pipelined behind a waiting request fill the reader's buffer, the transport stops
    # reading and would never see the EOF; the socket itself is watched instead.
    listener, script = served
    # Enough to fill what the reader reads ahead at most (four frames of a quarter of it, their
    # size prefixes beyond it), so the transport pauses, and a 1 KiB tail that stays in the
    # server's socket buffer. The client's FIN queues behind whatever the server's receive window
    # has not taken: a tail larger than that window (28 KiB on this VM once the reader paused,
    # and smaller on a loaded machine) kept the FIN in the client's send queue, and the server
    # never saw it (the flake: a 64 KiB tail).
    burst = [b"X" * (READ_AHEAD_MAX // 4)] * 4 + [b"X" * 1024]
    await send_and_close(listener, b"W", *burst, wait=script.waiting.wait)
    await asyncio.wait_for(script.cancelled.wait(), DEADLINE_S)
    await asyncio.wait_for(closed_by_server(listener), DEADLINE_S)
