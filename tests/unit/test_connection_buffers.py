"""fetcher.connection's recycled fetch-response buffer, against a scripted peer on a socket.

The contract (see _FrameProtocol._frame_buffer): on a connection opened with
reuse_fetch_buffers, one Fetch response's buffer is reused for the next Fetch response;
a response to any other request always gets a buffer of its own. Without the flag every
response has its own buffer.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each request with its correlation id and a body naming the request's api key."""
    count = 0
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            api_key, _, correlation_id = struct.unpack_from(">hhi", frame)
            count += 1
            body = (b"F" if api_key == ApiKey.FETCH else b"L") * 1000 + bytes([count])
            writer.write(struct.pack(">ii", 4 + len(body), correlation_id) + body)
            await writer.drain()
    except asyncio.IncompleteReadError:
        writer.close()


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def test_fetch_buffers_are_recycled_and_other_responses_get_their_own(port: int) -> None:
    async with await KafkaConnection.open("127.0.0.1", port, reuse_fetch_buffers=True) as conn:
        first = await conn.send_raw(ApiKey.FETCH, 3, b"")
        assert first is not None and bytes(first) == b"F" * 1000 + b"\x01"
        # A ListOffsets answered while the fetch response is still being appended must not
        # land in its buffer.
        other = await conn.send_raw(ApiKey.LIST_OFFSETS, 1, b"")
        assert other is not None and bytes(other) == b"L" * 1000 + b"\x02"
        assert bytes(first) == b"F" * 1000 + b"\x01"
        # The next Fetch response takes the first one's buffer.
        second = await conn.send_raw(ApiKey.FETCH, 3, b"")
        assert second is not None and bytes(second) == b"F" * 1000 + b"\x03"
        assert bytes(first) == bytes(second)
        assert bytes(other) == b"L" * 1000 + b"\x02"


async def test_without_the_flag_every_response_keeps_its_bytes(port: int) -> None:
    async with await KafkaConnection.open("127.0.0.1", port) as conn:
        first = await conn.send_raw(ApiKey.FETCH, 3, b"")
        second = await conn.send_raw(ApiKey.FETCH, 3, b"")
        assert first is not None and second is not None
        assert bytes(first)[-1] == 1 and bytes(second)[-1] == 2
