"""broker.network.RequestReader: request frames arrive whole however the stream splits them,
read ahead or received into a buffer of their own (a bytearray, or for large frames memory
that is not zeroed first: every byte of it must be the frame's)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.network import READ_AHEAD, READ_AHEAD_MAX, UNZEROED_FROM, RequestReader

SIZES = [0, 5, READ_AHEAD - 4, READ_AHEAD + 3, UNZEROED_FROM - 1, UNZEROED_FROM, UNZEROED_FROM + 1,
         READ_AHEAD_MAX + 17, 3 * UNZEROED_FROM + 5, 12]


def body(i: int, n: int) -> bytes:
    return bytes((i * 7 + k) % 251 for k in range(n))


async def feed(reader: RequestReader, stream: bytes, chunk: int) -> None:
    """The transport's side: the stream in pieces of at most `chunk` bytes, as buffers allow."""
    at = 0
    while at < len(stream):
        if reader._pauses:  # the reading task has not taken what was read ahead yet
            await asyncio.sleep(0)
            continue
        buf = reader.get_buffer(-1)
        n = min(len(buf), chunk, len(stream) - at)
        buf[:n] = stream[at:at + n]
        reader.buffer_updated(n)
        at += n
        await asyncio.sleep(0)


@pytest.mark.parametrize("chunk", [1 << 20, 65_536, 4096, 1001])
async def test_frames_arrive_whole_whatever_the_split(chunk: int) -> None:
    reader = RequestReader(lambda r, w: None)
    frames = [body(i, n) for i, n in enumerate(SIZES)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    feeding = asyncio.create_task(feed(reader, stream, chunk))
    got = []
    unzeroed = 0
    for expected in frames:
        size = reader.size_now()
        if size is None:
            size = await reader.read_size()
        assert size == len(expected)
        frame = reader.frame_now(size)
        if frame is None:
            frame = await reader.read_frame(size)
            # A large frame received into its own unzeroed buffer; every byte is the stream's.
            assert isinstance(frame, memoryview if size >= UNZEROED_FROM else bytearray)
            unzeroed += isinstance(frame, memoryview)
        got.append(bytes(frame))
        if isinstance(frame, memoryview):
            assert not frame.readonly  # a produced batch is numbered in place in its frame
    await feeding
    assert got == frames
    assert unzeroed >= 2  # the largest frames were received, not read ahead whole
