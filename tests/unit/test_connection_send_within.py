"""fetcher.connection's send_within (the replica fetcher's Fetch): the request goes out as send_raw
writes it, its answer comes back, and an unanswered one fails with TimeoutError by its own
deadline, whatever the deadlines of the requests before it. Against a scripted peer on a socket."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from fetcher.connection import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.headers import encode_request_header


class Peer:
    """Records each request frame; answers it with its body reversed unless its body is b"mute"."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                self.frames.append(frame)
                _, _, correlation_id, n = struct.unpack_from(">hhih", frame)
                body = frame[10 + n:]
                if body != b"mute":
                    writer.write(struct.pack(">ii", 4 + len(body), correlation_id) + body[::-1])
                    await writer.drain()
        except asyncio.IncompleteReadError:
            writer.close()


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, int]]:
    p = Peer()
    server = await asyncio.start_server(p.serve, "127.0.0.1", 0)
    yield p, server.sockets[0].getsockname()[1]
    server.close()


async def test_the_request_is_framed_as_send_raw_frames_it_and_answered(peer: tuple[Peer, int]) -> None:
    p, port = peer
    async with await KafkaConnection.open("127.0.0.1", port, client_id="replica-fetcher-2") as conn:
        assert bytes(await conn.send_within(ApiKey.FETCH, 3, b"abc", 30)) == b"cba"
        assert bytes(await conn.send_within(ApiKey.FETCH, 3, b"xyz", 30)) == b"zyx"
        raw = await conn.send_raw(ApiKey.FETCH, 3, b"abc")
        assert raw is not None and bytes(raw) == b"cba"
    assert p.frames[0] == encode_request_header(ApiKey.FETCH, 3, 1, "replica-fetcher-2") + b"abc"
    assert p.frames[1] == encode_request_header(ApiKey.FETCH, 3, 2, "replica-fetcher-2") + b"xyz"
    assert p.frames[2] == encode_request_header(ApiKey.FETCH, 3, 3, "replica-fetcher-2") + b"abc"


async def test_an_unanswered_request_times_out_by_its_own_deadline(peer: tuple[Peer, int]) -> None:
    _, port = peer
    async with await KafkaConnection.open("127.0.0.1", port) as conn:
        # The first request's deadline (an hour) arms the timer; the second's is far earlier and
        # must not wait for it.
        assert bytes(await conn.send_within(ApiKey.FETCH, 3, b"abc", 3600)) == b"cba"
        second = conn.send_within(ApiKey.FETCH, 3, b"mute", 0.05)
        done, _ = await asyncio.wait({second}, timeout=600)  # a bound on a hang, not a timing
        assert second in done
        with pytest.raises(TimeoutError):
            second.result()


async def test_a_closed_connection_fails_the_request(peer: tuple[Peer, int]) -> None:
    _, port = peer
    conn = await KafkaConnection.open("127.0.0.1", port)
    pending = conn.send_within(ApiKey.FETCH, 3, b"mute", 3600)
    await conn.close()
    with pytest.raises(ConnectionError):
        await pending
    with pytest.raises(ConnectionError):
        conn.send_within(ApiKey.FETCH, 3, b"abc", 30)
