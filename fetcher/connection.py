"""An async Kafka connection: framing, correlation ids, responses matched in order.

Used by the replica fetchers, the command-line tools, benches and tests. Kafka answers a
connection's requests in order, so responses are matched to a FIFO of pending requests
and a correlation-id mismatch is a protocol violation that closes the connection.

On a SASL listener whose broker sets `connections.max.reauth.ms` (KIP-368) the connection
re-authenticates itself before the first request sent once `sasl_client.ReauthSchedule` says so:
that request, and any sent meanwhile, wait until the SaslHandshake/SaslAuthenticate exchange is
answered, since the broker lets nothing else through while it runs. Requests already in flight
are answered first (the broker handles a connection's requests in order).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from fetcher import sasl_client
from fetcher.security import PLAINTEXT, ClientSecurity
from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.framing import frame
from protocol.headers import encode_request_header, response_header_size
from protocol.layouts import FRAME_SIZE, REQUEST_HEADER_FIXED
from protocol.messages.types import Api, RequestT, ResponseT
from protocol.schema import request_codec, response_codec

# The frame's size and a request header's fixed part (protocol.layouts' FRAME_SIZE, REQUEST_HEADER_FIXED).
_FRAME_AND_HEADER = struct.Struct(">ihhih")
# What one read takes in before a response's own buffer is known: a replica fetcher's usual
# response whole, the start of a large one.
_SCRATCH_BYTES = 64 * 1024
# A response larger than this is a broken stream, not a response (brokers cap theirs far lower).
MAX_RESPONSE_BYTES = 1 << 30


class _FrameProtocol(asyncio.BufferedProtocol):
    """Reads responses into a scratch buffer, and each into a buffer of its own size.

    A 10 MB fetch response through a StreamReader is copied into its buffer, sliced out and
    shifted down; here whatever part of a response the first read brings is copied once into
    the response's final bytearray and the rest lands there straight from the kernel, so record
    bytes stay slices of it all the way to the log write. A small response (a replica fetcher's
    usual one) comes whole in one read: reading the 4-byte size first and then the body took
    three reads and three trips through get_buffer for each.
    """

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(_SCRATCH_BYTES)
        self._have = 0  # bytes at the start of _scratch not yet taken (part of a frame's size)
        self._body: memoryview | None = None  # the frame being read past the scratch, if any
        self._spare: bytearray | None = None
        self._pos = 0
        self._writable = asyncio.Event()
        self._writable.set()
        # Its loop, looked up once: asyncio.get_running_loop() makes a getpid system call each time.
        self.loop = asyncio.get_running_loop()
        self.closed = self.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # create_connection makes a stream transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is None:
            return memoryview(self._scratch)[self._have:]
        return self._body[self._pos:]

    def buffer_updated(self, nbytes: int) -> None:
        body = self._body
        if body is not None:
            self._pos += nbytes
            if self._pos == len(body):
                self._body, self._pos = None, 0
                self.conn._on_frame(body)
            return
        have = self._have + nbytes
        scratch = self._scratch
        pos = 0
        while have - pos >= 4:
            (size,) = FRAME_SIZE.unpack_from(scratch, pos)
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                self.conn._fail(ProtocolError(f"response size {size} is out of range"))
                if self.transport is not None:
                    self.transport.abort()
                return
            start = pos + 4
            frame = memoryview(self._frame_buffer(size))
            if have - start < size:
                # The rest of this response is read straight into its buffer.
                frame[:have - start] = memoryview(scratch)[start:have]
                self._body, self._pos = frame, have - start
                self._have = 0
                return
            frame[:] = memoryview(scratch)[start:start + size]
            pos = start + size
            self.conn._on_frame(frame)
            if self.conn._closed_exc is not None:
                return
        left = have - pos
        if left:
            scratch[:left] = scratch[pos:have]
        self._have = left

    def _frame_buffer(self, size: int) -> bytearray | memoryview:
        """A fresh buffer, or for a fetch response on a reusing connection the recycled one.

        Zero-filling a fresh 32 MB bytearray (and faulting its pages in) cost a sixth of a
        follower's CPU. A replica fetcher has appended every byte of one fetch response before
        it sends the next Fetch, so that response's buffer can take the next one; responses
        to other requests (a ListOffsets sent while a response is being handled) never do.
        """
        pending = self.conn._pending
        if not (self.conn.reuse_fetch_buffers and pending and pending[0][1] == ApiKey.FETCH):
            return bytearray(size)
        if self._spare is None or len(self._spare) < size:
            self._spare = bytearray(size)
        return memoryview(self._spare)[:size]

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn._fail(exc or ConnectionError("closed by the peer"))
        self._writable.set()
        if not self.closed.done():
            self.closed.set_result(None)


@functools.lru_cache(maxsize=16)
def _ssl_context(security: ClientSecurity) -> ssl.SSLContext | None:
    """One TLS context per security setting: a replica fetcher or tool that reconnects does not
    re-read its PEM files (or rewrite an inline key to a temporary file) every time."""
    return security.ssl_context()


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str = "minibroker-tool",
                 reuse_fetch_buffers: bool = False, security: ClientSecurity | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.security = security or PLAINTEXT
        # Only for a caller that is done with one fetch response before it sends the next Fetch.
        self.reuse_fetch_buffers = reuse_fetch_buffers
        self.port = port
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: collections.deque[tuple[int, int, int, asyncio.Future[memoryview]]] = collections.deque()
        self._protocol: _FrameProtocol | None = None
        self._closed_exc: BaseException | None = None
        self._reauth = sasl_client.ReauthSchedule(clock)
        self._reauth_task: asyncio.Task[None] | None = None
        self._auth_timeout = 10.0
        self._client_id_bytes = client_id.encode()
        self._header_tails: dict[tuple[int, int], bytes] = {}  # (api key, version) -> header after its fixed part
        # send_within's requests awaiting an answer and their deadlines (loop time), and its one timer.
        self._deadlines: collections.deque[tuple[float, asyncio.Future[memoryview]]] = collections.deque()
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_timer_at = 0.0

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "minibroker-tool", timeout: float = 10,
                   reuse_fetch_buffers: bool = False, security: ClientSecurity | None = None,
                   clock: Callable[[], float] = time.monotonic) -> KafkaConnection:
        """Connects; over SSL/SASL_SSL the TLS handshake is done (server certificate verified) on return.

        Raises SecurityConfigError for unusable key material, ssl.SSLError (e.g. a certificate
        that does not verify), fetcher.sasl_client.SaslAuthenticationError when the broker refuses the
        SASL login, or OSError/TimeoutError for the connection itself."""
        conn = cls(host, port, client_id, reuse_fetch_buffers, security, clock)
        conn._auth_timeout = timeout
        loop = asyncio.get_running_loop()
        ctx = _ssl_context(conn.security)
        if ctx is None:
            _, conn._protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _FrameProtocol(conn), host, port), timeout)
        else:
            _, conn._protocol = await asyncio.wait_for(
                loop.create_connection(lambda: _FrameProtocol(conn), host, port, ssl=ctx, server_hostname=host,
                                       ssl_handshake_timeout=timeout), timeout)
        security = conn.security
        if security.uses_sasl and security.sasl_mechanism:
            # SaslHandshake v1 + SaslAuthenticate, after TLS and before the connection is handed out.
            try:
                await conn._authenticate()
            except BaseException:
                await conn.close()
                raise
        return conn

    async def _authenticate(self) -> None:
        """SaslHandshake + SaslAuthenticate, then the next re-authentication scheduled (if the broker
        granted a session lifetime). Its requests go out directly, past the re-authentication wait."""
        security = self.security
        assert security.sasl_mechanism is not None

        async def send(api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
            raw = await self._send_now(api_key, version, request_codec(api_key, version).encode(body))
            assert raw is not None
            return response_codec(api_key, version).decode(raw)
        lifetime_ms = await asyncio.wait_for(sasl_client.authenticate(
            send, security.sasl_mechanism, security.sasl_username or "", security.sasl_password or ""),
            self._auth_timeout)
        self._reauth.authenticated(lifetime_ms)

    async def _reauthenticate(self) -> None:
        """KIP-368 on this connection. Raises only its own cancellation: a failure (refused, timed out, lost)
        closes the connection, and the requests waiting for it then fail with ConnectionError."""
        try:
            await self._authenticate()
        except BaseException as e:
            self._fail(e if isinstance(e, ConnectionError) else ConnectionError(f"re-authentication failed: {e!r}"))
            if isinstance(e, sasl_client.SaslAuthenticationError):
                self._closed_exc = e  # the reason, over the close by the broker that follows a refusal
            proto = self._protocol
            if proto is not None and proto.transport is not None:
                proto.transport.abort()
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self._reauth_task = None

    async def _reauthenticated(self) -> None:
        """Waits for the re-authentication in progress, starting it if it is due (one at a time)."""
        task = self._reauth_task
        if task is None or task.done():  # done: cancelled before it ran (its finally never did)
            task = self._reauth_task = asyncio.get_running_loop().create_task(self._reauthenticate())
        # Shielded: a caller's own timeout or cancellation must not cut the exchange in half.
        await asyncio.shield(task)

    def _header(self, api_key: int, version: int, correlation_id: int) -> bytes:
        return encode_request_header(api_key, version, correlation_id, self.client_id)

    async def send_raw(self, api_key: int, version: int, body: bytes,
                       expect_response: bool = True) -> memoryview | None:
        """Send an encoded body; return the encoded response body (header stripped), a view of its frame."""
        if self._reauth_task is not None or self._reauth.due():
            await self._reauthenticated()
        return await self._send_now(api_key, version, body, expect_response)

    def send_within(self, api_key: int, version: int, body: bytes, timeout: float) -> asyncio.Future[memoryview]:
        """`send_raw`, its response awaited within `timeout` seconds, else TimeoutError (the connection
        is then the caller's to close): the replica fetcher's every round of replication.

        Written at once and answered through a plain future, where a coroutine under
        `asyncio.timeout` cost two coroutine frames, a Timeout object and a timer handle per
        request: one timer serves every request's deadline here (_check_deadlines), re-armed only
        when it fires, about once a timeout while answers come in time. What is awaited is the
        response, not the socket's write buffer draining: it cannot arrive before its request is
        written. A re-authentication due or running takes the general path, as a task under
        asyncio.timeout."""
        if self._reauth_task is not None or self._reauth.due():
            return asyncio.ensure_future(self._send_within_slowly(api_key, version, body, timeout))
        proto = self._protocol
        if proto is None or proto.transport is None or self._closed_exc is not None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed") from self._closed_exc
        correlation_id = next(self._ids) & 0x7FFFFFFF
        loop = proto.loop
        fut: asyncio.Future[memoryview] = loop.create_future()
        self._pending.append((correlation_id, api_key, version, fut))
        tail = self._header_tails.get((api_key, version))
        if tail is None:
            tail = self._header_tails[(api_key, version)] = self._header(api_key, version, 0)[REQUEST_HEADER_FIXED.size:]
        proto.transport.write(_FRAME_AND_HEADER.pack(REQUEST_HEADER_FIXED.size + len(tail) + len(body), api_key,
                                                     version, correlation_id, len(self._client_id_bytes))
                              + tail + body)
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()
        when = loop.time() + timeout
        deadlines.append((when, fut))
        if self._deadline_timer is None or when < self._deadline_timer_at:
            self._arm_deadline_timer(loop, when)
        return fut

    def _arm_deadline_timer(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_timer = loop.call_at(when, self._check_deadlines)
        self._deadline_timer_at = when

    async def _send_within_slowly(self, api_key: int, version: int, body: bytes, timeout: float) -> memoryview:
        async with asyncio.timeout(timeout):
            raw = await self.send_raw(api_key, version, body)
        assert raw is not None
        return raw

    def _check_deadlines(self) -> None:
        """send_within's timer: times out what is past its deadline, and re-arms for the earliest left."""
        self._deadline_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        left: collections.deque[tuple[float, asyncio.Future[memoryview]]] = collections.deque()
        for when, fut in self._deadlines:
            if fut.done():
                continue
            if when <= now:
                fut.set_exception(TimeoutError())
            else:
                left.append((when, fut))
        self._deadlines = left
        if left:
            self._arm_deadline_timer(loop, min(when for when, _ in left))

    async def _send_now(self, api_key: int, version: int, body: bytes,
                        expect_response: bool = True) -> memoryview | None:
        proto = self._protocol
        if proto is None or proto.transport is None or self._closed_exc is not None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed") from self._closed_exc
        correlation_id = next(self._ids) & 0x7FFFFFFF
        fut: asyncio.Future[memoryview] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending.append((correlation_id, api_key, version, fut))
        proto.transport.writelines(frame(self._header(api_key, version, correlation_id), body))
        await proto._writable.wait()
        if fut is None:
            if self._closed_exc is not None:
                raise ConnectionError(f"connection to {self.host}:{self.port} lost") from self._closed_exc
            return None
        return await fut

    async def request(self, api_key: int, version: int, body: Mapping[str, Any],
                      timeout: float = 30) -> dict[str, Any]:
        raw = await asyncio.wait_for(
            self.send_raw(api_key, version, request_codec(api_key, version).encode(body)), timeout)
        assert raw is not None
        return response_codec(api_key, version).decode(raw)

    async def call(self, api: Api[RequestT, ResponseT], version: int, body: RequestT,
                   timeout: float = 30) -> ResponseT:
        """`request`, typed by protocol.messages.types: the body is checked, the response is a TypedDict.

        Pass the body as a TypedDict value, `conn.call(types.LIST_OFFSETS, 1, types.ListOffsetsRequest(...))`
        (mypy cannot infer the request type from a bare dict literal here).
        """
        # The codec decodes exactly the fields the declarations (and so the TypedDicts) list.
        return cast(ResponseT, await self.request(api.key, version, body, timeout))

    def _on_frame(self, data: bytearray | memoryview) -> None:
        if not self._pending:
            self._fail(ProtocolError("a response arrived with no request pending"))
            return
        correlation_id, api_key, version, fut = self._pending.popleft()
        (got,) = FRAME_SIZE.unpack_from(data)
        if got != correlation_id:
            self._fail(ProtocolError(f"correlation id {got} does not match the expected {correlation_id}"))
            return
        try:
            skip = response_header_size(api_key, version, data)
        except ProtocolError as e:
            self._fail(e)
            return
        if not fut.done():
            fut.set_result(memoryview(data)[skip:])

    def _fail(self, exc: BaseException) -> None:
        if self._closed_exc is None:
            self._closed_exc = exc
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        self._deadlines.clear()
        while self._pending:
            *_, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}"))
        proto = self._protocol
        if isinstance(exc, ProtocolError) and proto is not None and proto.transport is not None:
            proto.transport.abort()

    async def close(self) -> None:
        proto = self._protocol
        if proto is None or proto.transport is None:
            return
        self._fail(ConnectionError("closed"))
        proto.transport.close()
        try:
            # A peer that stopped reading would hold the close forever; give up and abort.
            await asyncio.wait_for(asyncio.shield(proto.closed), 2)
        except Exception:
            proto.transport.abort()

    async def __aenter__(self) -> KafkaConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
