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


async def test_large_frames_are_read_ahead_only_a_little() -> None:
    """Ahead of a large frame the read-ahead grows as for small ones (it cannot know), but once a
    large frame was asked for it goes back to READ_AHEAD bytes and reading pauses when that is
    full: the next large frames wait in the socket, not in a buffer they would be copied out of."""
    reader = RequestReader(lambda r, w: None)
    frames = [body(i, READ_AHEAD_MAX + UNZEROED_FROM + i) for i in range(4)] + [body(9, 100), body(10, 200)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    feeding = asyncio.create_task(feed(reader, stream, 1 << 20))
    got, read_ahead = [], []
    for i in range(len(frames)):
        for _ in range(50):  # the reading task busy elsewhere: the transport reads on meanwhile
            await asyncio.sleep(0)
        read_ahead.append(reader._end - reader._start)
        size = reader.size_now()
        if size is None:
            size = await reader.read_size()
        frame = reader.frame_now(size)
        if frame is None:
            frame = await reader.read_frame(size)
        got.append(bytes(frame))
        if i == 0:
            assert len(reader._ahead) == READ_AHEAD  # grown to READ_AHEAD_MAX ahead of it, back now
    await feeding
    assert got == frames
    assert read_ahead[0] == READ_AHEAD_MAX  # before the first large frame: grown, then paused
    assert all(n <= READ_AHEAD for n in read_ahead[1:])
