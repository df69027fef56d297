"""Record sets in any message format: the front that peeks at the magic and picks the codec.

protocol.records.message_set handles magic 0 and 1, protocol.records.record_batch parses magic 2,
and neither imports the other; what needs both lives here. Every format keeps its magic at the
same offset (protocol.layouts.MAGIC_OFFSET), so one peek at a set's first entry says which it is.

The log format is magic 1 (Kafka 0.10.1's), so a produced RecordBatch v2 is rewritten here as
uncompressed magic-1 messages numbered from the leader's next offset, before the magic 0/1
validation runs over it. A follower only ever receives the leader's magic-1 log bytes.
"""

from __future__ import annotations

from protocol.layouts import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_HEADER,
    RECORD_BATCH_HEADER_SIZE,
    LogEntryHead,
    MessageV1Head,
    fixed,
    offset_of,
    size_of,
)
from protocol.records import message_set, record_batch
from protocol.records.errors import RecordsError
from protocol.records.message_set import AppendInfo, Record, encode_entry

__all__ = ["AppendInfo", "Record", "batches_to_message_set", "decode_records", "first_at_or_after", "magic_at",
           "max_timestamp", "time_head", "validate_and_assign"]

RECORD_BATCH_MAGIC = 2
NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP (magic 0 messages have none)
NO_LEADER_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH (magic 0/1 carry none)
# What time_head needs of an entry or batch: the whole batch header (it covers a message's head).
TIME_HEAD_SIZE = RECORD_BATCH_HEADER_SIZE
_ENTRY_HEAD = fixed(LogEntryHead)
_V1_ATTRIBUTES_TIMESTAMP = fixed(MessageV1Head, "attributes", "timestamp")
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


def validate_and_assign(data: bytes | bytearray | memoryview, base_offset: int | None, now_ms: int,
                        max_message_bytes: int | None = None) -> AppendInfo:
    """Checks every message and, for a leader append, assigns offsets from base_offset.

    Record batches (magic 2) are first converted to magic 1; see the module docstring. With
    base_offset None (a follower append) offsets are kept as the leader assigned them.
    max_message_bytes (`message.max.bytes` / the topic's `max.message.bytes`) bounds each
    batch or top-level message, and through it what a compressed one may inflate to.
    """
    if len(data) == 0:
        raise RecordsError.corrupt("empty record set")
    if magic_at(data, 0) == RECORD_BATCH_MAGIC:
        if base_offset is None:
            raise RecordsError.corrupt("a follower log holds magic 1, not record batches")
        data = batches_to_message_set(data, base_offset, max_message_bytes)
        # Converted records are uncompressed and each smaller than its batch: nothing more to bound.
        max_message_bytes = None
    return message_set.validate_and_assign(data, base_offset, now_ms, max_message_bytes)


def decode_records(data: bytes | bytearray | memoryview) -> list[Record]:
    """Every record of a set in any format (magic 0/1 entries and magic 2 batches, even mixed),
    compressed wrappers flattened to absolute offsets; a cut-off tail is ignored."""
    buf = memoryview(data)
    out: list[Record] = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(buf):
        if magic_at(buf, pos) == RECORD_BATCH_MAGIC:
            batch = record_batch.parse_batch(buf, pos, strict=False)
            if batch is None:
                break
            records, pos = batch
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
    offset, size = _ENTRY_HEAD.unpack_from(buf, pos)
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
