"""struct codecs for the data path: Produce v0-9 requests and responses, Fetch v0-12 requests and responses,
and the replica fetcher's Fetch v3 request.

Same dict shapes as protocol.schema (which the tests hold them to), but record sets stay
zero-copy memoryview slices of the request, and a fetch response is returned as a list of
byte pieces so that log bytes are never copied into one big buffer.
"""

from __future__ import annotations

import struct
from typing import Any

from protocol.errors import ProtocolError
from protocol.primitives import uvarint

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_II = struct.Struct(">ii")
_HI = struct.Struct(">hi")
_IQI = struct.Struct(">iqi")
_IIII = struct.Struct(">iiii")
_III = struct.Struct(">iii")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_IHQ = struct.Struct(">ihq")
_NULL_ARRAY = _I.pack(-1)
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


def _string_bytes(value: str | None, flex: bool) -> bytes:
    """A (nullable) string as the schema codec writes it: int16 length, or compact at v9."""
    if value is None:
        return b"\x00" if flex else _H.pack(-1)
    raw = value.encode()
    return (uvarint(len(raw) + 1) if flex else _H.pack(len(raw))) + raw


def encode_produce_response(version: int, body: dict[str, Any]) -> bytes:
    """A Produce v0-9 response body, as the schema codec writes it (tests hold them together):
    one per produce request, and the codec's per-field calls were a good part of one.

    Partition fields a version has and the dict lacks take the schema's defaults (log append
    time and log start offset -1, no record errors, a null error message)."""
    if not 0 <= version <= 9:
        raise ProtocolError(f"Produce v{version} is not served")
    flex = version >= 9
    out = bytearray()
    responses = body["responses"]
    out += uvarint(len(responses) + 1) if flex else _I.pack(len(responses))
    for t in responses:
        out += _string_bytes(t["name"], flex)
        parts = t["partition_responses"]
        out += uvarint(len(parts) + 1) if flex else _I.pack(len(parts))
        for p in parts:
            out += _IHQ.pack(p["index"], p["error_code"], p["base_offset"])
            if version >= 2:
                out += _Q.pack(p.get("log_append_time_ms", -1))
            if version >= 5:
                out += _Q.pack(p.get("log_start_offset", -1))
            if version >= 8:
                errors = p.get("record_errors", [])
                if errors is None:  # as the codec writes a null array
                    out += b"\x00" if flex else _NULL_ARRAY
                    errors = []
                else:
                    out += uvarint(len(errors) + 1) if flex else _I.pack(len(errors))
                for e in errors:
                    out += _I.pack(e["batch_index"])
                    out += _string_bytes(e.get("batch_index_error_message"), flex)
                    if flex:
                        out += b"\x00"  # the record error's tagged section
                out += _string_bytes(p.get("error_message"), flex)
            if flex:
                out += b"\x00"  # the partition's tagged section
        if flex:
            out += b"\x00"  # the topic's tagged section
    if version >= 1:
        out += _I.pack(body.get("throttle_time_ms", 0))
    if flex:
        out += b"\x00"  # the body's tagged section
    return bytes(out)


_B = struct.Struct(">b")
# (partition, [current leader epoch v9+], fetch offset, [log start offset v5+], partition max bytes)
_FETCH_PARTITION_V0, _FETCH_PARTITION_V5, _FETCH_PARTITION_V9 = _IQI, struct.Struct(">iqqi"), struct.Struct(">iiqqi")
_FETCH_PARTITION_V12 = struct.Struct(">iiqiqi")  # last fetched epoch after the fetch offset


def decode_fetch_request(buf: bytes | memoryview, version: int) -> dict[str, Any]:
    """A Fetch v0-12 request body; fields a version lacks take Kafka's defaults (v12: flexible).

    Each partition a dict with the schema's names (decode_fetch_request_rows has them as rows)."""
    request = decode_fetch_request_rows(buf, version)
    request["topics"] = [{"topic": t["topic"], "partitions": [
        {"partition": partition, "current_leader_epoch": epoch, "fetch_offset": fetch_offset,
         "partition_max_bytes": partition_max_bytes}
        for partition, epoch, fetch_offset, partition_max_bytes in t["partitions"]]} for t in request["topics"]]
    return request


# A decoded Fetch request partition (decode_fetch_request_rows): partition, current leader epoch
# (-1 before v9), fetch offset, partition max bytes.
FetchPartitionRow = tuple[int, int, int, int]


def decode_fetch_request_rows(buf: bytes | memoryview, version: int) -> dict[str, Any]:
    """decode_fetch_request with each topic's partitions as FetchPartitionRow tuples: a
    follower's fetch names every partition it follows in every round of replication, and a dict
    for each cost more than the rest of its decoding."""
    if not 0 <= version <= 12:
        raise ProtocolError(f"Fetch v{version} is not served")
    if version >= 12:
        return _decode_flexible_fetch_request(buf)
    c = _Cursor(buf)
    if version >= 3:
        replica_id, max_wait_ms, min_bytes, max_bytes = c.unpack(_IIII)
    else:
        replica_id, max_wait_ms, min_bytes = c.unpack(_III)
        max_bytes = _MAX_INT
    isolation_level, session_id, session_epoch = 0, 0, -1
    if version >= 4:
        (isolation_level,) = c.unpack(_B)
    if version >= 7:
        session_id, session_epoch = c.unpack(_II)
    part = _FETCH_PARTITION_V9 if version >= 9 else _FETCH_PARTITION_V5 if version >= 5 else _FETCH_PARTITION_V0
    topics = []
    for _ in range(c.count(6)):
        name = c.string()
        # A topic's partitions are fixed-width rows: unpacked together (a follower's fetch names
        # every partition it follows, idle or not, in every round of replication).
        n = c.count(part.size)
        at = c.need(n * part.size)
        rows = part.iter_unpack(c.buf[at:at + n * part.size])
        parts: list[FetchPartitionRow]
        if version >= 9:
            parts = [(partition, epoch, fetch_offset, partition_max_bytes)
                     for partition, epoch, fetch_offset, _start, partition_max_bytes in rows]
        elif version >= 5:
            parts = [(partition, -1, fetch_offset, partition_max_bytes)
                     for partition, fetch_offset, _start, partition_max_bytes in rows]
        else:
            parts = [(partition, -1, fetch_offset, partition_max_bytes)
                     for partition, fetch_offset, partition_max_bytes in rows]
        topics.append({"topic": name, "partitions": parts})
    forgotten: list[dict[str, Any]] = []
    if version >= 7:
        for _ in range(c.count(6)):
            name = c.string()
            forgotten.append({"topic": name, "partitions": [c.unpack(_I)[0] for _ in range(c.count(4))]})
    rack_id = ""
    if version >= 11:
        rack_id = c.string()
    return {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": isolation_level, "session_id": session_id, "session_epoch": session_epoch,
            "topics": topics, "forgotten_topics_data": forgotten, "rack_id": rack_id}


def _compact_name(c: _Cursor) -> str:
    """A compact, non-nullable string (a topic name, a rack id)."""
    name = _compact_string(c, False)
    assert name is not None  # null raised
    return name


def _decode_flexible_fetch_request(buf: bytes | memoryview) -> dict[str, Any]:
    """Fetch v12: compact strings and arrays, a tagged section closing every struct.

    Tagged fields are skipped: v12's only request tag, cluster_id, is for KRaft controllers."""
    c = _Cursor(buf)
    replica_id, max_wait_ms, min_bytes, max_bytes = c.unpack(_IIII)
    (isolation_level,) = c.unpack(_B)
    session_id, session_epoch = c.unpack(_II)
    topics = []
    for _ in range(_compact_count(c, 3)):
        name = _compact_name(c)
        parts = []
        for _ in range(_compact_count(c, _FETCH_PARTITION_V12.size + 1)):
            partition, epoch, fetch_offset, _last_epoch, _start, partition_max_bytes = c.unpack(_FETCH_PARTITION_V12)
            _skip_tagged_fields(c)
            parts.append((partition, epoch, fetch_offset, partition_max_bytes))
        _skip_tagged_fields(c)
        topics.append({"topic": name, "partitions": parts})
    forgotten = []
    for _ in range(_compact_count(c, 3)):
        name = _compact_name(c)
        indexes = [c.unpack(_I)[0] for _ in range(_compact_count(c, 4))]
        _skip_tagged_fields(c)
        forgotten.append({"topic": name, "partitions": indexes})
    rack_id = _compact_name(c)
    _skip_tagged_fields(c)
    return {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": isolation_level, "session_id": session_id, "session_epoch": session_epoch,
            "topics": topics, "forgotten_topics_data": forgotten, "rack_id": rack_id}


def encode_fetch_request_v3(request: dict[str, Any]) -> bytes:
    """The replica fetcher's Fetch v3 request body (fetcher/replica_fetcher.py), as the schema
    codec writes it: every follower sends one per round of replication, each partition of it
    three fixed-width fields, so the generic codec's per-field calls were a tenth of a
    follower's CPU."""
    topics = request["topics"]
    out = bytearray(_IIII.pack(request["replica_id"], request["max_wait_ms"], request["min_bytes"],
                               request["max_bytes"]))
    out += _I.pack(len(topics))
    pack = _IQI.pack
    for t in topics:
        name = t["topic"].encode()
        parts = t["partitions"]
        out += _H.pack(len(name))
        out += name
        out += _I.pack(len(parts))
        for p in parts:
            out += pack(p["partition"], p["fetch_offset"], p["partition_max_bytes"])
    return bytes(out)


def encode_fetch_response(version: int, throttle_time_ms: int, responses: list[dict[str, Any]],
                          error_code: int = 0, session_id: int = 0) -> list[bytes]:
    """A Fetch v0-12 response body as byte pieces; large record sets are pieces of their own.

    Partition fields a version has and the dict lacks take Kafka's defaults (last stable
    offset and log start offset -1, aborted transactions null, preferred read replica -1).
    At v12 every tagged section is empty: the response tags (diverging epoch, current leader,
    snapshot id) are KRaft's and Debian's kcat fails on a section longer than one byte.
    """
    return encode_fetch_response_rows(version, throttle_time_ms, [(t["topic"], [
        (p["partition_index"], p["error_code"], p["high_watermark"], p.get("last_stable_offset", -1),
         p.get("log_start_offset", -1), p.get("aborted_transactions"), p["records"], p.get("preferred_read_replica", -1))
        for p in t["partitions"]]) for t in responses], error_code, session_id)


# A Fetch response partition (encode_fetch_response_rows): partition index, error code, high
# watermark, last stable offset, log start offset, aborted transactions (None, or dicts with
# producer_id and first_offset), records (bytes, or any piece with a length: a file range),
# preferred read replica.
FetchResponseRow = tuple[int, int, int, int, int, "list[dict[str, int]] | None", Any, int]
# A partition's fixed fields up to its records' length, when it has no aborted transactions
# (null): (index, error, high watermark, [last stable offset v4+], [log start offset v5+],
# [-1: null aborted transactions v4+], [preferred read replica v11+], records length).
_ROW_V0, _ROW_V4 = struct.Struct(">ihqi"), struct.Struct(">ihqqii")
_ROW_V5, _ROW_V11 = struct.Struct(">ihqqqii"), struct.Struct(">ihqqqiii")


def encode_fetch_response_rows(version: int, throttle_time_ms: int,
                               responses: list[tuple[str, list[FetchResponseRow]]],
                               error_code: int = 0, session_id: int = 0) -> list[bytes]:
    """encode_fetch_response with each topic as (name, rows) and each partition a
    FetchResponseRow: one struct call for a partition's fixed fields (a follower's fetch answers
    every partition it follows, most of them idle, in every round of replication)."""
    flex = version >= 12
    pieces: list[bytes] = []
    head = bytearray()
    if version >= 1:
        head += _I.pack(throttle_time_ms)
    if version >= 7:
        head += _HI.pack(error_code, session_id)
    head += uvarint(len(responses) + 1) if flex else _I.pack(len(responses))
    row = None if flex else _ROW_V11 if version >= 11 else _ROW_V5 if version >= 5 else _ROW_V4 if version >= 4 else _ROW_V0
    for topic, parts in responses:
        name = topic.encode()
        head += uvarint(len(name) + 1) if flex else _H.pack(len(name))
        head += name
        head += uvarint(len(parts) + 1) if flex else _I.pack(len(parts))
        for index, error, high_watermark, last_stable, log_start, aborted, records, preferred in parts:
            if row is not None and aborted is None and records is not None:
                # The common case, one struct call: every field up to the records' length.
                size = len(records)
                if version >= 11:
                    head += row.pack(index, error, high_watermark, last_stable, log_start, -1, preferred, size)
                elif version >= 5:
                    head += row.pack(index, error, high_watermark, last_stable, log_start, -1, size)
                elif version >= 4:
                    head += row.pack(index, error, high_watermark, last_stable, -1, size)
                else:
                    head += row.pack(index, error, high_watermark, size)
                if size > 4096:
                    pieces.append(bytes(head))
                    pieces.append(records)
                    head = bytearray()
                elif size:
                    head += records
                continue
            head += _IHQ.pack(index, error, high_watermark)
            if version >= 4:
                head += _Q.pack(last_stable)
                if version >= 5:
                    head += _Q.pack(log_start)
                if aborted is None:
                    head += b"\x00" if flex else _NULL_ARRAY
                else:
                    head += uvarint(len(aborted) + 1) if flex else _I.pack(len(aborted))
                    for a in aborted:
                        head += _QQ.pack(a["producer_id"], a["first_offset"])
                        if flex:
                            head += b"\x00"  # each element's tagged section
                if version >= 11:
                    head += _I.pack(preferred)
            if records is None:
                head += b"\x00" if flex else _NULL_ARRAY
            else:
                head += uvarint(len(records) + 1) if flex else _I.pack(len(records))
                if len(records) > 4096:
                    # Large record sets travel as their own piece rather than being copied into head.
                    pieces.append(bytes(head))
                    pieces.append(records)
                    head = bytearray()
                else:
                    head += records
            if flex:
                head += b"\x00"  # the partition's tagged section (after its records, as in every struct)
        if flex:
            head += b"\x00"  # the topic's tagged section
    if flex:
        head += b"\x00"  # the body's tagged section
    if head:
        pieces.append(bytes(head))
    return pieces


def decode_fetch_response(buf: bytes | memoryview, version: int) -> dict[str, Any]:
    """A Fetch v0-12 response body with record sets as zero-copy slices (the replica fetcher's
    path, at v3; tests read the other versions). Tagged fields are skipped."""
    if not 0 <= version <= 12:
        raise ProtocolError(f"Fetch v{version} is not served")
    flex = version >= 12
    c = _Cursor(buf)
    out: dict[str, Any] = {}
    if version >= 1:
        (out["throttle_time_ms"],) = c.unpack(_I)
    if version >= 7:
        out["error_code"], out["session_id"] = c.unpack(_HI)
    responses = []
    for _ in range(_compact_count(c, 3) if flex else c.count(6)):
        name = _compact_name(c) if flex else c.string()
        parts = []
        for _ in range(_compact_count(c, 15) if flex else c.count(18)):
            index, error, hw = c.unpack(_IHQ)
            part: dict[str, Any] = {"partition_index": index, "error_code": error, "high_watermark": hw}
            if version >= 4:
                (part["last_stable_offset"],) = c.unpack(_Q)
                if version >= 5:
                    (part["log_start_offset"],) = c.unpack(_Q)
                n = _uvarint(c) - 1 if flex else c.unpack(_I)[0]
                if n < -1 or n * 16 > c.end - c.pos:
                    raise ProtocolError(f"impossible aborted transactions length {n}")
                aborted: list[dict[str, int]] = []
                for _ in range(max(n, 0)):
                    producer_id, first_offset = c.unpack(_QQ)
                    if flex:
                        _skip_tagged_fields(c)
                    aborted.append({"producer_id": producer_id, "first_offset": first_offset})
                part["aborted_transactions"] = None if n == -1 else aborted
                if version >= 11:
                    (part["preferred_read_replica"],) = c.unpack(_I)
            size = _uvarint(c) - 1 if flex else c.unpack(_I)[0]
            part["records"] = c.records(size)
            if flex:
                _skip_tagged_fields(c)
            parts.append(part)
        if flex:
            _skip_tagged_fields(c)
        responses.append({"topic": name, "partitions": parts})
    if flex:
        _skip_tagged_fields(c)
    out["responses"] = responses
    return out


_IHQI = struct.Struct(">ihqi")
_EMPTY = memoryview(b"")
FetchPartitionV3 = tuple[str, int, int, int, memoryview | None]


def decode_fetch_response_v3_partitions(buf: bytes | memoryview) -> list[FetchPartitionV3]:
    """A Fetch v3 response body as one (topic, partition, error code, high watermark, records)
    tuple per partition, in response order; records are zero-copy slices, None when null.

    The replica fetcher's path: it reads one of these per round of replication, most of whose
    partitions are idle, and a dict per partition and topic (decode_fetch_response) was the
    larger part of reading it. Same checks: a short or impossible body is a ProtocolError."""
    mv = memoryview(buf)
    end = len(mv)
    out: list[FetchPartitionV3] = []
    append = out.append
    head = _IHQI.unpack_from
    try:
        (topics,) = _I.unpack_from(mv, 4)  # after throttle_time_ms
        pos = 8
        if topics < 0 or topics * 6 > end - pos:
            raise ProtocolError(f"impossible array length {topics}")
        for _ in range(topics):
            (n,) = _H.unpack_from(mv, pos)
            if n < 0 or pos + 2 + n > end:
                raise ProtocolError("null or truncated topic name")
            name = str(mv[pos + 2:pos + 2 + n], "utf-8")
            (parts,) = _I.unpack_from(mv, pos + 2 + n)
            pos += 6 + n
            if parts < 0 or parts * 18 > end - pos:
                raise ProtocolError(f"impossible array length {parts}")
            for _ in range(parts):
                index, error, hw, size = head(mv, pos)
                pos += 18
                if size > 0:
                    if pos + size > end:
                        raise ProtocolError(f"truncated at byte {pos}")
                    append((name, index, error, hw, mv[pos:pos + size]))
                    pos += size
                elif size == 0:
                    append((name, index, error, hw, _EMPTY))
                elif size == -1:
                    append((name, index, error, hw, None))
                else:
                    raise ProtocolError(f"invalid record set length {size}")
    except struct.error as e:
        raise ProtocolError(f"truncated Fetch v3 response: {e}") from None
    except UnicodeDecodeError as e:
        raise ProtocolError("topic name is not UTF-8") from e
    return out
