"""The listener: one task per connection, requests answered strictly in order.

Kafka mutes a channel while one of its requests is in flight; reading the next frame
only after the previous response is written gives the same ordering, which aiokafka
relies on (it drops a connection on a correlation-id mismatch).

Quotas hold a connection in two ways: a response held back for its throttle time
(KIP-13 produce), and a pause before the next request is read (acks=0 produce, KIP-599).
Either way the transport stops reading meanwhile, so a held client costs one small
response and a socket buffer, not a queue of its next requests.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from broker.dispatch import Dispatcher

_SIZE = struct.Struct(">i")
log = structlog.get_logger()


class Connection:
    """What a handler may do to its own connection: pause reading (quotas, acks=0 throttling)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.mute_until = 0.0
        self.held: list[bytes] | None = None

    def mute_for(self, seconds: float) -> None:
        """Read nothing more from this connection for `seconds`."""
        loop = asyncio.get_running_loop()
        self.mute_until = max(self.mute_until, loop.time() + seconds)

    def hold(self, pieces: list[bytes], seconds: float) -> None:
        """Send this response only after `seconds`, reading nothing meanwhile."""
        self.held = pieces
        self.mute_for(seconds)

    async def wait_until_unmuted(self) -> None:
        if not self.mute_until:
            return
        loop = asyncio.get_running_loop()
        delay = self.mute_until - loop.time()
        self.mute_until = 0.0
        transport = self.writer.transport
        paused = False
        if delay > 0 and not transport.is_closing():
            if transport.is_reading():
                transport.pause_reading()
                paused = True
            try:
                await asyncio.sleep(delay)
            finally:
                if paused and not transport.is_closing():
                    transport.resume_reading()
        if self.held is not None:
            held, self.held = self.held, None
            self.write(held)

    def write(self, pieces: list[bytes]) -> None:
        """Send a response; dropped if the client has gone meanwhile.

        A response can be ready long after its request (a long poll, acks=all, a quota hold),
        and a client may reset the connection in between. Writing to the closed transport
        would raise (uvloop: RuntimeError "the handler is closed"); there is nobody to answer.
        """
        if self.writer.transport.is_closing():
            log.debug("connection.response_dropped", peer=self.peer, reason="connection closed")
            return
        self.writer.writelines(pieces)


class Listener:
    def __init__(self, dispatcher: Dispatcher, host: str, port: int, max_frame_bytes: int) -> None:
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections: set[Connection] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_connect, self.host, self.port,
                                                  reuse_address=True, limit=1 << 20)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.writer.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Connection(reader, writer)
        self.connections.add(conn)
        try:
            await self._serve(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away, possibly mid-request; nothing to answer
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection.failed", peer=conn.peer)
        finally:
            self.connections.discard(conn)
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, conn: Connection) -> None:
        reader = conn.reader
        while True:
            await conn.wait_until_unmuted()
            head = await reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            if size < 0 or size > self.max_frame_bytes:
                # Refused before a buffer for it exists; only this connection pays.
                log.warning("connection.bad_frame_size", peer=conn.peer, size=size,
                            limit=self.max_frame_bytes)
                return
            # The frame is referenced only inside this call, so a response held for its
            # throttle time no longer keeps the request's records alive.
            if not await self.dispatcher.handle(conn, await reader.readexactly(size)):
                return
            transport = conn.writer.transport
            if not transport.is_closing() and transport.get_write_buffer_size() > (4 << 20):
                await conn.writer.drain()


Handler = Callable[..., Awaitable[object]]
