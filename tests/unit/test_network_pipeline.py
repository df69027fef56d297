"""broker.network: requests pipelined on one connection are answered in request order.

A real listener on a real socket, with a scripted dispatcher in place of the broker's: some
requests answer at once, some wait (saying so, as a Produce or Fetch does, or not), some for a
few loop turns only, which is where an answer written by the reading task and one written by
the sending task could cross.
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import AsyncIterator

import pytest

from broker.network import Connection, ConnectionLimits, Listener


class Script:
    """Each frame is `kind:tag`; the answer echoes the tag."""

    def __init__(self) -> None:
        self.started: list[bytes] = []
        self.running = 0
        self.most_running = 0

    async def handle(self, conn: Connection, frame: bytes) -> bool:
        kind, _, tag = frame.partition(b":")
        self.started.append(tag)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            if kind == b"turns":  # waits a few loop turns without saying it only waits
                for _ in range(int(tag) % 4):
                    await asyncio.sleep(0)
            elif kind.startswith(b"turns"):  # turns3: exactly three loop turns
                for _ in range(int(kind[5:])):
                    await asyncio.sleep(0)
            elif kind == b"waits":  # an acks=all produce: processed, then waits
                conn.request_processed()
                await asyncio.sleep(0.002 * (int(tag) % 5))
            elif kind.startswith(b"waits"):  # waits2: processed, then exactly two loop turns
                conn.request_processed()
                for _ in range(int(kind[5:])):
                    await asyncio.sleep(0)
            conn.write([struct.pack(">i", len(tag)), tag])
            return True
        finally:
            self.running -= 1


class EagerScript(Script):
    """The same, each request started in the reading task up to its first wait (as the broker's
    dispatcher starts Produce and Fetch: broker.network.Connection.start, eager)."""

    @staticmethod
    def starts_at_once(frame: bytes) -> bool:
        return True


async def serve(max_in_flight: int, eager: bool = False) -> tuple[Listener, Script]:
    script = EagerScript() if eager else Script()
    listener = Listener(script, "127.0.0.1", 0, 1 << 20,  # type: ignore[arg-type]
                        ConnectionLimits(max_in_flight=max_in_flight))
    await listener.start()
    return listener, script


@pytest.fixture(params=[False, True], ids=["task", "eager"])
async def pipelined(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Listener, Script]]:
    listener, script = await serve(16, eager=request.param)
    try:
        yield listener, script
    finally:
        await listener.stop()


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def exchange(listener: Listener, frames: list[bytes]) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"".join(frame(f) for f in frames))
    await writer.drain()
    answers = []
    for _ in frames:
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
        answers.append(await reader.readexactly(size))
    writer.close()
    await writer.wait_closed()
    return answers


async def test_answers_come_back_in_request_order(pipelined: tuple[Listener, Script]) -> None:
    listener, script = pipelined
    rng = random.Random(21)
    kinds = [rng.choice([b"now", b"turns", b"waits"]) for _ in range(600)]
    frames = [k + b":" + str(i).encode() for i, k in enumerate(kinds)]
    answers = await exchange(listener, frames)
    assert answers == [str(i).encode() for i in range(len(frames))]
    # Requests start in arrival order, and waiting ones overlap (the pipeline exists) within its bound.
    assert script.started == answers
    assert 1 < script.most_running <= 16


@pytest.mark.parametrize("eager", [False, True], ids=["task", "eager"])
async def test_one_in_flight_is_kafkas_one_request_at_a_time(eager: bool) -> None:
    listener, script = await serve(1, eager)
    try:
        frames = [b"waits:" + str(i).encode() for i in range(50)]
        answers = await exchange(listener, frames)
    finally:
        await listener.stop()
    assert answers == [str(i).encode() for i in range(50)]
    assert script.most_running == 1


@pytest.mark.parametrize("first_turns", [0, 1, 2, 3])
@pytest.mark.parametrize("second_turns", [1, 2, 3, 4, 5])
async def test_the_reading_and_sending_tasks_never_answer_one_request_twice(
        pipelined: tuple[Listener, Script], first_turns: int, second_turns: int) -> None:
    # A request that waits is answered by the sending task; one answered at once, with nothing
    # before it still waiting, by the reading task. A waiting request followed by one that takes
    # a few loop turns finishes in every interleaving of the two.
    listener, _ = pipelined
    frames = [b"waits%d:0" % first_turns, b"turns%d:1" % second_turns, b"now:2", b"now:3"] * 5
    answers = await exchange(listener, frames)
    assert answers == [f.partition(b":")[2] for f in frames]
