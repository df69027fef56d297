"""Kafka framing: every request and response is an int32 big-endian size, then that many bytes.

Sans-IO: `FrameDecoder.feed()` takes whatever bytes arrived and returns the complete
frames. The size is checked before any buffer for the frame is reserved, so an
oversize or negative length costs nothing but the connection.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The peer sent a length that cannot be a Kafka frame; close the connection."""


class FrameDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need: int | None = None

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        while True:
            if self._need is None:
                if len(self._buf) < 4:
                    break
                (size,) = _SIZE.unpack_from(self._buf)
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameError(f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}")
                self._need = size
                del self._buf[:4]
            if len(self._buf) < self._need:
                break
            frames.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = None
        return frames

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)


def frame(*parts: bytes) -> list[bytes]:
    """Prefix the concatenation of `parts` with its size, without joining the parts."""
    return [_SIZE.pack(sum(len(p) for p in parts)), *parts]
