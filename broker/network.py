"""The listener: one task per connection, requests answered strictly in order.

Kafka mutes a channel while one of its requests is in flight; reading the next frame
only after the previous response is written gives the same ordering, which aiokafka
relies on (it drops a connection on a correlation-id mismatch).

Quotas hold a connection in two ways: a response held back for its throttle time
(KIP-13 produce), and a pause before the next request is read (acks=0 produce, KIP-599).
Either way the transport stops reading meanwhile, so a held client costs one small
response and a socket buffer, not a queue of its next requests.

Bounds (`ConnectionLimits`, Kafka's keys): `max.connections` and `max.connections.per.ip`
(with `max.connections.per.ip.overrides`) close a connection over the limit as soon as it is
accepted (Kafka closes one over the per-IP limit likewise, but holds the acceptor for
`max.connections`: here both are closed at once, and logged); `connections.max.idle.ms`
closes a connection that has had no request in flight for that long; `queued.max.request.bytes`
bounds the bytes of requests read and not yet answered, and a connection waits before reading
a request body while the bound is exceeded. As Kafka's non-strict memory pool, a request is let
in whenever any of the bound is left, so one larger than the whole bound still goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
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
        self.ip = peer[0] if isinstance(peer, tuple) else str(peer)
        self.in_flight = False  # a request read and not yet answered (ConnectionLimits, idle expiry)
        self.last_active = asyncio.get_running_loop().time()
        self._on_processed: Callable[[], None] | None = None

    def request_processed(self) -> None:
        """The current request's bytes no longer count as queued: its handler has used them and
        now only waits (an acks=all produce waiting for its followers, as Kafka's handler returns
        its buffer to the pool before the delayed produce completes). Without this, produces
        waiting for replication could keep the followers' fetch requests from being read."""
        release, self._on_processed = self._on_processed, None
        if release is not None:
            release()

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
        if delay > 0:
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
            self.writer.writelines(held)

    def write(self, pieces: list[bytes]) -> None:
        self.writer.writelines(pieces)


class ConnectionLimits:
    """Connection counts (total and per IP), idle expiry and the queued request bytes of one broker."""

    def __init__(self, max_connections: int = (1 << 31) - 1, max_per_ip: int = (1 << 31) - 1,
                 per_ip_overrides: dict[str, int] | None = None, idle_ms: int = -1,
                 queued_max_bytes: int = -1) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.idle_s = idle_ms / 1000 if idle_ms >= 0 else None
        self.queued_max_bytes = queued_max_bytes if queued_max_bytes > 0 else None
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.queued_bytes = 0
        self._freed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None

    async def resolve_overrides(self) -> None:
        """Host names in the overrides as IP addresses (Kafka resolves them once, at start)."""
        loop = asyncio.get_running_loop()
        resolved: dict[str, int] = {}
        for host, count in self.per_ip_overrides.items():
            try:
                ipaddress.ip_address(host)
                resolved[host] = count
                continue
            except ValueError:
                pass
            try:
                for info in await loop.getaddrinfo(host, None):
                    resolved[str(info[4][0])] = count
            except OSError as e:
                log.warning("connection.override_unresolved", host=host, error=str(e))
        self.per_ip_overrides = resolved

    def admit(self, conn: Connection) -> str | None:
        """Count a new connection in; the reason it is refused instead (and not counted)."""
        limit = self.per_ip_overrides.get(conn.ip, self.max_per_ip)
        if self.per_ip.get(conn.ip, 0) >= limit:
            return f"max.connections.per.ip ({limit}) reached for {conn.ip}"
        if self.total >= self.max_connections:
            return f"max.connections ({self.max_connections}) reached"
        self.total += 1
        self.per_ip[conn.ip] = self.per_ip.get(conn.ip, 0) + 1
        return None

    def release(self, conn: Connection) -> None:
        self.total -= 1
        left = self.per_ip.get(conn.ip, 0) - 1
        if left > 0:
            self.per_ip[conn.ip] = left
        else:
            self.per_ip.pop(conn.ip, None)

    @contextlib.asynccontextmanager
    async def request(self, conn: Connection, size: int) -> AsyncIterator[None]:
        """Around reading and answering one request of `size` bytes: waits while the queued
        bytes are at their bound, counts them until the answer, and marks the connection busy."""
        bound = self.queued_max_bytes
        if bound is not None:
            while self.queued_bytes >= bound:
                self._freed.clear()
                await self._freed.wait()
            self.queued_bytes += size
            released = False

            def release() -> None:
                nonlocal released
                if not released:
                    released = True
                    self.queued_bytes -= size
                    self._freed.set()
            conn._on_processed = release
        conn.in_flight = True
        try:
            yield
        finally:
            conn.in_flight = False
            conn.last_active = asyncio.get_running_loop().time()
            conn.request_processed()

    def start_idle_expiry(self, connections: set[Connection]) -> None:
        if self.idle_s is not None and self._reaper is None:
            self._reaper = asyncio.create_task(self._expire_idle(connections, self.idle_s))

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    async def _expire_idle(self, connections: set[Connection], idle_s: float) -> None:
        loop = asyncio.get_running_loop()
        period = max(0.05, min(1.0, idle_s / 4))
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(connections):
                # A connection muted by a quota or holding a response is not idle: it waits on us.
                if conn.in_flight or conn.held is not None or conn.mute_until > now:
                    continue
                if now - conn.last_active >= idle_s:
                    log.info("connection.idle_closed", peer=conn.peer, idle_ms=int((now - conn.last_active) * 1000))
                    conn.writer.close()
                    conn.last_active = now  # closed once; the serving task ends on its own


class Listener:
    def __init__(self, dispatcher: Dispatcher, host: str, port: int, max_frame_bytes: int,
                 limits: ConnectionLimits | None = None) -> None:
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.limits = limits or ConnectionLimits()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections: set[Connection] = set()

    async def start(self) -> None:
        await self.limits.resolve_overrides()
        self._server = await asyncio.start_server(self._on_connect, self.host, self.port,
                                                  reuse_address=True, limit=1 << 20)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.limits.start_idle_expiry(self.connections)

    async def stop(self) -> None:
        self.limits.stop()
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
        refused = self.limits.admit(conn)
        if refused:
            log.warning("connection.refused", peer=conn.peer, reason=refused)
            self._tasks.discard(task)
            writer.close()
            return
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
            self.limits.release(conn)
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
            async with self.limits.request(conn, size):
                if not await self.dispatcher.handle(conn, await reader.readexactly(size)):
                    return
            if conn.writer.transport.get_write_buffer_size() > (4 << 20):
                await conn.writer.drain()


Handler = Callable[..., Awaitable[object]]
