"""Kafka's primitive encodings, classic and flexible (KIP-482), as struct-based readers and writers.

The construct declarations at the bottom document the wire forms and are used by the tests as
an independent second implementation; the Reader/Writer pair is what runs, because construct
costs tens of times more per field than struct.
"""

from __future__ import annotations

import builtins
import struct
import uuid as _uuid

import construct as c

from protocol.errors import ProtocolError

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U16, _U32, _F64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">d")


class Reader:
    """Cursor over a request or response body; every read checks bounds and raises ProtocolError."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) or buf.format != "B" else buf
        self.pos = pos
        self.end = len(self.buf)

    def _take(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise ProtocolError(f"truncated: need {n} bytes at {p}, have {self.end - p}")
        self.pos = p + n
        return p

    def remaining(self) -> int:
        return self.end - self.pos

    def int8(self) -> int:
        v: int = _I8.unpack_from(self.buf, self._take(1))[0]
        return v

    def int16(self) -> int:
        v: int = _I16.unpack_from(self.buf, self._take(2))[0]
        return v

    def int32(self) -> int:
        v: int = _I32.unpack_from(self.buf, self._take(4))[0]
        return v

    def int64(self) -> int:
        v: int = _I64.unpack_from(self.buf, self._take(8))[0]
        return v

    def uint16(self) -> int:
        v: int = _U16.unpack_from(self.buf, self._take(2))[0]
        return v

    def uint32(self) -> int:
        v: int = _U32.unpack_from(self.buf, self._take(4))[0]
        return v

    def float64(self) -> float:
        v: float = _F64.unpack_from(self.buf, self._take(8))[0]
        return v

    def bool(self) -> bool:
        return self.buf[self._take(1)] != 0

    def uuid(self) -> _uuid.UUID:
        p = self._take(16)
        return _uuid.UUID(bytes=bytes(self.buf[p:p + 16]))

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self.buf[self._take(1)]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ProtocolError("unsigned varint longer than 10 bytes")

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> memoryview:
        p = self._take(n)
        return self.buf[p:p + n]

    def _length(self, compact: builtins.bool, wide: builtins.bool) -> int:
        if compact:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def string(self, compact: builtins.bool = False, nullable: builtins.bool = False) -> str | None:
        n = self._length(compact, False)
        if n < 0:
            if n == -1 and nullable:
                return None
            raise ProtocolError(f"invalid string length {n}")
        try:
            return str(self.raw(n), "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError("string is not UTF-8") from e

    def bytes(self, compact: builtins.bool = False, nullable: builtins.bool = False) -> bytes | None:
        n = self._length(compact, True)
        if n < 0:
            if n == -1 and nullable:
                return None
            raise ProtocolError(f"invalid bytes length {n}")
        return bytes(self.raw(n))

    def array_length(self, compact: builtins.bool = False, nullable: builtins.bool = False, min_item_size: int = 1) -> int | None:
        n = self._length(compact, True)
        if n < 0:
            if n == -1 and nullable:
                return None
            raise ProtocolError(f"invalid array length {n}")
        # A count larger than the bytes left could only be a lie; refuse before looping.
        if n * min_item_size > self.remaining():
            raise ProtocolError(f"array of {n} items cannot fit in {self.remaining()} bytes")
        return n

    def tagged_fields(self) -> dict[int, memoryview]:
        count = self.uvarint()
        if count > self.remaining():
            raise ProtocolError(f"{count} tagged fields cannot fit")
        out: dict[int, memoryview] = {}
        last = -1
        for _ in range(count):
            tag = self.uvarint()
            if tag <= last:
                raise ProtocolError("tagged fields out of order")
            last = tag
            out[tag] = self.raw(self.uvarint())
        return out


def uvarint(n: int) -> bytes:
    if n < 0:
        raise ValueError("unsigned varint of a negative number")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(n: int) -> bytes:
    return uvarint((n << 1) ^ (n >> 63))


class Writer:
    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def getvalue(self) -> bytes:
        return b"".join(self.parts)

    def int8(self, v: int) -> None:
        self.parts.append(_I8.pack(v))

    def int16(self, v: int) -> None:
        self.parts.append(_I16.pack(v))

    def int32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def int64(self, v: int) -> None:
        self.parts.append(_I64.pack(v))

    def uint16(self, v: int) -> None:
        self.parts.append(_U16.pack(v))

    def uint32(self, v: int) -> None:
        self.parts.append(_U32.pack(v))

    def float64(self, v: float) -> None:
        self.parts.append(_F64.pack(v))

    def bool(self, v: bool) -> None:
        self.parts.append(b"\x01" if v else b"\x00")

    def uuid(self, v: _uuid.UUID | bytes | None) -> None:
        if v is None:
            self.parts.append(bytes(16))
        else:
            self.parts.append(v.bytes if isinstance(v, _uuid.UUID) else bytes(v))

    def uvarint(self, v: int) -> None:
        self.parts.append(uvarint(v))

    def _length(self, n: int, compact: builtins.bool, wide: builtins.bool) -> None:
        if compact:
            self.parts.append(uvarint(n + 1))
        else:
            self.parts.append(_I32.pack(n) if wide else _I16.pack(n))

    def string(self, v: str | None, compact: builtins.bool = False) -> None:
        if v is None:
            self._length(-1, compact, False)
            return
        b = v.encode()
        self._length(len(b), compact, False)
        self.parts.append(b)

    def bytes(self, v: bytes | bytearray | memoryview | None, compact: builtins.bool = False) -> None:
        if v is None:
            self._length(-1, compact, True)
            return
        self._length(len(v), compact, True)
        self.parts.append(bytes(v))

    def array_length(self, n: int | None, compact: builtins.bool = False) -> None:
        self._length(-1 if n is None else n, compact, True)

    def tagged_fields(self, fields: list[tuple[int, builtins.bytes]]) -> None:
        self.parts.append(uvarint(len(fields)))
        for tag, payload in sorted(fields):
            self.parts.append(uvarint(tag))
            self.parts.append(uvarint(len(payload)))
            self.parts.append(payload)


# ---- the wire forms, declared ------------------------------------------------------------------
# (Fixed layouts built from these, such as the request and response headers, are in protocol.layouts.)

UVarint = c.VarInt  # 7 bits per byte, little-endian groups, high bit = more
String = c.PascalString(c.Int16sb, "utf8")
Bytes = c.Prefixed(c.Int32sb, c.GreedyBytes)
# Compact lengths carry length + 1, so that 0 can mean null.
CompactLength = c.ExprAdapter(c.VarInt, decoder=lambda obj, ctx: obj - 1, encoder=lambda obj, ctx: obj + 1)
CompactString = c.PascalString(CompactLength, "utf8")
CompactBytes = c.Prefixed(CompactLength, c.GreedyBytes)
TaggedFields = c.PrefixedArray(c.VarInt, c.Struct("tag" / c.VarInt, "data" / c.Prefixed(c.VarInt, c.GreedyBytes)))
