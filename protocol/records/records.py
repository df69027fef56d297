"""Record sets in any message format: the front that peeks at the magic and picks the codec.

protocol.records.message_set handles magic 0 and 1, protocol.records.record_batch parses magic 2,
and neither imports the other; what needs both lives here. Every format keeps its magic at the
same offset (protocol.layouts.MAGIC_OFFSET), so one peek at a set's first entry says which it is.

The log format is magic 1 (Kafka 0.10.1's), so a produced RecordBatch v2 is rewritten here as
uncompressed magic-1 messages numbered from the leader's next offset, before the magic 0/1
validation runs over it. A follower only ever receives the leader's magic-1 log bytes.
"""

from __future__ import annotations

from protocol.layouts import LOG_OVERHEAD, MAGIC_OFFSET
from protocol.records import message_set, record_batch
from protocol.records.errors import RecordsError
from protocol.records.message_set import AppendInfo, Record, encode_entry

__all__ = ["AppendInfo", "Record", "batches_to_message_set", "decode_records", "magic_at", "shallow_validate",
           "validate_and_assign"]

RECORD_BATCH_MAGIC = 2


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


def shallow_validate(data: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(bytes of complete entries, last offset) of a slice a follower fetched, in any format.

    The leader sends its log as stored, magic 0/1 entries and RecordBatch v2 possibly mixed
    (a log written before and after the format change); each run goes to its codec's one-pass
    check (message_set.shallow_validate, record_batch.shallow_validate), offsets increasing
    across them. A cut-off last entry is left out; -1 means nothing complete.
    """
    view = memoryview(data)
    pos, last = 0, -1
    while True:
        if magic_at(view, pos) == RECORD_BATCH_MAGIC:
            nxt, last = record_batch.shallow_validate(view, pos, last)
        else:
            nxt, last = message_set.shallow_validate(view, pos, last, stop_at_batch=True)
        if nxt == pos:
            return pos, last
        pos = nxt
