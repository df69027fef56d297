"""broker.network: Produce appends whose writes are queued (broker.log.writer) on one connection.

A real listener with a scripted dispatcher: an `append` request submits a write that completes
only when the test says so (`Connection.appends_submitted`), a `read` request waits as the
dispatcher makes every non-Produce request wait (`Connection.next_may_start`). The next append
starts at once; a read starts only after the earlier writes; the request's bytes stay counted in
queued.max.request.bytes until its write is done.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from broker.network import Connection, ConnectionLimits, Listener


class Script:
    def __init__(self) -> None:
        self.writes: list[asyncio.Future[None]] = []
        self.events: list[str] = []

    async def handle(self, conn: Connection, frame: bytes) -> bool:
        kind, _, tag = frame.partition(b":")
        if kind == b"append":
            write: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self.writes.append(write)
            self.events.append(f"submitted {tag.decode()}")
            conn.appends_submitted([write])
            await asyncio.wait([write])
        else:
            if conn.appends_pending:
                await conn.next_may_start()
            self.events.append(f"read {tag.decode()} after {sum(w.done() for w in self.writes)} writes")
        conn.write([struct.pack(">i", len(tag)), tag])
        return True


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def test_a_read_waits_for_the_connections_earlier_writes_and_bytes_stay_counted() -> None:
    script = Script()
    limits = ConnectionLimits(max_in_flight=16, queued_max_bytes=1 << 20)
    listener = Listener(script, "127.0.0.1", 0, 1 << 20, limits)  # type: ignore[arg-type]
    await listener.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        frames = [b"append:a", b"append:b", b"read:c"]
        writer.write(b"".join(frame(f) for f in frames))
        await writer.drain()
        for _ in range(200):  # both appends submitted: the second did not wait for the first's write
            if len(script.writes) == 2:
                break
            await asyncio.sleep(0.005)
        assert script.events == ["submitted a", "submitted b"]
        assert limits.queued_bytes == len(b"append:a") + len(b"append:b") + len(b"read:c")
        script.writes[0].set_result(None)
        await asyncio.sleep(0.05)
        assert script.events == ["submitted a", "submitted b"]  # the read still waits for b's write
        assert limits.queued_bytes == len(b"append:b") + len(b"read:c")
        script.writes[1].set_result(None)
        answers = []
        for _ in frames:
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
            answers.append(await reader.readexactly(size))
        assert answers == [b"a", b"b", b"c"]
        assert script.events[-1] == "read c after 2 writes"
        writer.close()
        await writer.wait_closed()
    finally:
        await listener.stop()
