"""RecordBatch v2 (magic 2) parsing.

The served table is Kafka 0.10.1's, whose log format is magic 1, but aiokafka's producer sends
magic-2 batches even inside Produce v2. They are checked (CRC32C over attributes..end) and
decompressed here, and protocol.records.records rewrites their records as uncompressed magic-1
messages with CreateTime timestamps; record headers, which magic 1 cannot carry, are dropped.
Transactional and control batches need a newer message format and are refused.

The 61-byte batch header (baseOffset .. recordCount) is declared in
protocol.layouts.RecordBatchHeader; the struct format, size and offsets here are derived from it.
"""

from __future__ import annotations

import crc32c

from protocol.errors import ErrorCode
from protocol.layouts import (
    RECORD_BATCH_CRC_FROM,
    RECORD_BATCH_HEADER,
    RECORD_BATCH_HEADER_SIZE,
    RecordBatchHeader,
    offset_of,
)
from protocol.primitives import Reader
from protocol.records import compression
from protocol.records.errors import RecordsError

_HEADER = RECORD_BATCH_HEADER
HEADER_SIZE = RECORD_BATCH_HEADER_SIZE  # 61
_LENGTH_FROM = offset_of(RecordBatchHeader, "partition_leader_epoch")  # 12: batch_length counts from here
_TRANSACTIONAL, _CONTROL = 0x10, 0x20

# (offset, timestamp, key, value): the fields of protocol.records.message_set.Record
BatchRecord = tuple[int, int, bytes | None, bytes | None]


def _records(batch: memoryview, attributes: int, count: int, base_offset: int, first_ts: int,
             max_inflated: int | None) -> list[BatchRecord]:
    body = batch[HEADER_SIZE:]
    codec = attributes & 0x07
    if codec != compression.NONE:
        body = memoryview(compression.decompress(codec, body, max_inflated))
    r = Reader(body)
    out = []
    try:
        for _ in range(count):
            length = r.varint()
            start = r.pos
            r.int8()  # record attributes: unused
            ts_delta = r.varint()
            offset_delta = r.varint()
            fields: list[bytes | None] = []
            for _ in range(2):
                n = r.varint()
                fields.append(None if n < 0 else bytes(r.raw(n)))
            for _ in range(r.varint()):
                r.raw(r.varint())
                n = r.varint()
                if n >= 0:
                    r.raw(n)
            if r.pos - start != length:
                raise RecordsError.corrupt("record length disagrees with its fields")
            out.append((base_offset + offset_delta, first_ts + ts_delta, fields[0], fields[1]))
    except ValueError as e:  # ProtocolError from the reader
        raise RecordsError.corrupt(f"malformed record: {e}") from e
    return out


def parse_batch(buf: memoryview, pos: int, strict: bool,
                max_bytes: int | None = None) -> tuple[list[BatchRecord], int] | None:
    """Records of the batch at pos, with absolute offsets, and the position after the batch.

    A cut-off batch raises when strict (a produce request), else gives None (a fetched tail).
    With max_bytes (the message size limit), a larger batch is MESSAGE_TOO_LARGE before its CRC
    is checked or its records inflated, and its inner records may inflate to at most
    compression.inflated_limit(max_bytes).
    """
    if pos + HEADER_SIZE > len(buf):
        if strict:
            raise RecordsError.corrupt("truncated record batch header")
        return None
    (base_offset, length, _epoch, magic, crc, attributes, _last_delta, first_ts, _max_ts, _pid, _pepoch, _seq,
     count) = _HEADER.unpack_from(buf, pos)
    end = pos + _LENGTH_FROM + length
    if magic != 2 or length < HEADER_SIZE - _LENGTH_FROM or count < 0:
        raise RecordsError.corrupt("bad record batch header")
    if end > len(buf):
        if strict:
            raise RecordsError.corrupt("truncated record batch")
        return None
    if max_bytes is not None and end - pos > max_bytes:
        raise RecordsError(ErrorCode.MESSAGE_TOO_LARGE,
                           f"record batch of {end - pos} bytes exceeds the limit of {max_bytes}")
    batch = buf[pos:end]
    if crc32c.crc32c(batch[RECORD_BATCH_CRC_FROM:]) != crc:
        raise RecordsError.corrupt("record batch CRC32C mismatch")
    if attributes & (_TRANSACTIONAL | _CONTROL):
        raise RecordsError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                           "transactional and control batches need message format v2")
    inflated = None if max_bytes is None else compression.inflated_limit(max_bytes)
    return _records(batch, attributes, count, base_offset, first_ts, inflated), end


def batch_contents(buf: memoryview, pos: int) -> tuple[int, int, list[BatchRecord], int] | None:
    """(attributes, max timestamp, records with absolute offsets, position after the batch) of
    the stored batch at pos, or None when it is cut off; for reading back what the log holds
    (down-conversion), so control and transactional batches are returned, not refused.
    """
    if pos + HEADER_SIZE > len(buf):
        return None
    (base_offset, length, _epoch, magic, crc, attributes, _last_delta, first_ts, max_ts, _pid, _pepoch, _seq,
     count) = _HEADER.unpack_from(buf, pos)
    end = pos + _LENGTH_FROM + length
    if magic != 2 or length < HEADER_SIZE - _LENGTH_FROM or count < 0:
        raise RecordsError.corrupt("bad record batch header")
    if end > len(buf):
        return None
    batch = buf[pos:end]
    if crc32c.crc32c(batch[RECORD_BATCH_CRC_FROM:]) != crc:
        raise RecordsError.corrupt("record batch CRC32C mismatch")
    return attributes, max_ts, _records(batch, attributes, count, base_offset, first_ts, None), end


def shallow_validate(buf: bytes | bytearray | memoryview, start: int = 0, last: int = -1) -> tuple[int, int]:
    """(end of the complete batches, last offset) of consecutive RecordBatch v2 from start.

    A follower's checks on what its leader stored (Kafka's appendAsFollower: each batch's
    ensureValid and increasing offsets): the batch length, the CRC32C over attributes..end,
    a non-negative lastOffsetDelta, base offsets above the previous batch's last offset
    (base + lastOffsetDelta). Records inside are not parsed (the leader validated them).
    Stops at a cut-off batch or at an entry of another magic; last is the offset before start.
    """
    view = memoryview(buf)
    end = len(view)
    pos = start
    unpack, head, crc_from, min_length = _HEADER.unpack_from, HEADER_SIZE, RECORD_BATCH_CRC_FROM, HEADER_SIZE - _LENGTH_FROM
    while pos + head <= end:
        base, length, _epoch, magic, crc, _attributes, last_delta = unpack(view, pos)[:7]
        if magic != 2:
            break
        nxt = pos + _LENGTH_FROM + length
        if length < min_length:
            raise RecordsError.corrupt(f"bad record batch length {length} at offset {base}")
        if nxt > end:
            break
        if base <= last or last_delta < 0:
            raise RecordsError.corrupt("offsets are not increasing")
        if crc32c.crc32c(view[pos + crc_from:nxt]) != crc:
            raise RecordsError.corrupt(f"record batch CRC32C mismatch at offset {base}")
        last = base + last_delta
        pos = nxt
    return pos, last
