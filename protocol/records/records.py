"""Record sets in any message format: the front that peeks at the magic and picks the codec.

protocol.records.message_set handles magic 0 and 1, protocol.records.record_batch magic 2, and
neither imports the other; what needs both lives here. Every format keeps its magic at the
same offset (protocol.layouts.MAGIC_OFFSET), so one peek at an entry says which it is.

The log holds RecordBatch v2 (what protocol.records.validator makes of every produced set) and,
in logs written before, magic-1 entries; a log may mix them. The follower's check
(`shallow_validate`) and the readers here take both. protocol.records.down_convert rewrites
what a log slice holds for consumers that fetch with Fetch < 4.
"""

from __future__ import annotations

import struct

import crc32c

from protocol.layouts import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_CRC_FROM,
    RECORD_BATCH_HEADER,
    RECORD_BATCH_HEADER_SIZE,
    LogEntryHead,
    MessageV0Head,
    MessageV1Head,
    fixed,
    offset_of,
    size_of,
)
from protocol.records import message_set, record_batch
from protocol.records.crc import crc32
from protocol.records.errors import RecordsError
from protocol.records.message_set import AppendInfo, Record, encode_entry

__all__ = ["AppendInfo", "Record", "batches_to_message_set", "decode_records", "first_at_or_after", "magic_at",
           "max_timestamp", "shallow_validate", "time_head"]

RECORD_BATCH_MAGIC = 2
_ENTRY_HEAD = fixed(MessageV0Head, last="magic")  # offset, size, crc (v0/v1) or leader epoch (v2), magic
_SIZE = struct.Struct(">i")
_V2_CRC = struct.Struct(">I")
_V2_LAST_DELTA = struct.Struct(">i")
_MIN_V1 = message_set.MIN_MESSAGE[0]
_MIN_V2 = record_batch.MIN_BATCH_LENGTH
NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP (magic 0 messages have none)
NO_LEADER_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH (magic 0/1 carry none)
# What time_head needs of an entry or batch: the whole batch header (it covers a message's head).
TIME_HEAD_SIZE = RECORD_BATCH_HEADER_SIZE
_LOG_ENTRY_HEAD = fixed(LogEntryHead)
_V1_ATTRIBUTES_TIMESTAMP = fixed(MessageV1Head, "attributes", "timestamp")
_I16 = struct.Struct(">h")
_V1_ATTRIBUTES_AT = offset_of(MessageV1Head, "attributes")
_V1_HEAD_SIZE = size_of(MessageV1Head)
_LOG_APPEND_TIME_V1 = 0x08  # message attributes bit 3 (magic 1)
_LOG_APPEND_TIME_V2 = 0x08  # batch attributes bit 3 (magic 2)


def magic_at(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The magic byte of the entry or batch at pos; -1 when the buffer ends before it."""
    return buf[pos + MAGIC_OFFSET] if pos + MAGIC_OFFSET < len(buf) else -1


def batches_to_message_set(data: bytes | bytearray | memoryview, base_offset: int,
                           max_message_bytes: int | None = None) -> bytes:
    """Every batch in data as uncompressed magic-1 entries numbered from base_offset; a batch
    above max_message_bytes is refused before it is inflated (record_batch.parse_batch)."""
    buf = memoryview(data)
    pos = 0
    out = []
    n = 0
    while pos < len(buf):
        parsed = record_batch.parse_batch(buf, pos, strict=True, max_bytes=max_message_bytes)
        assert parsed is not None
        records, pos = parsed
        for _, ts, key, value in records:
            out.append(encode_entry(base_offset + n, 1, 0, ts, key, value))
            n += 1
    if not out:
        raise RecordsError.corrupt("record batches without records")
    return b"".join(out)


def shallow_validate(buf: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(bytes of complete entries, last offset) of a fetched slice of either format, as a
    follower checks it: each magic-0/1 message's CRC-32, each batch's CRC32C, offsets
    increasing, nothing inside compressed data (the leader validated that). A cut-off last
    entry (fetch responses end so) is left out; -1 means nothing complete.

    One tight pass with no per-entry objects: it runs over every replicated byte.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    last = -1
    unpack, head = _ENTRY_HEAD.unpack_from, _ENTRY_HEAD.size
    overhead, crc_from = LOG_OVERHEAD, MAGIC_OFFSET
    while pos + head <= end:
        offset, size, stored, magic = unpack(view, pos)
        nxt = pos + overhead + size
        if nxt > end:
            break
        if magic == RECORD_BATCH_MAGIC:
            if size < _MIN_V2:
                raise RecordsError.corrupt(f"bad record batch length {size} at offset {offset}")
            if offset <= last:
                raise RecordsError.corrupt("offsets are not increasing")
            (crc,) = _V2_CRC.unpack_from(view, pos + record_batch.CRC_AT)
            if crc32c.crc32c(view[pos + RECORD_BATCH_CRC_FROM:nxt]) != crc:
                raise RecordsError.corrupt(f"record batch CRC32C mismatch at offset {offset}")
            (delta,) = _V2_LAST_DELTA.unpack_from(view, pos + record_batch.LAST_OFFSET_DELTA_AT)
            if delta < 0:
                raise RecordsError.corrupt(f"negative last offset delta at offset {offset}")
            last = offset + delta
            pos = nxt
            continue
        if size < _MIN_V1:
            raise RecordsError.corrupt(f"bad message size {size} at offset {offset}")
        if not 0 <= magic <= 1 or offset <= last or crc32(view[pos + crc_from:nxt]) != stored:
            if offset <= last:
                raise RecordsError.corrupt("offsets are not increasing")
            raise RecordsError.corrupt(f"CRC or magic mismatch at offset {offset}")
        last = offset
        pos = nxt
    return pos, last


def decode_records(data: bytes | bytearray | memoryview, with_headers: bool = False) -> list[Record]:
    """Every record of a set in any format (magic 0/1 entries and magic 2 batches, even mixed),
    compressed wrappers flattened to absolute offsets; a cut-off tail is ignored. With
    `with_headers`, records of v2 batches carry their headers."""
    buf = memoryview(data)
    out: list[Record] = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(buf):
        if magic_at(buf, pos) == RECORD_BATCH_MAGIC:
            headers: list[record_batch.Headers] | None = [] if with_headers else None
            batch = record_batch.parse_batch(buf, pos, strict=False, headers_out=headers)
            if batch is None:
                break
            attributes = _I16.unpack_from(buf, pos + record_batch.ATTRIBUTES_AT)[0]
            ts_type = 1 if attributes & record_batch.TIMESTAMP_TYPE_BIT else 0
            records, pos = batch
            if headers or ts_type:
                hs = headers or [()] * len(records)
                out.extend(Record(o, t, k, v, h, ts_type) for (o, t, k, v), h in zip(records, hs, strict=True))
            else:
                out.extend(Record(o, t, k, v) for o, t, k, v in records)
            continue
        entry = message_set.decode_entry(buf, pos)
        if entry is None:
            break
        more, pos = entry
        out.extend(more)
    return out


# ---- timestamps (the time index and ListOffsets by timestamp) ---------------------------------------

def time_head(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int, int]:
    """(size with log overhead, largest timestamp, last offset, partition leader epoch) of the
    entry or batch at pos, from its head alone (buf holds at least min(TIME_HEAD_SIZE, its size)).

    Kafka's shallow view: a batch's maxTimestamp and lastOffset; a magic-1 message's own
    timestamp (a compressed wrapper's, which Kafka's validator sets to the largest inner one);
    no timestamp in magic 0.
    """
    magic = magic_at(buf, pos)
    if magic == RECORD_BATCH_MAGIC:
        (base, length, epoch, _, _, _, last_delta, _, max_ts, _, _, _, _) = RECORD_BATCH_HEADER.unpack_from(buf, pos)
        return LOG_OVERHEAD + length, max_ts, base + last_delta, epoch
    offset, size = _LOG_ENTRY_HEAD.unpack_from(buf, pos)
    if magic == 1 and size + LOG_OVERHEAD >= _V1_HEAD_SIZE:
        _, ts = _V1_ATTRIBUTES_TIMESTAMP.unpack_from(buf, pos + _V1_ATTRIBUTES_AT)
        return LOG_OVERHEAD + size, ts, offset, NO_LEADER_EPOCH
    return LOG_OVERHEAD + size, NO_TIMESTAMP, offset, NO_LEADER_EPOCH


def max_timestamp(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(largest timestamp, shallow offset of the entry or batch that carries it) over the whole
    entries of data, the first one on a tie (Kafka's LogAppendInfo maxTimestamp and
    shallowOffsetOfMaxTimestamp); (NO_TIMESTAMP, -1) when none carries a timestamp.

    One head unpack per entry (per batch in magic 2), no per-record objects: this runs on every
    append.
    """
    best, best_offset = NO_TIMESTAMP, -1
    end = len(data)
    pos = 0
    while pos + LOG_OVERHEAD <= end:
        size, ts, last, _ = time_head(data, pos)
        if ts > best:
            best, best_offset = ts, last
        pos += size
    return best, best_offset


def first_at_or_after(entry: bytes | bytearray | memoryview, target: int,
                      starting_offset: int) -> tuple[int, int, int] | None:
    """(timestamp, offset, leader epoch) of the first record of this one entry or batch whose
    timestamp is >= target and offset >= starting_offset (Kafka's FileRecords.searchForTimestamp
    inside one batch); None when no record qualifies or the entry cannot be read.

    Records of a LogAppendTime batch or wrapper carry the batch's time, as Kafka reads them.
    """
    buf = memoryview(entry)
    if len(buf) < LOG_OVERHEAD:
        return None
    _, max_ts, _, epoch = time_head(buf, 0)
    magic = magic_at(buf, 0)
    log_append = False
    if magic == RECORD_BATCH_MAGIC:
        log_append = bool(RECORD_BATCH_HEADER.unpack_from(buf, 0)[5] & _LOG_APPEND_TIME_V2)
    elif magic == 1:
        log_append = bool(buf[_V1_ATTRIBUTES_AT] & _LOG_APPEND_TIME_V1)
    try:
        records = decode_records(buf)
    except RecordsError:
        return None
    for r in records:
        ts = max_ts if log_append else r.timestamp
        if ts >= target and r.offset >= starting_offset:
            return ts, r.offset, epoch
    return None
