"""Mutations of seed frames: pure functions of a `random.Random`, so a run is reproduced by its seed.

`Mutator.next()` gives a `Case`: the bytes to write (size prefix included, possibly wrong on
purpose), what was done (seed name and mutation names, for the report) and whether the frame
is framed right (a wrong size prefix leaves the broker waiting for more or reading the rest
as the next frame, so the sender half-closes after it instead of waiting for an answer).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from tests.fuzz.seeds import Seed

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
# Values that sit on the edges decoders get wrong: null/empty markers, sign, the top of each width.
INTERESTING_16 = (-1, 0, 1, 0x7FFF, -0x8000, 0x7F, 0xFF - 256)
INTERESTING_32 = (-1, 0, 1, 2, 0x7FFFFFFF, -0x80000000, 0xFFFF, 0x10000, 1 << 24, 0x7FFFFFFE)


@dataclass(frozen=True)
class Case:
    data: bytes        # what goes on the socket
    what: str          # seed name and mutations applied
    complete: bool     # False: the size prefix is wrong on purpose; the sender half-closes after it


def _bitflip(r: random.Random, b: bytearray) -> str:
    n = r.randint(1, 8)
    for _ in range(n):
        if b:
            i = r.randrange(len(b) * 8)
            b[i // 8] ^= 1 << (i % 8)
    return f"bitflip{n}"


def _insert(r: random.Random, b: bytearray) -> str:
    at = r.randint(0, len(b))
    b[at:at] = r.randbytes(r.randint(1, 16))
    return f"insert@{at}"


def _delete(r: random.Random, b: bytearray) -> str:
    if not b:
        return "delete-none"
    at = r.randrange(len(b))
    n = r.randint(1, 16)
    del b[at:at + n]
    return f"delete@{at}+{n}"


def _int_field(r: random.Random, b: bytearray) -> str:
    """An int16 or int32 somewhere (a length, count, id or flag, statistically) set to an edge value."""
    wide = r.random() < 0.6
    width = 4 if wide else 2
    if len(b) < width:
        return "int-none"
    at = r.randrange(len(b) - width + 1)
    if wide:
        old = _I32.unpack_from(b, at)[0]
        v = max(-0x80000000, min(0x7FFFFFFF, r.choice(INTERESTING_32 + (old + 1, old - 1, old * 16))))
        _I32.pack_into(b, at, v)
    else:
        old = _I16.unpack_from(b, at)[0]
        v = max(-0x8000, min(0x7FFF, r.choice(INTERESTING_16 + (old + 1, old - 1))))
        _I16.pack_into(b, at, v)
    return f"int{width * 8}@{at}={v}"


def _truncate(r: random.Random, b: bytearray) -> str:
    at = r.randint(0, len(b))
    del b[at:]
    return f"truncate@{at}"


def _header(r: random.Random, b: bytearray) -> str:
    """A random API key and/or version in the request header."""
    if len(b) < 4:
        return "header-none"
    what = r.randrange(3)
    if what != 1:
        _I16.pack_into(b, 0, r.choice((-1, 0, 18, r.randint(-5, 80), r.randint(-0x8000, 0x7FFF))))
    if what != 0:
        _I16.pack_into(b, 2, r.choice((-1, 0, r.randint(0, 20), r.randint(-0x8000, 0x7FFF))))
    return f"header{_I16.unpack_from(b, 0)[0]}v{_I16.unpack_from(b, 2)[0]}"


def _duplicate(r: random.Random, b: bytearray) -> str:
    """A slice repeated in place: arrays and strings grow past what their counts say."""
    if not b:
        return "dup-none"
    at = r.randrange(len(b))
    n = r.randint(1, 64)
    b[at:at] = b[at:at + n] * r.randint(1, 8)
    return f"dup@{at}+{n}"


BODY_MUTATIONS: list[Callable[[random.Random, bytearray], str]] = [
    _bitflip, _bitflip, _int_field, _int_field, _int_field, _insert, _delete, _truncate, _header, _duplicate,
]


class Mutator:
    """Cases drawn from `seeds`, deterministically from `seed`.

    `max_frame` is the broker's socket.request.max.bytes: oversized cases go up to it and
    beyond. Weights: 5% unchanged seeds, 8% splices, 4% wrong size prefixes, 2% random
    garbage, 0.2% oversized frames, the rest 1-3 stacked body mutations.
    """

    def __init__(self, seeds: list[Seed], seed: int, max_frame: int) -> None:
        if not seeds:
            raise ValueError("no seeds")
        self.seeds = seeds
        self.r = random.Random(seed)
        self.max_frame = max_frame

    def next(self) -> Case:
        r = self.r
        s = r.choice(self.seeds)
        b = bytearray(s.frame)
        x = r.random()
        if x < 0.05:
            return _framed(b, s.name + " unchanged")
        if x < 0.13:
            other = r.choice(self.seeds)
            cut_a, cut_b = r.randint(0, len(b)), r.randint(0, len(other.frame))
            return _framed(b[:cut_a] + other.frame[cut_b:], f"{s.name}[:{cut_a}] + {other.name}[{cut_b}:] splice")
        if x < 0.17:
            return self._size_prefix(b, s.name)
        if x < 0.19:
            n = r.choice((0, 1, 2, 4, 7, r.randint(0, 64), r.randint(0, 4096)))
            return _framed(bytearray(r.randbytes(n)), f"garbage{n}")
        if x < 0.192:
            return self._oversized(b, s.name)
        done = [BODY_MUTATIONS[r.randrange(len(BODY_MUTATIONS))](r, b) for _ in range(r.randint(1, 3))]
        return _framed(b, f"{s.name} {'+'.join(done)}")

    def _size_prefix(self, b: bytearray, name: str) -> Case:
        """The frame with a wrong size: -1, 0, huge, or one off either way."""
        r = self.r
        size = r.choice((-1, 0, 0x7FFFFFFF, -0x80000000, len(b) + 1, len(b) - 1, self.max_frame + 1))
        # Whatever the broker makes of it (refused, waiting for more, the rest read as the next
        # frame's size), the connection is done after this: the sender half-closes.
        return Case(_I32.pack(size) + bytes(b), f"{name} size={size} (real {len(b)})", False)

    def _oversized(self, b: bytearray, name: str) -> Case:
        """A frame at, just under or beyond socket.request.max.bytes; beyond it only the prefix and a little."""
        r = self.r
        size = r.choice((self.max_frame, self.max_frame - 1, self.max_frame + 1, self.max_frame * 4, 0x7FFFFFFF))
        if size > self.max_frame:
            return Case(_I32.pack(size) + bytes(b), f"{name} oversized {size}", False)
        body = bytes(b[:size]) + bytes(max(0, size - len(b)))
        return Case(_I32.pack(size) + body, f"{name} padded to {size}", True)


def _framed(b: bytes | bytearray, what: str) -> Case:
    return Case(_I32.pack(len(b)) + bytes(b), what, True)
