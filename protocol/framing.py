"""Kafka framing: every request and response is an int32 big-endian size, then that many bytes.

Frames are read by the connections themselves (broker/network, fetcher/connection), which
check the size before reserving a buffer; this module only writes the size prefix, whose
layout is declared in protocol.layouts.
"""

from __future__ import annotations

from protocol.layouts import FRAME_SIZE


def frame(*parts: bytes) -> list[bytes]:
    """Prefix the concatenation of `parts` with its size, without joining the parts."""
    return [FRAME_SIZE.pack(sum(len(p) for p in parts)), *parts]
