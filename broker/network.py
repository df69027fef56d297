"""The listener: per connection, a task reads requests and each request runs in a task of its own.

Pipelining (a departure from Kafka, which mutes a channel while one of its requests is in
flight): a connection's next request is read while earlier ones wait in purgatory (an acks=all
Produce waiting for its followers, a long-poll Fetch), up to
`max.in.flight.requests.per.connection` read and not yet answered (1 is Kafka's behaviour).
Responses are still sent strictly in request order, as every client expects (aiokafka drops a
connection on a correlation-id mismatch). A response ready at once, with nothing before it
still waiting, is written by the reading task; otherwise a sending task writes the responses
in the order the requests came in, waiting for the oldest, and those ready together in one write.

A request is started only once the one before it has finished or says it now only waits
(`Connection.request_processed`: Produce after its appends, Fetch before each wait). Everything a
request does up to that point therefore happens in arrival order: a connection's appends stay in
the order it sent them, so a partition's order and acks=all semantics are those of one request
at a time. Requests that never say so (admin, controller, metadata) run one at a time as before.

Quotas hold a connection in two ways: a response held back for its throttle time
(KIP-13 produce), and a pause before the next request is read (acks=0 produce, KIP-599).
Either way the transport stops reading meanwhile, so a held client costs its pipeline of
small responses and a socket buffer, not an unbounded queue of its next requests. With the
pipeline, a throttle set when a waiting request completes holds the requests read after it
(at most the in-flight bound) rather than the next one.

A client that goes away (EOF or a reset) while its requests wait (a long-poll Fetch,
an acks=all Produce, a quota delay) is let go at once: those requests' tasks are cancelled,
which drops them and whatever they hold, and the socket is closed (no CLOSE-WAIT).
Only waits the dispatcher marks abandonable are cut short (see `Connection.run_abandonable`),
and a held response's throttle time, which a hang-up watch on the paused socket ends;
Kafka itself notices a closed channel only once the muted request completes.

Bounds (`ConnectionLimits`, Kafka's keys): `max.connections` and `max.connections.per.ip`
(with `max.connections.per.ip.overrides`) close a connection over the limit as soon as it is
accepted (Kafka closes one over the per-IP limit likewise, but holds the acceptor for
`max.connections`: here both are closed at once, and logged); `connections.max.idle.ms`
closes a connection that has had no request in flight for that long; `queued.max.request.bytes`
bounds the bytes of requests read and not yet processed, and a connection waits before reading
a request body while the bound is exceeded. As Kafka's non-strict memory pool, a request is let
in whenever any of the bound is left, so one larger than the whole bound still goes through.
On a SASL listener, until the client has authenticated, a size prefix above
`sasl.server.max.receive.size` (a negative one, or one above socket.request.max.bytes, too) is an
authentication failure decided before the body is read (Kafka's SaslServerAuthenticator): the
connection closes after the failure delay, nothing allocated for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import select
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import structlog

from broker.log import FileSlice
from broker.security.acl import ANONYMOUS
from broker.security.sasl_listeners import SASL_PROTOCOLS
from broker.security.sasl_session import Verdict

if TYPE_CHECKING:
    from broker.dispatch import Dispatcher
    from broker.security.ssl_listener import ListenerTls

_SIZE = struct.Struct(">i")
T = TypeVar("T")
log = structlog.get_logger()
# A connection's send buffer above this waits for the socket before more is sent.
WRITE_HIGH_WATER = 4 << 20
DEFAULT_MAX_IN_FLIGHT = 16
# Bytes a connection reads ahead of the frame it is asked for (small pipelined requests arrive
# several to a recv); a frame's body beyond what was read ahead lands in its own buffer directly.
READ_AHEAD = 16 << 10  # per connection, allocated with it: 16 MiB for 1,000 connections
# A connection whose reading task falls behind (many small requests pipelined) gets more, doubled
# up to this, before its transport is paused: more frames to a system call.
READ_AHEAD_MAX = 256 << 10
# A frame at least this large is received into memory that is not zeroed first (numpy.empty,
# seen through a memoryview): bytearray(size) writes the whole buffer with zeros that the
# receive then overwrites, 4-5% of the event loop's CPU under a load of 1 MB Produce requests.
UNZEROED_FROM = 64 << 10
# A response piece: bytes, or a range of a segment file sent with sendfile on plain TCP.
Bytes = bytes | bytearray | memoryview
# A received frame: a bytearray, or a memoryview of a writable buffer of its own.
Buffer = bytearray | memoryview
Piece = Bytes | FileSlice


class _Request:
    """One request read from a connection and not yet answered.

    Run in a task of its own (`task`), or started in the reading task (`Connection.start`,
    eager): then `task` is None while it runs and if it finished there, its outcome in
    `result` / `error`, and a task is made only if it has to wait."""

    __slots__ = ("task", "processed", "waiter", "finished", "result", "error", "reply", "hold_until",
                 "abandonable", "release", "watch")

    def __init__(self, release: Callable[[], None]) -> None:
        self.task: asyncio.Task[bool] | None = None
        # True once the request finished or only waits: the next one may start.
        self.processed = False
        self.waiter: asyncio.Future[None] | None = None  # the reading task waiting for `processed`
        self.finished = False  # finished in the reading task (no task): `result` or `error`
        self.result = False
        self.error: BaseException | None = None
        self.reply: list[Bytes] | None = None
        self.hold_until = 0.0  # a KIP-13 hold: the response is sent no earlier (loop time)
        self.abandonable = False  # in a wait that may be cut short when the client goes
        self.release = release  # its bytes out of queued.max.request.bytes (idempotent)
        self.watch: asyncio.TimerHandle | None = None

    def mark_processed(self) -> None:
        self.release()
        if not self.processed:
            self.processed = True
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def done(self) -> bool:
        task = self.task
        return self.finished if task is None else task.done()

    def cancelled(self) -> bool:
        task = self.task
        if task is None:
            return isinstance(self.error, asyncio.CancelledError)
        return task.cancelled()

    def failure(self) -> BaseException | None:
        """The exception it ended with (once done and not cancelled)."""
        task = self.task
        return self.error if task is None else task.exception()

    def handled(self) -> bool:
        """Its result (once done without an exception): False closes the connection."""
        task = self.task
        return self.result if task is None else bool(task.result())


class _Resumed(Coroutine[Any, Any, bool]):
    """A request's coroutine that was started in the reading task and has to wait: the rest of
    it, as the coroutine of a task. The task's first step gets what the coroutine yielded when
    it suspended (the future it waits for), so the task takes up the wait exactly where the
    coroutine left it; after that every step and exception (a cancellation, even before the
    task's first step) goes to the coroutine itself."""

    __slots__ = ("_coro", "_first", "_started")

    def __init__(self, coro: Coroutine[Any, Any, bool], first: Any) -> None:  # noqa: ANN401 - what a coroutine yields
        self._coro = coro
        self._first = first
        self._started = False

    def send(self, value: Any) -> Any:  # noqa: ANN401 - as a coroutine's
        if not self._started:
            self._started = True
            return self._first
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:  # noqa: ANN401 - as a coroutine's
        if not self._started:
            self._started = True
            # Cancelled before the task's first step: the task never waited on the future the
            # coroutine yielded, so Task.cancel could not cancel it as it cancels what a task
            # waits on. Done here, so that what it stands for (a gather of high-watermark waits)
            # stops with the request instead of running to its timeout.
            first = self._first
            cancelled = typ if isinstance(typ, BaseException) else val
            if (isinstance(first, asyncio.Future) and not first.done()
                    and (isinstance(cancelled, asyncio.CancelledError)
                         or (isinstance(typ, type) and issubclass(typ, asyncio.CancelledError)))):
                first.cancel()
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Any:  # noqa: ANN401
        return self

    def __iter__(self) -> Any:  # noqa: ANN401
        return self

    def __next__(self) -> Any:  # noqa: ANN401 - what a task's step calls (PyIter_Send with None)
        if not self._started:
            self._started = True
            return self._first
        return self._coro.send(None)


class RequestReader(asyncio.BufferedProtocol):
    """A connection's requests, each received into a buffer of its own: one copy, kernel to frame.

    asyncio's StreamReader copied every frame twice (into its buffer, then out of it by
    `readexactly`, and shifted the rest down): 8-22% of a produce's broker samples. Here the
    transport reads into a fixed read-ahead buffer while no frame is being received, so that
    small pipelined requests arrive several to a system call and are copied out once; a frame
    larger than what was read ahead gets a bytearray of its size, the read-ahead bytes are copied
    in and the rest of its body is received straight into it (fetcher/connection.py does the
    same for responses). The reading task asks for a frame's size, checks and reserves it, then
    for its body (`read_size`, `read_frame`): nothing is allocated for a size that is refused.

    Reading pauses while the read-ahead is full (the reading task is waiting for room in the
    pipeline, for a request to be processed, for queued bytes) and while a quota mutes the
    connection (`pause`/`resume` by reason, so one does not resume what the other paused).
    EOF keeps the transport open, so that what was read before a half-close is still answered
    (not over TLS, where asyncio closes anyway); EOF and a lost connection tell the connection
    (`on_gone`, Connection.peer_went) at once, even while the reading task is waiting.
    Works over TLS too: asyncio's and uvloop's SSL transports drive a BufferedProtocol.
    """

    def __init__(self, accepted: Callable[[RequestReader, ResponseWriter], None]) -> None:
        self._accepted = accepted
        # Made by the server as it accepts, on its loop: found once (each get_running_loop() is a getpid()).
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.over_ssl = False
        self.on_gone: Callable[[], None] | None = None
        self.on_writable: Callable[[], None] | None = None  # the transport has everything out
        self._ahead = bytearray(READ_AHEAD)
        self._start = self._end = 0  # read ahead and not yet taken: _ahead[_start:_end]
        self._body: Buffer | None = None  # a frame being received directly
        self._body_pos = 0
        # The last frame asked for was UNZEROED_FROM bytes or more. What is read ahead of such a
        # frame is copied into its own buffer, so its body is better left in the socket until it
        # is asked for and then received in place: the read-ahead goes back to READ_AHEAD bytes
        # and stops growing. (Doubling as for small frames, it read 256 KiB of every 1 MB
        # Produce frame ahead, each byte received twice.)
        self._large = False
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self.lost = False
        self._pauses: set[str] = set()
        self.writable = asyncio.Event()
        self.writable.set()

    # ---- the transport's side -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's transport
        self.over_ssl = transport.get_extra_info("sslcontext") is not None
        self._accepted(self, ResponseWriter(self.transport, self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return memoryview(self._body)[self._body_pos:]
        ahead = self._ahead
        if self._end == len(ahead):
            unread = self._end - self._start
            if self._start:  # move what is left to the front (same size: no resize under a view)
                ahead[:unread] = ahead[self._start:self._end]
            else:  # full: a larger one (up to READ_AHEAD_MAX, then reading pauses; a TLS
                # transport may still ask once before it sees the pause)
                ahead = self._ahead = ahead + bytes(len(ahead))
            self._start, self._end = 0, unread
        return memoryview(ahead)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._body_pos += nbytes
            if self._body_pos == len(self._body):
                self._body = None  # whole: what comes next is read ahead (never an empty buffer)
                self._wake()
            return
        self._end += nbytes
        # Full: reading pauses once the read-ahead has grown to its most, or at once on a
        # connection whose last frame was large (`_large`).
        if self._end - self._start >= len(self._ahead) and (self._large or len(self._ahead) >= READ_AHEAD_MAX):
            self.pause("full")
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        self._gone()
        return not self.over_ssl  # keep the socket open to answer what was read (half-close)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if exc is not None:
            self._error = exc
        self._eof = True
        self.writable.set()
        self._wake()
        self._gone()
        if self.on_writable is not None:
            self.on_writable()  # drops what was waiting to be sent

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()
        if self.on_writable is not None:
            self.on_writable()

    @property
    def at_eof(self) -> bool:
        return self._eof

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _gone(self) -> None:
        if self.on_gone is not None:
            self.on_gone()

    # ---- the reading task's side ----------------------------------------------------------

    def pause(self, reason: str) -> None:
        """Stop reading for `reason` ("full", "mute") until `resume(reason)`."""
        transport = self.transport
        if not self._pauses and transport is not None and not transport.is_closing():
            transport.pause_reading()
        self._pauses.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self._pauses:
            return
        self._pauses.discard(reason)
        transport = self.transport
        if not self._pauses and transport is not None and not transport.is_closing():
            transport.resume_reading()

    async def _more(self, have: Callable[[], Bytes], wanted: int) -> None:
        """Wait for bytes; the peer's EOF (IncompleteReadError with `have()`) or error instead."""
        if self._error is not None:
            raise self._error
        if self._eof:
            raise asyncio.IncompleteReadError(bytes(have()), wanted)
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _take(self, count: int) -> None:
        self._start += count
        if self._start == self._end:
            self._start = self._end = 0
        # Resume once half of it is free, not at the first byte taken: pausing and resuming a
        # transport costs system calls, and small pipelined frames would pay them each.
        if "full" in self._pauses and self._end - self._start <= len(self._ahead) // 2:
            self.resume("full")

    def size_now(self) -> int | None:
        """The next frame's size prefix if it is read ahead already (no await); None otherwise."""
        start = self._start
        if self._end - start < 4:
            return None
        size: int = _SIZE.unpack_from(self._ahead, start)[0]
        self._take(4)
        return size

    def frame_now(self, size: int) -> bytearray | None:
        """read_frame when the whole frame is read ahead already (no await); None otherwise."""
        start = self._start
        if self._end - start < size:
            return None
        frame = self._ahead[start:start + size]
        self._take(size)
        self._large = False
        return frame

    async def read_size(self) -> int:
        """The next frame's size prefix."""
        while self._end - self._start < _SIZE.size:
            await self._more(lambda: self._ahead[self._start:self._end], _SIZE.size)
        size: int = _SIZE.unpack_from(self._ahead, self._start)[0]
        self._take(_SIZE.size)
        return size

    async def read_frame(self, size: int) -> bytearray | memoryview:
        """The next `size` bytes, the frame's body, in a buffer of their own: a bytearray, or
        for a frame of UNZEROED_FROM bytes or more a writable memoryview of memory that was not
        zeroed (every byte of it is received before it is returned)."""
        have = self._end - self._start
        if have >= size:  # read ahead whole: copied out once
            ahead = self._ahead[self._start:self._start + size]
            self._take(size)
            self._large = False
            return ahead
        self._large = size >= UNZEROED_FROM
        frame: Buffer = np.empty(size, np.uint8).data if size >= UNZEROED_FROM else bytearray(size)
        frame[:have] = memoryview(self._ahead)[self._start:self._end]
        self._take(have)
        if self._large and len(self._ahead) > READ_AHEAD and self._start == self._end:
            self._ahead = bytearray(READ_AHEAD)  # nothing refers to it now: no read is under way
        self._body, self._body_pos = frame, have
        try:
            while self._body_pos < size:
                await self._more(lambda: frame[:self._body_pos], size)
        finally:
            self._body = None
        return frame


class ResponseWriter:
    """What the connection writes with: the transport, and waiting for it to drain (as StreamWriter)."""

    def __init__(self, transport: asyncio.Transport, reader: RequestReader) -> None:
        self.transport = transport
        self._reader = reader

    def get_extra_info(self, name: str, default: Any = None) -> Any:  # noqa: ANN401 - as asyncio's
        return self.transport.get_extra_info(name, default)

    def writelines(self, pieces: Sequence[Bytes]) -> None:
        self.transport.writelines(pieces)

    def close(self) -> None:
        self.transport.close()

    async def drain(self) -> None:
        """Until the transport's buffer is below its high-water mark; ConnectionResetError once lost."""
        reader = self._reader
        if not reader.lost:
            await reader.writable.wait()
        if reader.lost:
            raise ConnectionResetError("Connection lost")


class Connection:
    """What a handler may do to its own connection: answer, pause reading (quotas, acks=0 throttling),
    say that its request now only waits."""

    def __init__(self, reader: RequestReader, writer: ResponseWriter,
                 listener_name: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT") -> None:
        self.reader = reader
        self.writer = writer
        # The named listener this connection came in on: Metadata answers with its endpoints.
        self.listener_name = listener_name
        # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (the listener's, listener.security.protocol.map).
        self.security_protocol = security_protocol
        # Who is asking, for the authorizer: from the client certificate on SSL (set once the
        # handshake is done), from the SASL exchange on SASL_*; User:ANONYMOUS until then.
        self.principal = ANONYMOUS
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.mute_until = 0.0
        self.held: list[Bytes] | None = None  # a response being held for its throttle time
        # Set by _watch_peer: the task reading this connection, and whether the peer has gone
        # (EOF or error from the transport).
        self.task: asyncio.Task[None] | None = None
        self.peer_gone = False
        self.hangups: HangupWatch | None = None
        self.ip = peer[0] if isinstance(peer, tuple) else str(peer)
        self._loop = asyncio.get_running_loop()  # once: each get_running_loop() costs a getpid()
        self.last_active = self._loop.time()
        # Requests read and not yet answered, oldest first; those with a task keyed by it.
        self._order: deque[_Request] = deque()
        self._by_task: dict[asyncio.Task[Any], _Request] = {}
        self._eager: _Request | None = None  # the request being started in the reading task
        self._reading_done = False
        self._changed = asyncio.Event()  # a request was added or answered, or reading ended
        self._gone = asyncio.Event()
        self._holds = 0  # responses with a KIP-13 hold not yet sent
        self.held_dropped = False  # one was dropped, its client gone: read nothing more
        self._sender: asyncio.Task[None] | None = None
        self._sender_idle = True  # no sending task at work (none, or parked): a reply may go out inline
        self._kicked = asyncio.Event()  # the parked sending task has something only it handles
        self._closed = False  # a request failed or was refused: the connection closes, nothing more is sent
        # Produce appends of this connection's requests whose writes are queued and not yet done
        # (broker.log.writer): a later non-Produce request waits for them (next_may_start).
        self._appends: set[asyncio.Future[Any]] = set()
        # The socket sendfile writes file ranges to: plain TCP only (TLS encrypts in user space).
        sock = writer.get_extra_info("socket")
        plain = writer.get_extra_info("sslcontext") is None and writer.get_extra_info("ssl_object") is None
        self._sendfile_fd = sock.fileno() if plain and sock is not None else -1
        # What is sent after a file range the socket has not taken yet, in order (_pump).
        self._backlog: deque[Piece] = deque()
        self._backlog_bytes = 0
        self._file_at = 0  # bytes of the range first in the backlog already sent
        self._pumping = False
        if self._sendfile_fd >= 0:
            # resume_writing as soon as the transport has everything out: the moment to sendfile more.
            writer.transport.set_write_buffer_limits(high=0, low=0)
            reader.on_writable = self._pump

    @property
    def sends_files(self) -> bool:
        """Response pieces may be file ranges (FileSlice), sent with sendfile: a plain TCP socket."""
        return self._sendfile_fd >= 0

    @property
    def pending(self) -> deque[_Request]:
        """Requests read and not yet answered, oldest first."""
        return self._order

    @property
    def in_flight(self) -> bool:
        """A request read and not yet answered, or an answer not yet all sent (idle expiry)."""
        return bool(self._order) or bool(self._backlog)

    def _current(self) -> _Request | None:
        eager = self._eager
        if eager is not None:
            return eager
        task = asyncio.current_task(self._loop)
        return self._by_task.get(task) if task is not None else None

    def request_processed(self) -> None:
        """The current request now only waits (an acks=all produce waiting for its followers,
        a long-poll fetch): its bytes no longer count as queued, as Kafka's handler returns its
        buffer to the pool before the delayed operation completes, and the connection's next
        request may start. Without the first, produces waiting for replication could keep the
        followers' fetch requests from being read; without the second, nothing is pipelined."""
        req = self._current()
        if req is not None:
            req.mark_processed()

    def appends_submitted(self, appends: list[asyncio.Future[Any]]) -> None:
        """The current Produce request's appends have their offsets and their writes are queued
        (broker.log.writer): the connection's next request may start (the next Produce's
        appends then follow these in every partition), but one of another API waits until these
        are written (`next_may_start`: an acks=0 produce then ListOffsets or Fetch on one
        connection sees its records, as one request at a time would). The request's bytes stay
        counted in queued.max.request.bytes until its writes are done: the records are still in
        its frame until then."""
        pending = [f for f in appends if not f.done()]
        req = self._current()
        if pending:
            self._appends.update(pending)
            left = [len(pending)]
            release = _nothing
            if req is not None:
                release, req.release = req.release, _nothing

            def written(fut: asyncio.Future[Any]) -> None:
                self._appends.discard(fut)
                left[0] -= 1
                if not left[0]:
                    release()

            for f in pending:
                f.add_done_callback(written)
        if req is not None:
            req.mark_processed()

    @property
    def appends_pending(self) -> bool:
        return bool(self._appends)

    async def next_may_start(self) -> None:
        """Until every append submitted on this connection so far is written (or failed)."""
        while self._appends:
            await asyncio.wait(list(self._appends))  # never cancels them

    def mute_for(self, seconds: float) -> None:
        """Read nothing more from this connection for `seconds`."""
        self.mute_until = max(self.mute_until, self._loop.time() + seconds)

    def hold(self, pieces: Sequence[Piece], seconds: float) -> None:
        """Send this response only after `seconds`, reading nothing meanwhile."""
        req = self._current()
        if req is None:  # not from a request's task: nothing to order it with
            self._send(pieces)
            return
        req.reply = _in_memory(pieces)
        req.hold_until = self._loop.time() + seconds
        self._holds += 1
        self.mute_for(seconds)

    def write(self, pieces: Sequence[Piece]) -> None:
        """The current request's response: sent once every earlier response has been.

        When every earlier response is out already (the request is the oldest unanswered), it
        is sent now, from the request's own task: a long poll or an acks=all produce is answered
        the moment it completes, not a loop turn or two later when the sending task wakes.

        A response that waits for earlier ones has its file ranges read now, as they are at
        this moment: a follower's truncation or a compaction may change the file before it goes
        out. Only a response sent at once goes by sendfile."""
        req = self._current()
        if req is None or (self._order and self._order[0] is req):
            self._send(pieces)
        else:
            req.reply = _in_memory(pieces)

    def _send(self, pieces: Sequence[Piece]) -> None:
        """Send a response; dropped if the client has gone meanwhile.

        A response can be ready long after its request (a long poll, acks=all, a quota hold),
        and a client may reset the connection in between. Writing to the closed transport
        would raise (uvloop: RuntimeError "the handler is closed"); there is nobody to answer.
        """
        if self.writer.transport.is_closing():
            log.debug("connection.response_dropped", peer=self.peer, reason="connection closed")
            return
        if self._backlog:
            self._queue(pieces)  # behind a file range still being sent
            self._pump()
        elif FileSlice not in map(type, pieces):
            self.writer.transport.writelines(pieces)  # type: ignore[arg-type]
        elif self._sendfile_fd < 0:
            self.writer.writelines(_in_memory(pieces))
        else:
            self._queue(pieces)
            self._pump()

    # ---- file ranges by sendfile (plain TCP) ------------------------------------------------
    #
    # A response with file ranges goes into the backlog and `_pump` sends it in order: bytes
    # through the transport, each range with sendfile on the socket's descriptor once the
    # transport holds nothing unsent (everything before it is in the kernel). When the socket is
    # full (EAGAIN, a partial send), a small part of the range (SENDFILE_KICK) is read and written
    # through the transport: it waits there for the socket, and the transport's resume_writing
    # once it is out (write buffer limits 0) runs `_pump` again to sendfile the rest. uvloop's
    # transports offer no sendfile and refuse add_writer on their descriptor; this needs
    # neither. Responses written meanwhile queue behind, so the byte order is the requests'.

    def _queue(self, pieces: Sequence[Piece]) -> None:
        self._backlog.extend(pieces)
        self._backlog_bytes += sum(len(p) for p in pieces)

    def _unsent(self) -> int:
        """Bytes handed to this connection and not yet to the kernel."""
        return self.writer.transport.get_write_buffer_size() + self._backlog_bytes

    def _pump(self) -> None:
        if self._pumping:
            return
        self._pumping = True
        try:
            self._pump_backlog()
        finally:
            self._pumping = False

    def _pump_backlog(self) -> None:
        transport = self.writer.transport
        backlog = self._backlog
        while backlog:
            if transport.is_closing():
                self._drop_backlog()
                return
            if type(backlog[0]) is not FileSlice:
                batch: list[Bytes] = []
                while backlog and type(backlog[0]) is not FileSlice:
                    piece = backlog.popleft()
                    self._backlog_bytes -= len(piece)
                    batch.append(piece)  # type: ignore[arg-type]
                transport.writelines(batch)
                continue
            if transport.get_write_buffer_size():
                return  # resume_writing calls again once the transport has it all out
            piece = backlog[0]
            assert type(piece) is FileSlice
            if not self._send_file(transport, piece):
                return  # failed, the connection closed
            if self._file_at == piece.length:
                backlog.popleft()
                self._backlog_bytes -= piece.length
                self._file_at = 0

    def _send_file(self, transport: asyncio.Transport, piece: FileSlice) -> bool:
        """Send what is left of `piece` by sendfile; when the socket is full, the next part
        through the transport. False when the range cannot be read whole (the connection is closed)."""
        at, length = self._file_at, piece.length
        sent = 0
        try:
            while at + sent < length:
                count = os.sendfile(self._sendfile_fd, piece.fd, piece.position + at + sent, length - at - sent)
                if count == 0:
                    break  # the file ends before the range: pread below tells
                sent += count
        except BlockingIOError:
            pass  # the socket's buffer is full
        except OSError as e:
            # The socket's error (the transport learns of it by writing) or the file's (pread says).
            log.debug("connection.sendfile_failed", peer=self.peer, error=str(e))
        SENDFILE_BYTES[0] += sent
        at += sent
        if at < length:
            want = min(SENDFILE_KICK, length - at)
            try:
                part = os.pread(piece.fd, want, piece.position + at)
            except OSError as e:
                part = b""
                log.error("connection.response_read_failed", peer=self.peer, error=str(e))
            if len(part) < want:
                # Its size is on the wire already: the response cannot be finished (Kafka's
                # FileRecords.writeTo fails likewise on a file cut back); only this connection pays.
                log.error("connection.response_cut", peer=self.peer, missing=length - at - len(part))
                self._drop_backlog()
                transport.abort()
                return False
            SENDFILE_BYTES[1] += len(part)
            transport.write(part)
            at += len(part)
        self._file_at = at
        return True

    def _drop_backlog(self) -> None:
        self._backlog.clear()
        self._backlog_bytes = 0
        self._file_at = 0

    def _backlog_to_transport(self) -> None:
        """Hand what is left to the transport (read into memory): before it is closed, which
        sends what it holds first, as it did before sendfile."""
        if not self._backlog:
            return
        transport = self.writer.transport
        if not transport.is_closing():
            first = self._backlog[0]
            if type(first) is FileSlice and self._file_at:
                self._backlog[0] = FileSlice(first.file, first.position + self._file_at, first.length - self._file_at)
            try:
                transport.writelines(_in_memory(self._backlog))
            except OSError as e:
                log.error("connection.response_read_failed", peer=self.peer, error=str(e))
                transport.abort()
        self._drop_backlog()

    async def _wait_sent(self) -> None:
        """Until at most WRITE_HIGH_WATER bytes are unsent (a client that does not read its
        answers holds up reading its next requests)."""
        transport = self.writer.transport
        with contextlib.suppress(ConnectionError):
            while not transport.is_closing() and self._unsent() > WRITE_HIGH_WATER:
                await self.writer.drain()

    async def wait_until_unmuted(self) -> bool:
        """Before reading the next request: wait out a mute. False when the peer hung up while a
        response was held (the frames it sent after are dropped with it)."""
        if self.held_dropped or (self.peer_gone and self._holds):
            return False
        if not self.mute_until:
            return True
        loop = asyncio.get_running_loop()
        delay = self.mute_until - loop.time()
        self.mute_until = 0.0
        transport = self.writer.transport
        if delay <= 0 or transport.is_closing():
            return True
        self.reader.pause("mute")
        try:
            if self._holds:
                # A held response's client hanging up ends the wait (the sender watches for it).
                try:
                    await asyncio.wait_for(self._gone.wait(), delay)
                except TimeoutError:
                    return True
                return False
            await asyncio.sleep(delay)
            return True
        finally:
            self.reader.resume("mute")

    def peer_went(self) -> None:
        """The peer closed or reset the connection: cut short what waits abandonably now.

        Requests that must run to their end (admin, controller: their ZooKeeper writes are not
        cut short) keep running, but the socket is released now, as Kafka's selector closes a
        disconnected channel at once and drops the response when it comes: a client cannot
        hold file descriptors by leaving requests with long timeouts behind it."""
        if self.peer_gone:
            return
        self.peer_gone = True
        self._gone.set()
        busy = False
        for req in self._order:
            task = req.task
            if task is None or task.done():
                continue
            if req.abandonable:
                task.cancel()
            else:
                busy = True
        if busy:
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

    async def run_abandonable(self, aw: Awaitable[T]) -> T:
        """Await `aw`; if the peer goes meanwhile (or has gone), the current request's task is cancelled.

        For requests whose waits hold nothing anyone else needs (the dispatcher decides which):
        the owner is gone, so the response would be written to nobody. A peer already gone
        still has its request run up to its first wait (a Produce appends before that, so
        an acks=0 producer that sends and closes loses nothing).
        """
        req = self.begin_abandonable()
        if req is None:
            return await aw
        try:
            return await aw
        finally:
            req.abandonable = False

    async def leave_reader(self) -> None:
        """Called by a request started in the reading task (`start`, eager) before anything bound
        to the task it runs in (asyncio.timeout, as every ZooKeeper call uses): from here it
        continues in a task of its own. Otherwise nothing."""
        if self._eager is not None:
            await asyncio.sleep(0)

    def begin_abandonable(self) -> _Request | None:
        """run_abandonable without a coroutine of its own (the dispatcher's hot path): marks the
        current request abandonable and returns it; the caller resets `abandonable` after its
        wait. A request started in the reading task has no task to cancel yet: `start` cancels
        the one it gets if the peer has gone by then."""
        req = self._current()
        if req is None:
            return None
        req.abandonable = True
        if self.peer_gone and req.task is not None:
            req.task.cancel()
        return req

    # ---- the pipeline (the listener's reading task, and the sending task) -----------------

    async def wait_for_room(self, max_in_flight: int) -> None:
        while len(self._order) >= max_in_flight:
            self._changed.clear()
            await self._changed.wait()

    def start(self, handling: Coroutine[Any, Any, bool], release: Callable[[], None],
              eager: bool = False) -> _Request:
        """Run one request; its response is sent after every earlier one.

        In a task of its own, or with `eager` first here, in the reading task, up to its first
        wait: a request answered without waiting (an acks=1 Produce, a Fetch with data ready)
        then costs no task, no future and no loop turn, and one that waits continues in a task
        from where it stopped. Eager requests must not depend on the task they run in up to
        their first wait (asyncio.timeout, current_task): the dispatcher names the APIs."""
        req = _Request(release)
        self._order.append(req)
        loop = self._loop
        self.last_active = loop.time()
        if eager:
            self._eager = req
            try:
                yielded = handling.send(None)
            except StopIteration as stop:
                req.result = bool(stop.value)
                req.finished = True
                req.mark_processed()
                return req
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # as a task would hold it (a CancelledError: cancelled)
                req.error = e
                req.finished = True
                req.mark_processed()
                return req
            finally:
                self._eager = None
            handling = _Resumed(handling, yielded)
        task = loop.create_task(handling)
        req.task = task
        self._by_task[task] = req
        task.add_done_callback(lambda _: self._task_done(req))
        req.watch = loop.call_later(WATCH_AFTER_S, self.watch_hangup)
        if eager and req.abandonable and self.peer_gone:
            task.cancel()  # as run_abandonable would have (its wait is cut short)
        return req

    async def settle(self, req: _Request) -> bool:
        """Wait until `req` is processed (done, or only waiting); False when nothing more may be read.

        The common case, a request answered at once with nothing before it still waiting, is
        answered here, in the reading task: the sending task exists for the requests that wait,
        and a connection that never has one waiting costs no second task or wake-up."""
        if not req.processed:
            req.waiter = self._loop.create_future()
            await req.waiter
            req.waiter = None
        if self._unsent() > WRITE_HIGH_WATER:
            await self._wait_sent()  # answers the client does not read hold up its next requests
        if (req.task is None and req.error is None and self._sender_idle and self._order
                and self._order[0] is req and not req.hold_until):
            # Finished in this task (Connection.start, eager), the oldest, nothing to hold: the
            # common case of the test below, without its calls.
            if req.result and req.reply is not None:
                self._send(req.reply)
            self._answered(req, notify=False)
            return req.result
        done = req.done()
        if (done and self._sender_idle and self._order and self._order[0] is req
                and not req.cancelled() and req.failure() is None and not req.hold_until):
            handled = req.handled()
            if handled and req.reply is not None:  # None: sent already, or nothing to send
                self._send(req.reply)
            self._answered(req, notify=False)
            return handled
        self._deliver()  # finished and first (then answered above, unless only the sending task may)
        return not (done and (req.cancelled() or req.failure() is not None or not req.handled()))

    def _task_done(self, req: _Request) -> None:
        """A request's task ended: the next request may start, and its answer (with those after
        it that are ready) goes out now if it is the oldest."""
        req.mark_processed()
        self._deliver()

    def _deliver(self) -> None:
        """The answers of the finished requests at the head of the order, in order, in one write,
        here and now: the sending task's common case without waking it. Stops at a request still
        running (its task's end calls this again), and leaves to the sending task (`_kick`) what
        only it handles: a held response (KIP-13), a failed, refused or abandoned request, a
        client not reading its answers. Nothing while that task is at work: it goes on in order
        and looks at the head again before it parks."""
        if not self._sender_idle:
            return
        order = self._order
        batch: list[Bytes] = []
        while order:
            req = order[0]
            if not req.done():
                break
            if (self._closed or req.hold_until or req.cancelled() or req.failure() is not None
                    or not req.handled() or self._unsent() > WRITE_HIGH_WATER):
                self._kick()
                break
            if req.reply is not None:
                batch.extend(req.reply)
            self._answered(req)
        if batch:
            self._send(batch)
        if self._reading_done and not order and self._sender is not None:
            self._kicked.set()  # so that a parked sending task ends

    def _kick(self) -> None:
        """The sending task looks at the head of the order (started if there is none)."""
        if self._sender is None:
            self._sender_idle = False  # at work from now until it parks
            self._sender = self._loop.create_task(self._send_in_order())
        else:
            self._kicked.set()

    async def _send_in_order(self) -> None:
        """The responses, strictly in request order; a failed or refused request closes the connection.

        Started for what `_deliver` leaves to it, it answers requests in order while their tasks
        are done, then parks until kicked again: a request finishing later is answered by
        `_deliver` from its task's end, not by waking this task. Responses that are ready
        together go out in one write: one system call for the lot."""
        loop = self._loop
        ready: list[Bytes] = []
        while True:
            order = self._order
            if not order or not order[0].done():
                await self._flush(ready)  # nothing more is ready to go with them
                if not order or not order[0].done():  # (the flush may have waited for the client)
                    if self._reading_done and not order:
                        return
                    self._kicked.clear()
                    self._sender_idle = True
                    try:
                        await self._kicked.wait()
                    finally:
                        self._sender_idle = False
                    continue
            req = order[0]
            try:
                if self._closed or req.cancelled():
                    continue  # abandoned: its client is gone
                error = req.failure()
                if error is not None:
                    log.error("connection.failed", peer=self.peer, exc_info=error)
                    self._closed = True
                    await self._flush(ready)
                    self.writer.close()
                    continue
                if not req.handled():  # a frame the dispatcher refused: close after the answers before it
                    self._closed = True
                    await self._flush(ready)
                    self.writer.close()
                    continue
                if req.reply is None:  # acks=0 produce: Kafka sends nothing back
                    continue
                if req.hold_until:
                    await self._flush(ready)
                    await self._hold(req, req.hold_until - loop.time())
                    if self.peer_gone:
                        self.held_dropped = True
                        continue
                ready.extend(req.reply)
            finally:
                self._answered(req)

    async def _flush(self, ready: list[Bytes]) -> None:
        if not ready:
            return
        self._send(ready[:])
        ready.clear()
        if self._unsent() > WRITE_HIGH_WATER:
            await self._wait_sent()

    def _answered(self, req: _Request, notify: bool = True) -> None:
        if not self._order or self._order[0] is not req:
            return  # answered already
        self._order.popleft()
        if req.task is not None:
            self._by_task.pop(req.task, None)
        if req.hold_until:
            self._holds -= 1
        req.release()
        req.reply = None
        if req.watch is not None:
            req.watch.cancel()
        if not self._order and self.hangups:
            self.unwatch_hangup()
        self.last_active = self._loop.time()
        if notify:
            self._changed.set()

    async def _hold(self, req: _Request, delay: float) -> None:
        """Wait out a held response's throttle time; a peer hanging up meanwhile ends it.

        Reading is paused (the reading task waits out the same mute), so the reader learns
        nothing of the peer until the hold ends; the hang-up watch sees it on the socket itself.
        """
        if delay <= 0:
            return
        self.held = req.reply
        fd = self._fd()
        watched = self.hangups is not None and fd >= 0
        if watched and self.hangups is not None:
            self.hangups.add(fd, self)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._gone.wait(), delay)
        finally:
            self.held = None
            if watched and self.hangups is not None:
                self.hangups.discard(fd, self)

    async def finish(self, abort: bool) -> None:
        """Reading has ended: answer what was read (or cancel it all, when the listener stops)."""
        self._reading_done = True
        self._changed.set()
        self._kicked.set()  # a parked sending task looks again (and ends, once all is answered)
        tasks: list[asyncio.Task[Any]] = [r.task for r in self._order if r.task is not None]
        for req in self._order:
            if req.task is not None and (abort or (self.peer_gone and req.abandonable)):
                req.task.cancel()
        if self._sender is not None:
            if abort:
                self._sender.cancel()
            tasks.append(self._sender)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        # What the requests' ends left to the sending task (one may have started it meanwhile).
        self._deliver()
        while self._sender is not None and not self._sender.done():
            if abort:
                self._sender.cancel()
            self._kicked.set()
            await asyncio.gather(self._sender, return_exceptions=True)
        self._backlog_to_transport()
        for req in self._order:
            req.release()
            if req.watch is not None:
                req.watch.cancel()


def _in_memory(pieces: Sequence[Piece]) -> list[Bytes]:
    """The pieces with each file range read (pread) into bytes."""
    return [p.read_bytes() if type(p) is FileSlice else p for p in pieces]  # type: ignore[misc]


# Bytes of file ranges sent by sendfile, and read with pread to wait for the socket through the
# transport (for tests and profiling; not a metric).
SENDFILE_BYTES = [0, 0]
# The part of a range written through the transport when the socket is full: small, as it is
# copied, and enough to wait in the transport until the socket takes more.
SENDFILE_KICK = 16 << 10

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

    def __len__(self) -> int:
        """Sockets watched (none, almost always: a connection not watched need not be looked up)."""
        return len(self._conns)

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

    The reading task may be waiting (for room in the pipeline, for a request to be processed),
    but the transport keeps reading ahead meanwhile, and RequestReader reports EOF and
    connection loss at once (Connection.peer_went), also when they came before the task ran.
    """
    conn.task = task
    conn.hangups = hangups
    conn.reader.on_gone = conn.peer_went
    if conn.reader.lost or conn.reader.at_eof:
        conn.peer_went()


class ConnectionLimits:
    """Connection counts (total and per IP), idle expiry and the queued request bytes of one broker."""

    def __init__(self, max_connections: int = (1 << 31) - 1, max_per_ip: int = (1 << 31) - 1,
                 per_ip_overrides: dict[str, int] | None = None, idle_ms: int = -1,
                 queued_max_bytes: int = -1, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.idle_s = idle_ms / 1000 if idle_ms >= 0 else None
        self.queued_max_bytes = queued_max_bytes if queued_max_bytes > 0 else None
        self.max_in_flight = max(1, max_in_flight)
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

    async def reserve(self, size: int) -> Callable[[], None]:
        """Before reading a request body of `size` bytes: waits while the queued bytes are at
        their bound, then counts them until the returned release is called (once processed)."""
        bound = self.queued_max_bytes
        if bound is None:
            return _nothing
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
        return release

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
                if conn.in_flight or conn.mute_until > now:
                    continue
                if now - conn.last_active >= idle_s:
                    log.info("connection.idle_closed", peer=conn.peer, idle_ms=int((now - conn.last_active) * 1000))
                    conn.writer.close()
                    conn.last_active = now  # closed once; the serving task ends on its own


class Listener:
    def __init__(self, dispatcher: Dispatcher, host: str, port: int, max_frame_bytes: int,
                 limits: ConnectionLimits | None = None, name: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT", tls: ListenerTls | None = None) -> None:
        self.name = name
        self.security_protocol = security_protocol
        self.tls = tls  # SSL and SASL_SSL listeners: the TLS context and principal mapping
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
        self._sasl = security_protocol in SASL_PROTOCOLS  # frames bounded until authenticated

    async def start(self) -> None:
        await self.limits.resolve_overrides()
        def frames() -> asyncio.Protocol:
            # A BufferedProtocol: what protocol_factory's TLS protocol drives as its app protocol.
            return cast(asyncio.Protocol, RequestReader(self._accepted))

        # TLS listeners: the same reader behind the TLS handshake (broker/security/ssl_listener.py);
        # uvloop's and asyncio's TLS protocols drive a BufferedProtocol.
        factory = frames if self.tls is None else self.tls.protocol_factory(self.name, frames)
        self._server = await asyncio.get_running_loop().create_server(factory, self.host, self.port,
                                                                      reuse_address=True)
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

    def _accepted(self, reader: RequestReader, writer: ResponseWriter) -> None:
        """A connection is made: its serving task (what asyncio.start_server's callback was)."""
        task = asyncio.get_running_loop().create_task(self._on_connect(reader, writer))
        self._tasks.add(task)

        def done(_: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            writer.close()  # already closed, unless the task was cancelled before it ran
        task.add_done_callback(done)

    async def _on_connect(self, reader: RequestReader, writer: ResponseWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Connection(reader, writer, self.name, self.security_protocol)
        if self.tls is not None and self.security_protocol == "SSL":  # SASL_SSL: the SASL exchange names it
            try:
                conn.principal = self.tls.principal(writer.get_extra_info("ssl_object"))
            except ValueError as e:  # no ssl.principal.mapping.rules rule applies, or a malformed subject
                log.warning("connection.tls_principal_refused", peer=conn.peer, listener=self.name, reason=str(e))
                self._tasks.discard(task)
                writer.transport.abort()
                return
        refused = self.limits.admit(conn)
        if refused:
            log.warning("connection.refused", peer=conn.peer, reason=refused)
            self._tasks.discard(task)
            writer.close()
            return
        _watch_peer(conn, task, self._hangups)
        self.connections.add(conn)
        abort = False
        try:
            await self._serve(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away, possibly mid-request; what it sent before is still answered
        except asyncio.CancelledError:
            # The listener stops: the task ends normally, else asyncio's start_server callback
            # logs a CancelledError traceback for every connection still waiting at shutdown.
            abort = True
            if not self._stopping:
                raise
        except Exception:
            log.exception("connection.failed", peer=conn.peer)
            abort = True
        finally:
            try:
                await conn.finish(abort=abort or self._stopping)
            finally:
                self.limits.release(conn)
                self.connections.discard(conn)
                self._tasks.discard(task)
                writer.close()

    async def _sasl_admits(self, conn: Connection, size: int) -> bool:
        """A SASL listener's bound on frames before authentication (`sasl.server.max.receive.size`),
        checked on the size prefix, so an unauthenticated client cannot make the broker buffer up
        to socket.request.max.bytes. The request before this one has settled (`conn.settle`), so
        the session's state is that of every request read so far."""
        sasl = self.dispatcher.services.sasl
        session = sasl.session(conn)
        if session is None:
            return True
        verdict = session.admit_frame(size)
        if verdict is Verdict.PASS:
            return True
        if verdict is Verdict.CLOSE_AFTER_DELAY:
            # Kafka's authentication-failure delay and close; the body is never read.
            why = (f"a frame of {size} bytes above sasl.server.max.receive.size "
                   f"({session.listener.max_receive_size})" if size >= 0 else f"an invalid frame size ({size})")
            await asyncio.sleep(sasl.failed(conn, session, why))
        return False

    async def _serve(self, conn: Connection) -> None:
        reader = conn.reader
        limits = self.limits
        max_in_flight = limits.max_in_flight
        # The dispatcher's choice of requests started in this task (Connection.start, eager).
        eager = getattr(self.dispatcher, "starts_at_once", None)
        while True:
            # Each wait is entered only when it may wait: a coroutine call per request less.
            if (conn.mute_until or conn.peer_gone or conn.held_dropped) and not await conn.wait_until_unmuted():
                return
            if len(conn.pending) >= max_in_flight:
                await conn.wait_for_room(max_in_flight)
            size = reader.size_now()
            if size is None:
                size = await reader.read_size()
            # Before authentication first: there Kafka reads every frame through the SASL
            # authenticator's bounded receive, so a negative size or one above
            # socket.request.max.bytes is an authentication failure as well (counted, delayed).
            if self._sasl and not await self._sasl_admits(conn, size):
                return
            if size < 0 or size > self.max_frame_bytes:
                # Refused before a buffer for it exists; only this connection pays.
                log.warning("connection.bad_frame_size", peer=conn.peer, size=size,
                            limit=self.max_frame_bytes)
                return
            release = _nothing if limits.queued_max_bytes is None else await limits.reserve(size)
            try:
                frame: Buffer | None = reader.frame_now(size)
                if frame is None:
                    frame = await reader.read_frame(size)
            except BaseException:
                release()
                raise
            # The frame is referenced only by its request's task, so a response held for its
            # throttle time no longer keeps the request's records alive.
            req = conn.start(self.dispatcher.handle(conn, frame), release,
                             eager is not None and eager(frame))
            del frame
            # Appends stay in arrival order: the next request starts once this one is done or waits.
            if not await conn.settle(req):
                return  # refused, failed or abandoned: read nothing more


def _nothing() -> None:
    pass


Handler = Callable[..., Awaitable[object]]
