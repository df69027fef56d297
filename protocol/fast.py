"""struct codecs for the data path: Produce v0-9 requests, Fetch v0-3 requests and responses.

Same dict shapes as protocol.schema (which the tests hold them to), but record sets stay
zero-copy memoryview slices of the request, and a fetch response is returned as a list of
byte pieces so that log bytes are never copied into one big buffer.
"""

from __future__ import annotations

import struct
from typing import Any

from protocol.errors import ProtocolError

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_II = struct.Struct(">ii")
_HI = struct.Struct(">hi")
_IQI = struct.Struct(">iqi")
_IHQI = struct.Struct(">ihqi")
_IIII = struct.Struct(">iiii")
_III = struct.Struct(">iii")
_MAX_INT = 0x7FFFFFFF


class _Cursor:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.end = len(self.buf)

    def need(self, n: int) -> int:
        p = self.pos
        if p + n > self.end:
            raise ProtocolError(f"truncated at byte {p}")
        self.pos = p + n
        return p

    def unpack(self, s: struct.Struct) -> tuple[Any, ...]:
        return s.unpack_from(self.buf, self.need(s.size))

    def string(self) -> str:
        (n,) = _H.unpack_from(self.buf, self.need(2))
        if n < 0:
            raise ProtocolError("null topic name")
        p = self.need(n)
        try:
            return str(self.buf[p:p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError("topic name is not UTF-8") from e

    def records(self, size: int) -> memoryview | None:
        """A record set of the given length as a zero-copy slice; -1 is null."""
        if size < 0:
            if size != -1:
                raise ProtocolError(f"invalid record set length {size}")
            return None
        p = self.need(size)
        return self.buf[p:p + size]

    def count(self, min_item: int) -> int:
        n: int
        (n,) = _I.unpack_from(self.buf, self.need(4))
        if n < 0 or n * min_item > self.end - self.pos:
            raise ProtocolError(f"impossible array length {n}")
        return n


def _uvarint(c: _Cursor) -> int:
    """An unsigned varint (flexible versions' lengths and tag counts)."""
    buf, value, shift = c.buf, 0, 0
    while True:
        b = buf[c.need(1)]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
        if shift > 28:
            raise ProtocolError("varint longer than 5 bytes")


def _compact_string(c: _Cursor, nullable: bool) -> str | None:
    n = _uvarint(c) - 1
    if n < 0:
        if nullable:
            return None
        raise ProtocolError("null topic name")
    p = c.need(n)
    try:
        return str(c.buf[p:p + n], "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError("string is not UTF-8") from e


def _compact_count(c: _Cursor, min_item: int) -> int:
    n = _uvarint(c) - 1
    if n < 0 or n * min_item > c.end - c.pos:
        raise ProtocolError(f"impossible array length {n}")
    return n


def _skip_tagged_fields(c: _Cursor) -> None:
    for _ in range(_uvarint(c)):
        _uvarint(c)  # tag
        c.need(_uvarint(c))


def _nullable_string(c: _Cursor) -> str | None:
    (n,) = _H.unpack_from(c.buf, c.need(2))
    if n < 0:
        return None
    p = c.need(n)
    try:
        return str(c.buf[p:p + n], "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError("string is not UTF-8") from e


def decode_produce_request(buf: bytes | memoryview, version: int) -> dict[str, Any]:
    """A Produce v0-9 request body; record sets stay zero-copy slices of buf.

    v3+ carries the transactional id first; v9 is flexible (compact strings, arrays and
    records, tagged sections after every struct), whose tagged fields are skipped.
    """
    if not 0 <= version <= 9:
        raise ProtocolError(f"Produce v{version} is not served")
    c = _Cursor(buf)
    transactional_id = None
    if version >= 9:
        transactional_id = _compact_string(c, nullable=True)
        acks, timeout_ms = c.unpack(_HI)
        topics = []
        for _ in range(_compact_count(c, 3)):
            name = _compact_string(c, nullable=False)
            parts = []
            for _ in range(_compact_count(c, 6)):
                (index,) = c.unpack(_I)
                size = _uvarint(c) - 1
                parts.append({"index": index, "records": c.records(size)})
                _skip_tagged_fields(c)
            _skip_tagged_fields(c)
            topics.append({"name": name, "partition_data": parts})
        _skip_tagged_fields(c)
        return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms,
                "topic_data": topics}
    if version >= 3:
        transactional_id = _nullable_string(c)
    acks, timeout_ms = c.unpack(_HI)
    topics = []
    for _ in range(c.count(6)):
        name = c.string()
        parts = []
        for _ in range(c.count(8)):
            index, size = c.unpack(_II)
            parts.append({"index": index, "records": c.records(size)})
        topics.append({"name": name, "partition_data": parts})
    return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms, "topic_data": topics}


def decode_fetch_request(buf: bytes | memoryview, version: int) -> dict[str, Any]:
    if not 0 <= version <= 3:
        raise ProtocolError(f"Fetch v{version} is not served")
    c = _Cursor(buf)
    if version >= 3:
        replica_id, max_wait_ms, min_bytes, max_bytes = c.unpack(_IIII)
    else:
        replica_id, max_wait_ms, min_bytes = c.unpack(_III)
        max_bytes = _MAX_INT
    topics = []
    for _ in range(c.count(6)):
        name = c.string()
        parts = []
        for _ in range(c.count(16)):
            partition, fetch_offset, partition_max_bytes = c.unpack(_IQI)
            parts.append({"partition": partition, "fetch_offset": fetch_offset,
                          "partition_max_bytes": partition_max_bytes})
        topics.append({"topic": name, "partitions": parts})
    return {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "topics": topics}


def encode_fetch_response(version: int, throttle_time_ms: int, responses: list[dict[str, Any]]) -> list[bytes]:
    pieces: list[bytes] = []
    head = bytearray()
    if version >= 1:
        head += _I.pack(throttle_time_ms)
    head += _I.pack(len(responses))
    for t in responses:
        name = t["topic"].encode()
        head += _H.pack(len(name)) + name
        parts = t["partitions"]
        head += _I.pack(len(parts))
        for p in parts:
            records = p["records"]
            if records is None:
                head += _IHQI.pack(p["partition_index"], p["error_code"], p["high_watermark"], -1)
                continue
            head += _IHQI.pack(p["partition_index"], p["error_code"], p["high_watermark"], len(records))
            if len(records) > 4096:
                # Large record sets travel as their own piece rather than being copied into head.
                pieces.append(bytes(head))
                pieces.append(records)
                head = bytearray()
            else:
                head += records
    if head:
        pieces.append(bytes(head))
    return pieces


def decode_fetch_response(buf: bytes | memoryview, version: int) -> dict[str, Any]:
    """A Fetch v0-3 response body with record sets as zero-copy slices (the replica fetcher's path)."""
    if not 0 <= version <= 3:
        raise ProtocolError(f"Fetch v{version} is not served")
    c = _Cursor(buf)
    out: dict[str, Any] = {}
    if version >= 1:
        (out["throttle_time_ms"],) = c.unpack(_I)
    responses = []
    for _ in range(c.count(6)):
        name = c.string()
        parts = []
        for _ in range(c.count(18)):
            index, error, hw, size = c.unpack(_IHQI)
            parts.append({"partition_index": index, "error_code": error, "high_watermark": hw,
                          "records": c.records(size)})
        responses.append({"topic": name, "partitions": parts})
    out["responses"] = responses
    return out
