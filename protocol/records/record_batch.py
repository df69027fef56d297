"""RecordBatch v2 (magic 2): the log's format. Building, in-place header edits, record scans, parsing.

A batch is its 61-byte header (baseOffset .. recordCount, declared in
protocol.layouts.RecordBatchHeader; the struct format, size and offsets here are derived from
it) and its records, compressed together when attributes bits 0-2 name a codec. The CRC32C
covers attributes .. the end, so baseOffset, batchLength and partitionLeaderEpoch can be
written in place without touching it (`set_base_offset`, `stamp_leader_epoch`), while a new
max timestamp or timestamp type (`set_max_timestamp`) recomputes it.

Kafka: org.apache.kafka.common.record.DefaultRecordBatch and DefaultRecord (record layout:
length varint, attributes int8, timestampDelta varlong, offsetDelta varint, key, value as
varint-length bytes, then a varint count of headers, each a varint-length key and value).
`parse_batch` gives records as (offset, timestamp, key, value) tuples for readers that need
values (down-conversion, tests, the pipeline's client); the produce path checks records with
protocol.records.record_scan, which builds no objects.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

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
LEADER_EPOCH_AT = _LENGTH_FROM
CRC_AT = offset_of(RecordBatchHeader, "crc")  # 17
ATTRIBUTES_AT = RECORD_BATCH_CRC_FROM  # 21
LAST_OFFSET_DELTA_AT = offset_of(RecordBatchHeader, "last_offset_delta")  # 23
MAX_TIMESTAMP_AT = offset_of(RecordBatchHeader, "max_timestamp")  # 35
MIN_BATCH_LENGTH = HEADER_SIZE - _LENGTH_FROM  # 49: a header and no records
CODEC_MASK, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, CONTROL_BIT = 0x07, 0x08, 0x10, 0x20
_TRANSACTIONAL, _CONTROL = TRANSACTIONAL_BIT, CONTROL_BIT
CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_PARTITION_LEADER_EPOCH = -1, -1, -1, -1
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

# (offset, timestamp, key, value): the fields of protocol.records.message_set.Record
BatchRecord = tuple[int, int, bytes | None, bytes | None]


def _records(batch: memoryview, attributes: int, count: int, base_offset: int, first_ts: int,
             max_inflated: int | None, log_append_time: int | None = None) -> list[BatchRecord]:
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
            ts = log_append_time if log_append_time is not None else first_ts + ts_delta
            out.append((base_offset + offset_delta, ts, fields[0], fields[1]))
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
    (base_offset, length, _epoch, magic, crc, attributes, _last_delta, first_ts, max_ts, _pid, _pepoch, _seq,
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
    # Under LogAppendTime every record's timestamp is the batch's max timestamp (Kafka's
    # DefaultRecordBatch hands it to each record).
    log_append_time = max_ts if attributes & TIMESTAMP_TYPE_BIT else None
    return _records(batch, attributes, count, base_offset, first_ts, inflated, log_append_time), end


# ---- in-place header edits --------------------------------------------------------------------

def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Write the batch's base offset (not covered by the CRC): offset assignment on the leader."""
    _I64.pack_into(buf, pos, base_offset)


def stamp_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Write partitionLeaderEpoch (bytes 12-16, not covered by the CRC) of the batch at pos."""
    _I32.pack_into(buf, pos + LEADER_EPOCH_AT, epoch)


def batch_crc(buf: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    return int(crc32c.crc32c(memoryview(buf)[pos + RECORD_BATCH_CRC_FROM:end]))


def set_max_timestamp(buf: bytearray | memoryview, timestamp_type: int, max_timestamp: int, pos: int = 0) -> None:
    """Kafka's DefaultRecordBatch.setMaxTimestamp: the timestamp type bit and the max timestamp,
    and the CRC recomputed, only when either differs from what the batch holds."""
    (attributes,) = _I16.unpack_from(buf, pos + ATTRIBUTES_AT)
    (current,) = _I64.unpack_from(buf, pos + MAX_TIMESTAMP_AT)
    current_type = LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME
    if current_type == timestamp_type and current == max_timestamp:
        return
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    else:
        attributes &= ~TIMESTAMP_TYPE_BIT
    _I16.pack_into(buf, pos + ATTRIBUTES_AT, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_AT, max_timestamp)
    (length,) = _I32.unpack_from(buf, pos + 8)
    _U32.pack_into(buf, pos + CRC_AT, batch_crc(buf, pos, pos + _LENGTH_FROM + length))


# ---- records ----------------------------------------------------------------------------------

def varint_at(buf: bytes | memoryview, p: int) -> tuple[int, int]:
    """A zigzag varint/varlong at p and the position after it, read as Kafka's 64-bit long
    (wrapping); IndexError past the end, ValueError beyond 10 bytes."""
    b = buf[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    value = b & 0x7F
    shift = 7
    p += 1
    while True:
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if shift == 63:  # a tenth byte: bits past the 64th drop, as in Kafka's long
                value &= 0xFFFFFFFFFFFFFFFF
            return (value >> 1) ^ -(value & 1), p
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _encode_varint(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# ---- building ---------------------------------------------------------------------------------

Header = tuple[str | bytes, bytes | None]
# (timestamp, key, value, headers)
RecordSpec = tuple[int, bytes | None, bytes | None, Sequence[Header]]


# Zigzag varints of 0..16383 (the lengths, deltas and counts of nearly every record), precomputed.
_SMALL_VARINTS = [_encode_varint(n) for n in range(1 << 14)]
_NULL = _encode_varint(-1)


def zigzag_varint(n: int) -> bytes:
    return _SMALL_VARINTS[n] if 0 <= n < 16384 else _encode_varint(n)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[Header] = ()) -> bytes:
    parts = [b"\x00", zigzag_varint(timestamp_delta), zigzag_varint(offset_delta),
             _NULL if key is None else zigzag_varint(len(key)) + key,
             _NULL if value is None else zigzag_varint(len(value)) + value,
             zigzag_varint(len(headers))]
    for hk, hv in headers:
        hkb = hk.encode() if isinstance(hk, str) else bytes(hk)
        parts.append(zigzag_varint(len(hkb)) + hkb)
        parts.append(_NULL if hv is None else zigzag_varint(len(hv)) + hv)
    body = b"".join(parts)
    return zigzag_varint(len(body)) + body


def build_batch(records: Sequence[RecordSpec], base_offset: int = 0, codec: int = compression.NONE,
                timestamp_type: int = CREATE_TIME, log_append_time: int = NO_TIMESTAMP,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, transactional: bool = False, control: bool = False,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """One RecordBatch v2 holding records at offsets base_offset.. (Kafka's MemoryRecordsBuilder).

    The first timestamp is the first record's; with LogAppendTime the max timestamp is
    log_append_time, else the largest record timestamp.
    """
    if not records:
        raise ValueError("a record batch holds at least one record")
    first_ts = records[0][0]
    body = b"".join(encode_record(i, ts - first_ts, k, v, h) for i, (ts, k, v, h) in enumerate(records))
    max_ts = log_append_time if timestamp_type == LOG_APPEND_TIME else max(r[0] for r in records)
    return batch_around(body, len(records), first_ts, max_ts, base_offset, codec, timestamp_type, producer_id,
                        producer_epoch, base_sequence, transactional, control, partition_leader_epoch)


def batch_around(records: bytes, count: int, first_timestamp: int, max_timestamp: int, base_offset: int = 0,
                 codec: int = compression.NONE, timestamp_type: int = CREATE_TIME,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, transactional: bool = False, control: bool = False,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 last_offset_delta: int | None = None) -> bytes:
    """The header (CRC computed) around `count` encoded records, compressed first with codec.

    `last_offset_delta` defaults to count - 1; the log cleaner keeps a batch's original one when
    it drops records (Kafka's overrideLastOffset: the producer's last sequence stays), and an
    empty batch (count 0, no records) is how it keeps a producer's last batch header.
    """
    if count == 0:
        body = b""
    else:
        body = compression.compress(codec, records, 2) if codec != compression.NONE else records
    attributes = codec | (TIMESTAMP_TYPE_BIT if timestamp_type == LOG_APPEND_TIME else 0)
    attributes |= (TRANSACTIONAL_BIT if transactional else 0) | (CONTROL_BIT if control else 0)
    length = HEADER_SIZE - _LENGTH_FROM + len(body)
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    out = bytearray(_HEADER.pack(base_offset, length, partition_leader_epoch, 2, 0, attributes, delta,
                                 first_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                                 count))
    out += body
    _U32.pack_into(out, CRC_AT, batch_crc(out, 0, len(out)))
    return bytes(out)


def batch_contents(buf: memoryview, pos: int) -> tuple[int, int, list[BatchRecord], int] | None:
    """(attributes, max timestamp, records with absolute offsets and their own timestamps,
    position after the batch) of the stored batch at pos, or None when it is cut off; for
    reading back what the log holds (down-conversion), so control and transactional batches
    are returned, not refused, and LogAppendTime is left to the caller.
    """
    if pos + HEADER_SIZE > len(buf):
        return None
    (base_offset, length, _epoch, magic, crc, attributes, _last_delta, first_ts, max_ts, _pid, _pepoch, _seq,
     count) = _HEADER.unpack_from(buf, pos)
    end = pos + _LENGTH_FROM + length
    if magic != 2 or length < MIN_BATCH_LENGTH or count < 0:
        raise RecordsError.corrupt("bad record batch header")
    if end > len(buf):
        return None
    batch = buf[pos:end]
    if crc32c.crc32c(batch[RECORD_BATCH_CRC_FROM:]) != crc:
        raise RecordsError.corrupt("record batch CRC32C mismatch")
    return attributes, max_ts, _records(batch, attributes, count, base_offset, first_ts, None), end
