"""Message sets of format v0 and v1 (magic 0/1): validation, offset assignment, building, reading.

A log entry is `offset int64, size int32, message`, and a message is
`crc uint32, magic int8, attributes int8, [timestamp int64 if magic 1], key bytes, value bytes`,
the CRC covering magic..end. Attributes bits 0-2 name the codec of a wrapper message whose
value is itself a message set.

Offsets are assigned the way Kafka 0.10 does it, touching as little as possible:
- uncompressed messages get their 8-byte offset fields rewritten in place (the CRC does not
  cover the offset);
- a magic-1 wrapper keeps its inner relative offsets 0..n-1 (KIP-31) and only the wrapper
  takes the absolute offset of its last inner message, so nothing is recompressed;
- a magic-0 wrapper needs absolute inner offsets, so it is decompressed, renumbered and
  recompressed with the same codec.
This module knows magic 0 and 1 only. RecordBatch v2 input (magic 2, e.g. aiokafka's producer
even inside Produce v2) is converted to uncompressed magic-1 messages by protocol.records.records,
the front that picks a codec by magic; protocol.records.record_batch parses it. The fixed
layouts (entry head, message head) are declared in protocol.layouts; the struct formats, sizes
and offsets below are derived from those declarations.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from protocol.errors import ErrorCode
from protocol.layouts import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    LogEntryHead,
    MessageV0Head,
    MessageV1Head,
    fixed,
    offset_of,
    size_of,
)
from protocol.records import compression
from protocol.records.crc import crc32
from protocol.records.errors import RecordsError

_ENTRY = fixed(LogEntryHead)  # offset, size
_OFFSET = fixed(LogEntryHead, "offset", "offset")
_ENTRY_HEAD = fixed(MessageV0Head, last="magic")  # offset, size, then the message's crc and magic
_HEAD = fixed(MessageV0Head, "crc", "attributes")  # crc, magic, attributes
_HEAD_AT = offset_of(MessageV0Head, "crc")  # 12: the message, behind its entry head
_CRC = fixed(MessageV0Head, "crc", "crc")
_MAGIC_ATTRIBUTES = fixed(MessageV0Head, "magic", "attributes")
_MAGIC_ATTRIBUTES_TIMESTAMP = fixed(MessageV1Head, "magic", "timestamp")
_TIMESTAMP = fixed(MessageV1Head, "timestamp", "timestamp")
_TIMESTAMP_AT = offset_of(MessageV1Head, "timestamp")  # 18
_KEY_AT_V0, _KEY_AT_V1 = size_of(MessageV0Head), size_of(MessageV1Head)  # 18, 26: the key length
_I32 = struct.Struct(">i")  # key and value lengths (protocol.layouts.NullableBytes)
# crc, magic, attributes, [timestamp], key length, value length
MIN_MESSAGE = {0: _KEY_AT_V0 - LOG_OVERHEAD + 2 * _I32.size, 1: _KEY_AT_V1 - LOG_OVERHEAD + 2 * _I32.size}
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
NO_TIMESTAMP = -1


@dataclass
class AppendInfo:
    buffer: bytes
    first_offset: int
    last_offset: int
    count: int
    max_timestamp: int
    codec: int
    magic: int


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    # RecordBatch v2 headers (key, value), filled only when asked for (decode_records(with_headers=True));
    # magic 0/1 messages have none.
    headers: tuple[tuple[str, bytes | None], ...] = ()
    # 1 when a RecordBatch v2 says LogAppendTime (decode_records), else 0 (CreateTime).
    timestamp_type: int = 0


def scan_entries(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """(position, offset, length with the 12-byte log overhead) of each complete entry.

    Stops silently at a partial or impossible entry: fetch responses and torn log tails end so.
    """
    end = len(buf)
    pos = start
    while pos + LOG_OVERHEAD <= end:
        offset, size = _ENTRY.unpack_from(buf, pos)
        if size < MIN_MESSAGE[0] or pos + LOG_OVERHEAD + size > end:
            return
        yield pos, offset, LOG_OVERHEAD + size
        pos += LOG_OVERHEAD + size


def _key_value(buf: bytes | bytearray | memoryview, p: int, end: int) -> tuple[bytes | None, bytes | None]:
    """Key and value of a message whose key length field is at p; raises on overrun."""
    out: list[bytes | None] = []
    for _ in range(2):
        if p + 4 > end:
            raise RecordsError.corrupt("message shorter than its key/value lengths")
        (n,) = _I32.unpack_from(buf, p)
        p += 4
        if n < 0:
            if n != -1:
                raise RecordsError.corrupt(f"negative length {n}")
            out.append(None)
            continue
        if p + n > end:
            raise RecordsError.corrupt("key or value overruns its message")
        out.append(bytes(buf[p:p + n]))
        p += n
    if p != end:
        raise RecordsError.corrupt("message size disagrees with its key and value")
    return out[0], out[1]


class _Message:
    __slots__ = ("pos", "offset", "size", "crc", "magic", "attributes", "timestamp", "kv_at", "end")
    # Unpacked by struct, which mypy sees as Any.
    offset: int
    size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int, check_crc: bool) -> None:
        if pos + LOG_OVERHEAD > len(buf):
            raise RecordsError.corrupt("truncated log entry header")
        self.pos = pos
        self.offset, self.size = _ENTRY.unpack_from(buf, pos)
        self.end = pos + LOG_OVERHEAD + self.size
        if self.size < MIN_MESSAGE[0] or self.end > len(buf):
            raise RecordsError.corrupt(f"bad message size {self.size} at {pos}")
        self.crc, self.magic, self.attributes = _HEAD.unpack_from(buf, pos + _HEAD_AT)
        if self.magic not in (0, 1):
            raise RecordsError.corrupt(f"unknown magic {self.magic}")
        if self.size < MIN_MESSAGE[self.magic]:
            raise RecordsError.corrupt(f"message of {self.size} bytes is too short for magic {self.magic}")
        if check_crc and crc32(buf[pos + MAGIC_OFFSET:self.end]) != self.crc:
            raise RecordsError.corrupt(f"CRC mismatch in message at offset {self.offset}")
        if self.magic == 1:
            (self.timestamp,) = _TIMESTAMP.unpack_from(buf, pos + _TIMESTAMP_AT)
            self.kv_at = pos + _KEY_AT_V1
        else:
            self.timestamp = NO_TIMESTAMP
            self.kv_at = pos + _KEY_AT_V0

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    def key_value(self, buf: bytes | bytearray | memoryview) -> tuple[bytes | None, bytes | None]:
        return _key_value(buf, self.kv_at, self.end)


def _encode_message(magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    if magic == 1:
        parts = [_MAGIC_ATTRIBUTES_TIMESTAMP.pack(magic, attributes, timestamp)]
    else:
        parts = [_MAGIC_ATTRIBUTES.pack(magic, attributes)]
    for b in (key, value):
        if b is None:
            parts.append(_I32.pack(-1))
        else:
            parts.append(_I32.pack(len(b)))
            parts.append(bytes(b))
    body = b"".join(parts)
    return _CRC.pack(crc32(body)) + body


def encode_entry(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                 value: bytes | None) -> bytes:
    msg = _encode_message(magic, attributes, timestamp, key, value)
    return _ENTRY.pack(offset, len(msg)) + msg


def build_message_set(records: list[tuple[bytes | None, bytes | None, int]], magic: int = 1, codec: int = 0,
                      base_offset: int = 0) -> bytes:
    """Entries for (key, value, timestamp_ms) records; one compressed wrapper when codec != 0."""
    ts = (lambda t: t) if magic == 1 else (lambda t: NO_TIMESTAMP)
    if codec == compression.NONE:
        return b"".join(encode_entry(base_offset + i, magic, 0, ts(t), k, v) for i, (k, v, t) in enumerate(records))
    # Magic 1 wrappers hold relative inner offsets (KIP-31); magic 0 ones absolute offsets.
    inner_base = 0 if magic == 1 else base_offset
    inner = b"".join(encode_entry(inner_base + i, magic, 0, ts(t), k, v) for i, (k, v, t) in enumerate(records))
    wrapper_ts = max((t for _, _, t in records), default=NO_TIMESTAMP) if magic == 1 else NO_TIMESTAMP
    return encode_entry(base_offset + len(records) - 1, magic, codec, wrapper_ts, None,
                        compression.compress(codec, inner, magic))


def _inner_messages(buf: bytes, check_crc: bool, wrapper_magic: int) -> list[_Message]:
    msgs = []
    pos = 0
    while pos < len(buf):
        m = _Message(buf, pos, check_crc)
        if m.codec != compression.NONE:
            raise RecordsError.corrupt("nested compression")
        if m.magic != wrapper_magic:
            raise RecordsError.corrupt("inner message magic differs from its wrapper")
        msgs.append(m)
        pos = m.end
    if not msgs:
        raise RecordsError.corrupt("empty compressed wrapper")
    return msgs


def validate_and_assign(data: bytes | bytearray | memoryview, base_offset: int | None, now_ms: int,
                        max_message_bytes: int | None = None) -> AppendInfo:
    """Checks every magic 0/1 message and, for a leader append, assigns offsets from base_offset.

    With base_offset None (a follower append) offsets are kept as the leader assigned them.
    Record batches (magic 2) are refused here; protocol.records.records.validate_and_assign
    converts them first. With max_message_bytes, a top-level entry (log overhead included, as
    Kafka's sizeInBytes counts it) above it is MESSAGE_TOO_LARGE before anything is
    decompressed, and a wrapper's inner set is bounded by compression.inflated_limit.
    """
    if len(data) == 0:
        raise RecordsError.corrupt("empty record set")
    out = bytearray(data)
    next_offset = base_offset
    first = last = None
    count = 0
    max_ts = NO_TIMESTAMP
    codec = compression.NONE
    magic = -1
    pos = 0
    while pos < len(out):
        m = _Message(out, pos, True)
        magic = m.magic
        if max_message_bytes is not None and m.end - pos > max_message_bytes:
            raise RecordsError(ErrorCode.MESSAGE_TOO_LARGE,
                               f"message of {m.end - pos} bytes exceeds the limit of {max_message_bytes}")
        if m.codec == compression.NONE:
            n = 1
            if next_offset is not None:
                _OFFSET.pack_into(out, pos, next_offset)
                m_first = m_last = next_offset
            else:
                m_first = m_last = m.offset
            max_ts = max(max_ts, m.timestamp)
            end = m.end
        else:
            codec = m.codec
            _, value = m.key_value(out)
            if value is None:
                raise RecordsError.corrupt("compressed wrapper without a value")
            bound = None if max_message_bytes is None else compression.inflated_limit(max_message_bytes)
            inner_buf = compression.decompress(m.codec, value, bound)
            inner = _inner_messages(inner_buf, True, m.magic)
            n = len(inner)
            for im in inner:
                max_ts = max(max_ts, im.timestamp)
            if next_offset is None:
                m_last = m.offset
                m_first = inner[0].offset if m.magic == 0 else m.offset - (n - 1)
                end = m.end
            else:
                m_first, m_last = next_offset, next_offset + n - 1
                relative = all(im.offset == i for i, im in enumerate(inner))
                if m.magic == 1 and relative:
                    _OFFSET.pack_into(out, pos, m_last)
                    end = m.end
                else:
                    # Renumber and recompress: magic 0 needs absolute inner offsets, and a magic-1
                    # wrapper that arrived with odd inner offsets is normalised to 0..n-1.
                    base_inner = m_first if m.magic == 0 else 0
                    inner_bytes = b"".join(
                        encode_entry(base_inner + i, im.magic, 0, im.timestamp, *im.key_value(inner_buf))
                        for i, im in enumerate(inner))
                    entry = encode_entry(m_last, m.magic, m.attributes, m.timestamp, None,
                                         compression.compress(m.codec, inner_bytes, m.magic))
                    out[pos:m.end] = entry
                    end = pos + len(entry)
            if m.magic == 1:
                max_ts = max(max_ts, m.timestamp)
        if first is None:
            first = m_first
        elif last is not None and m_first <= last:
            raise RecordsError.corrupt("offsets are not increasing")
        last = m_last
        count += n
        if next_offset is not None:
            next_offset += n
        pos = end
    assert first is not None and last is not None
    return AppendInfo(bytes(out), first, last, count, max_ts, codec, magic)


def decode_entry(buf: memoryview, pos: int) -> tuple[list[Record], int] | None:
    """Records of the magic 0/1 entry at pos (a compressed wrapper flattened to absolute offsets)
    and the position after it; None when the entry is cut off."""
    if pos + LOG_OVERHEAD > len(buf):
        return None
    _, size = _ENTRY.unpack_from(buf, pos)
    if pos + LOG_OVERHEAD + size > len(buf):
        return None
    m = _Message(buf, pos, True)
    key, value = m.key_value(buf)
    if m.codec == compression.NONE:
        return [Record(m.offset, m.timestamp, key, value)], m.end
    inner_buf = compression.decompress(m.codec, value or b"")
    inner = _inner_messages(inner_buf, True, m.magic)
    n = len(inner)
    out = []
    for im in inner:
        abs_offset = im.offset if m.magic == 0 else m.offset - (n - 1) + im.offset
        k, v = im.key_value(inner_buf)
        out.append(Record(abs_offset, im.timestamp, k, v))
    return out, m.end


def decode_records(data: bytes | bytearray | memoryview) -> list[Record]:
    """Every record of a magic 0/1 set, compressed wrappers flattened to absolute offsets; a
    cut-off tail is ignored. (protocol.records.records.decode_records also reads magic 2.)"""
    buf = memoryview(data)
    out: list[Record] = []
    pos = 0
    while (entry := decode_entry(buf, pos)) is not None:
        records, pos = entry
        out.extend(records)
    return out


def shallow_validate(buf: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(bytes of complete entries, last offset) of a fetched slice, checking each shallow CRC.

    A follower checks what Kafka's follower checks: every top-level message's CRC and magic,
    not the inner messages of compressed wrappers (the leader validated those). One tight pass
    with no per-message objects, because this runs over every replicated byte. A cut-off last
    entry (fetch responses end so) is left out; -1 means nothing complete.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    last = -1
    # One unpack per entry (offset, size, crc, magic) and locals only: this loop runs once per
    # replicated message, and every attribute lookup in it showed up in the follower's profile.
    unpack, crc, min_size, head = _ENTRY_HEAD.unpack_from, crc32, MIN_MESSAGE[0], _ENTRY_HEAD.size
    overhead, crc_from = LOG_OVERHEAD, MAGIC_OFFSET
    while pos + head <= end:
        offset, size, stored, magic = unpack(view, pos)
        nxt = pos + overhead + size
        if nxt > end:
            break
        if size < min_size:
            raise RecordsError.corrupt(f"bad message size {size} at offset {offset}")
        if not 0 <= magic <= 1 or offset <= last or crc(view[pos + crc_from:nxt]) != stored:
            if offset <= last:
                raise RecordsError.corrupt("offsets are not increasing")
            raise RecordsError.corrupt(f"CRC or magic mismatch at offset {offset}")
        last = offset
        pos = nxt
    return pos, last


def any_log_append_time(buf: bytes | bytearray | memoryview) -> bool:
    """Whether a top-level magic-1 message of the set says LogAppendTime (attributes bit 3):
    a producer may not (Kafka's LogValidator.validateTimestamp)."""
    for pos, _, _ in scan_entries(buf):
        _, magic, attributes = _HEAD.unpack_from(buf, pos + _HEAD_AT)
        if magic == 1 and attributes & TIMESTAMP_TYPE_BIT:
            return True
    return False


def timestamped_key_values(buf: bytes | bytearray | memoryview) -> list[tuple[int, bytes | None, bytes | None]]:
    """(timestamp, key, value) of every message of a validated set, in order, compressed wrappers
    flattened (for up-conversion to RecordBatch v2; no per-message objects on the plain path)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    view = memoryview(buf)
    for pos, _, size in scan_entries(view):
        _, magic, attributes = _HEAD.unpack_from(view, pos + _HEAD_AT)
        if attributes & CODEC_MASK:
            entry = decode_entry(view, pos)
            assert entry is not None
            out.extend((r.timestamp, r.key, r.value) for r in entry[0])
            continue
        if magic == 1:
            (ts,) = _TIMESTAMP.unpack_from(view, pos + _TIMESTAMP_AT)
            kv = pos + _KEY_AT_V1
        else:
            ts, kv = NO_TIMESTAMP, pos + _KEY_AT_V0
        key, value = _key_value(view, kv, pos + size)
        out.append((ts, key, value))
    return out
