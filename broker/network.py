"""The listener: one task per connection, requests answered strictly in order.

Kafka mutes a channel while one of its requests is in flight; reading the next frame
only after the previous response is written gives the same ordering, which aiokafka
relies on (it drops a connection on a correlation-id mismatch).

Quotas hold a connection in two ways: a response held back for its throttle time
(KIP-13 produce), and a pause before the next request is read (acks=0 produce, KIP-599).
Either way the transport stops reading meanwhile, so a held client costs one small
response and a socket buffer, not a queue of its next requests.

A client that goes away (EOF or a reset) while one of its requests waits (a long-poll Fetch,
an acks=all Produce, a quota delay) is let go at once: the connection's task is cancelled,
which drops the request and whatever it holds, and the socket is closed (no CLOSE-WAIT).
Only waits the dispatcher marks abandonable are cut short (see `Connection.abandonable`),
and a held response's throttle time, which a hang-up watch on the paused socket ends;
Kafka itself notices a closed channel only once the muted request completes.

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
import select
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import structlog

if TYPE_CHECKING:
    from broker.dispatch import Dispatcher

_SIZE = struct.Struct(">i")
T = TypeVar("T")
log = structlog.get_logger()


class Connection:
    """What a handler may do to its own connection: pause reading (quotas, acks=0 throttling)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 listener_name: str = "PLAINTEXT") -> None:
        self.reader = reader
        self.writer = writer
        # The named listener this connection came in on: Metadata answers with its endpoints.
        self.listener_name = listener_name
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.mute_until = 0.0
        self.held: list[bytes] | None = None
        # Set by _watch_peer: the task serving this connection, whether the peer has gone
        # (EOF or error from the transport), and whether what runs now may be cut short then.
        self.task: asyncio.Task[None] | None = None
        self.peer_gone = False
        self.abandonable = False
        self.hangups: HangupWatch | None = None
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
        if delay > 0 and not transport.is_closing():
            if transport.is_reading():
                transport.pause_reading()
                paused = True
            try:
                if self.held is not None:
                    await self._hold(delay)
                else:
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

    def peer_went(self) -> None:
        """The peer closed or reset the connection: cut short what runs now, if it is abandonable.

        A request that must run to its end (admin, controller: their ZooKeeper writes are not
        cut short) keeps running, but the socket is released now, as Kafka's selector closes a
        disconnected channel at once and drops the response when it comes: a client cannot
        hold file descriptors by leaving requests with long timeouts behind it."""
        if self.peer_gone:
            return
        self.peer_gone = True
        if self.task is None or self.task.done():
            return
        if self.abandonable:
            self.task.cancel()
        else:
            self.unwatch_hangup()
            self.writer.transport.abort()

    def _fd(self) -> int:
        sock = self.writer.get_extra_info("socket")
        return sock.fileno() if sock is not None else -1

    def watch_hangup(self) -> None:
        """Watch the socket itself for the peer hanging up, for a request that is taking a while.

        The StreamReader pauses the transport once a client has pipelined more than its
        buffer, and a paused transport does not see EOF; a client that sends a long wait
        (a long poll, an admin request's timeout) and a burst behind it, then leaves, would
        keep its socket in CLOSE-WAIT until the wait ends. Armed only after a request has run
        for WATCH_AFTER_S, so quick requests cost a timer and nothing else."""
        fd = self._fd()
        if self.hangups is not None and fd >= 0 and not self.peer_gone:
            self.hangups.add(fd, self)

    def unwatch_hangup(self) -> None:
        fd = self._fd()
        if self.hangups is not None and fd >= 0:
            self.hangups.discard(fd, self)

    async def _hold(self, delay: float) -> None:
        """Wait out a held response's throttle time; a peer hanging up meanwhile ends it.

        Reading is paused, so the reader learns nothing of the peer until the hold ends;
        the hang-up watch sees it on the socket itself. Only a held response (its client
        waits for it) is dropped so: a plain mute (acks=0, KIP-599) keeps the frames the
        client sent before closing, to be read and applied once the mute ends.
        """
        sock = self.writer.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if self.hangups is None or fd < 0:
            await asyncio.sleep(delay)
            return
        self.hangups.add(fd, self)
        try:
            await self.run_abandonable(asyncio.sleep(delay))
        finally:
            self.hangups.discard(fd)

    async def run_abandonable(self, aw: Awaitable[T]) -> T:
        """Await `aw`; if the peer goes meanwhile (or has gone), this connection's task is cancelled.

        For requests whose waits hold nothing anyone else needs (the dispatcher decides which):
        the owner is gone, so the response would be written to nobody. A peer already gone
        still has its request run up to its first wait (a Produce appends before that, so
        an acks=0 producer that sends and closes loses nothing).
        """
        self.abandonable = True
        if self.peer_gone and self.task is not None:
            self.task.cancel()
        try:
            return await aw
        finally:
            self.abandonable = False


# A request still running after this long has its socket watched for the peer hanging up.
WATCH_AFTER_S = 0.2


class HangupWatch:
    """Peers hanging up (EPOLLRDHUP, HUP, ERR) on sockets whose transport has stopped reading.

    One epoll set per listener, itself watched by the event loop: a paused transport does
    not poll its socket, so this is how a held connection learns its client is gone.
    """

    def __init__(self) -> None:
        self._epoll: select.epoll | None = None
        self._conns: dict[int, Connection] = {}

    def add(self, fd: int, conn: Connection) -> None:
        """Watch `fd` for `conn` (again: a no-op; a stale entry of a closed socket is replaced)."""
        current = self._conns.get(fd)
        if current is conn:
            return
        if current is not None:
            self.discard(fd)
        if self._epoll is None:
            self._epoll = select.epoll()
            asyncio.get_running_loop().add_reader(self._epoll.fileno(), self._ready)
        self._epoll.register(fd, select.EPOLLRDHUP)
        self._conns[fd] = conn

    def discard(self, fd: int, conn: Connection | None = None) -> None:
        """Before the socket closes: its number may be reused by the next connection.
        With `conn`, only if the entry is that connection's (the number may be another's now)."""
        if conn is not None and self._conns.get(fd) is not conn:
            return
        if self._conns.pop(fd, None) is not None and self._epoll is not None:
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)

    def _ready(self) -> None:
        if self._epoll is None:
            return
        for fd, _ in self._epoll.poll(0):
            conn = self._conns.get(fd)
            self.discard(fd)
            if conn is not None:
                conn.peer_went()

    def close(self) -> None:
        if self._epoll is not None:
            asyncio.get_running_loop().remove_reader(self._epoll.fileno())
            self._epoll.close()
            self._epoll = None
        self._conns.clear()


def _watch_peer(conn: Connection, task: asyncio.Task[None], hangups: HangupWatch) -> None:
    """Learn of the peer's EOF or reset as soon as the transport does, even while a request waits.

    The connection reads its next frame only after answering the current one, but the
    transport keeps reading into the StreamReader meanwhile, and the protocol reports EOF
    and connection loss to the reader through `feed_eof` and `set_exception`. Those two are
    wrapped here on this one reader (asyncio.start_server builds it, so it cannot be a
    subclass): each still does what it did, then tells the connection (Connection.peer_went).
    """
    reader = conn.reader
    feed_eof, set_exception = reader.feed_eof, reader.set_exception
    conn.task = task
    conn.hangups = hangups

    def on_eof() -> None:
        feed_eof()
        conn.peer_went()

    def on_exception(exc: BaseException) -> None:
        set_exception(exc)
        conn.peer_went()

    reader.feed_eof = on_eof  # type: ignore[method-assign]
    reader.set_exception = on_exception  # type: ignore[method-assign]


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
                 limits: ConnectionLimits | None = None, name: str = "PLAINTEXT") -> None:
        self.name = name
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.limits = limits or ConnectionLimits()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.connections: set[Connection] = set()
        self._hangups = HangupWatch()

    async def start(self) -> None:
        await self.limits.resolve_overrides()
        self._server = await asyncio.start_server(self._on_connect, self.host, self.port,
                                                  reuse_address=True, limit=1 << 20)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.limits.start_idle_expiry(self.connections)

    async def stop(self) -> None:
        self._stopping = True
        self.limits.stop()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.writer.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._hangups.close()

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Connection(reader, writer, self.name)
        refused = self.limits.admit(conn)
        if refused:
            log.warning("connection.refused", peer=conn.peer, reason=refused)
            self._tasks.discard(task)
            writer.close()
            return
        _watch_peer(conn, task, self._hangups)
        self.connections.add(conn)
        try:
            await self._serve(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away, possibly mid-request; nothing to answer
        except asyncio.CancelledError:
            # Ended on purpose (the client left, or the listener stops): the task ends normally.
            # Ending it cancelled would make asyncio's start_server callback log a
            # CancelledError traceback for every connection still waiting at shutdown.
            if not (_abandoned(conn) or self._stopping):
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
                frame = await reader.readexactly(size)
                watch = asyncio.get_running_loop().call_later(WATCH_AFTER_S, conn.watch_hangup)
                try:
                    handled = await self.dispatcher.handle(conn, frame)
                finally:
                    watch.cancel()
                    conn.unwatch_hangup()
                del frame
                if not handled:
                    return
            transport = conn.writer.transport
            if not transport.is_closing() and transport.get_write_buffer_size() > (4 << 20):
                await conn.writer.drain()


def _abandoned(conn: Connection) -> bool:
    """The task was cancelled because its peer went (not by the listener's stop): end it quietly."""
    if not conn.peer_gone or conn.task is None:
        return False
    log.debug("connection.abandoned_request", peer=conn.peer)
    return conn.task.uncancel() == 0


Handler = Callable[..., Awaitable[object]]
