"""fetcher.connection reads responses however the stream splits them: several in one read, one
across many, sizes around its scratch buffer's; and a bad size closes the connection."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable

import pytest

from fetcher.connection import _SCRATCH_BYTES, KafkaConnection
from protocol.api_keys import ApiKey

SIZES = [0, 1, 7, 300, _SCRATCH_BYTES - 8, _SCRATCH_BYTES - 4, _SCRATCH_BYTES, _SCRATCH_BYTES + 3, 3 * _SCRATCH_BYTES + 5]


def body(i: int, n: int) -> bytes:
    return bytes((i + k) % 251 for k in range(n))


async def scripted(chunk: int, sizes: list[int], bad: bool = False) -> Callable[..., object]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        out = bytearray()
        for i, n in enumerate(sizes):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            out += struct.pack(">ii", 4 + n if not bad else -7, correlation_id) + body(i, n)
        # Every answer at once, in pieces of `chunk` bytes: reads see them split anywhere.
        for k in range(0, len(out), chunk):
            writer.write(out[k:k + chunk])
            await writer.drain()
            await asyncio.sleep(0)
        await reader.read()
        writer.close()
    return serve


@pytest.fixture
def serve_with() -> AsyncIterator[Callable[..., object]]:
    servers: list[asyncio.Server] = []

    async def start(chunk: int, sizes: list[int], bad: bool = False) -> int:
        server = await asyncio.start_server(await scripted(chunk, sizes, bad), "127.0.0.1", 0)
        servers.append(server)
        return int(server.sockets[0].getsockname()[1])
    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize("chunk", [1 << 20, 4096, 5, 1])
@pytest.mark.parametrize("reuse", [True, False])
async def test_pipelined_responses_arrive_whole_and_in_order(serve_with: Callable[..., object], chunk: int,
                                                            reuse: bool) -> None:
    sizes = SIZES if chunk > 5 else SIZES[:4]
    port = await serve_with(chunk, sizes)  # type: ignore[operator]
    async with await KafkaConnection.open("127.0.0.1", port, reuse_fetch_buffers=reuse) as conn:
        # ListOffsets, never Fetch: every response keeps its own buffer, so all can be checked at the end.
        pending = [asyncio.ensure_future(conn.send_raw(ApiKey.LIST_OFFSETS, 1, b"")) for _ in sizes]
        got = await asyncio.gather(*pending)
    assert [bytes(g) for g in got if g is not None] == [body(i, n) for i, n in enumerate(sizes)]


async def test_a_response_size_out_of_range_fails_the_connection(serve_with: Callable[..., object]) -> None:
    port = await serve_with(1 << 20, [3], bad=True)  # type: ignore[operator]
    async with await KafkaConnection.open("127.0.0.1", port) as conn:
        with pytest.raises(ConnectionError):
            await conn.send_raw(ApiKey.LIST_OFFSETS, 1, b"")
