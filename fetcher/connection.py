"""An async Kafka connection: framing, correlation ids, responses matched in order.

Used by the replica fetchers, the command-line tools, benches and tests. Kafka answers a
connection's requests in order, so responses are matched to a FIFO of pending requests
and a correlation-id mismatch is a protocol violation that closes the connection.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from protocol.errors import ProtocolError
from protocol.framing import frame
from protocol.schema import flexible, request_codec, response_codec

_SIZE = struct.Struct(">i")
_REQ_HEADER = struct.Struct(">hhi")
API_VERSIONS = 18


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ProtocolError("bad unsigned varint in response header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def response_header_size(api_key: int, version: int, data: bytes) -> int:
    """Response header v0 is the correlation id; v1 adds tagged fields (never for ApiVersions)."""
    if api_key == API_VERSIONS or not flexible(api_key, version, request=False):
        return 4
    count, pos = _uvarint(data, 4)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str = "minibroker-tool") -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: asyncio.Queue[tuple[int, int, int, asyncio.Future[Any]]] = asyncio.Queue()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._closed_exc: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "minibroker-tool", timeout: float = 10) -> KafkaConnection:
        conn = cls(host, port, client_id)
        conn._reader, conn._writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=1 << 22), timeout)
        conn._read_task = asyncio.create_task(conn._read_loop())
        return conn

    def _header(self, api_key: int, version: int, correlation_id: int) -> bytes:
        cid = self.client_id.encode()
        head = _REQ_HEADER.pack(api_key, version, correlation_id) + struct.pack(">h", len(cid)) + cid
        if flexible(api_key, version, request=True):
            head += b"\x00"  # empty tagged fields of request header v2
        return head

    async def send_raw(self, api_key: int, version: int, body: bytes, expect_response: bool = True) -> bytes | None:
        """Send an encoded body; return the encoded response body (header stripped)."""
        if self._writer is None or self._closed_exc is not None:
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed") from self._closed_exc
        correlation_id = next(self._ids) & 0x7FFFFFFF
        fut: asyncio.Future[Any] | None = None
        if expect_response:
            fut = asyncio.get_running_loop().create_future()
            self._pending.put_nowait((correlation_id, api_key, version, fut))
        self._writer.writelines(frame(self._header(api_key, version, correlation_id), body))
        await self._writer.drain()
        if fut is None:
            return None
        return await fut

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        raw = await asyncio.wait_for(
            self.send_raw(api_key, version, request_codec(api_key, version).encode(body)), timeout)
        assert raw is not None
        return response_codec(api_key, version).decode(raw)

    async def _read_loop(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                data = await self._reader.readexactly(size)
                correlation_id, api_key, version, fut = self._pending.get_nowait()
                (got,) = _SIZE.unpack_from(data)
                if got != correlation_id:
                    raise ProtocolError(f"correlation id {got} does not match the expected {correlation_id}")
                skip = response_header_size(api_key, version, data)
                if not fut.done():
                    fut.set_result(memoryview(data)[skip:])
        except (asyncio.IncompleteReadError, ConnectionError, ProtocolError, asyncio.QueueEmpty) as e:
            self._fail(e)
        except asyncio.CancelledError:
            self._fail(ConnectionError("closed"))
            raise

    def _fail(self, exc: BaseException) -> None:
        self._closed_exc = exc
        while not self._pending.empty():
            *_, fut = self._pending.get_nowait()
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection to {self.host}:{self.port} lost: {exc!r}"))

    async def close(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass
        if self._writer is not None:
            self._writer.close()
            try:
                # A peer that stopped reading would hold the close forever; give up and abort.
                await asyncio.wait_for(self._writer.wait_closed(), 2)
            except Exception:
                self._writer.transport.abort()

    async def __aenter__(self) -> KafkaConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
