"""Down-conversion: a stored record set rewritten in an older message format, for consumers
whose Fetch version predates it (Fetch v0-1 read magic 0, v2-3 magic 1), and the KIP-74 size
rules applied to what results.

Follows Kafka 2.8 (RecordsUtil.downConvert, LazyDownConversionRecords, KafkaApis
maybeConvertFetchedData): a set is converted only when some entry is newer than the target;
entries already at or below the target are copied as stored; a RecordBatch v2 becomes
uncompressed messages, one per record with its own offset (records below the fetch offset
left out), or, when compressed, one wrapper message with the same codec (every record kept,
inner offsets relative for magic 1 and absolute for magic 0); magic-1 wrappers going to magic
0 are rebuilt the same way. Headers, producer ids and leader epochs have no place in the
older formats and are dropped; control batches are skipped; a LogAppendTime batch keeps its
timestamp type bit and gives every message its max timestamp. ZStandard cannot be expressed
below magic 2: UNSUPPORTED_COMPRESSION_TYPE. A cut-off last entry (fetch reads end inside
one) is left out.

Departure in how the size limit is applied: Kafka streams converted chunks up to the size of
the stored slice and pads or cuts the rest; here the converted set is measured and cut by the
same rules the stored one would be (fit()), so the bytes sent are within the request's limits
after conversion, and only the conversion of the first stored batch may exceed them (Kafka's
"at least one full batch of down-converted messages").
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ErrorCode
from protocol.layouts import LOG_OVERHEAD, MAGIC_OFFSET, RecordBatchHeader, offset_of
from protocol.records import compression, message_set, record_batch
from protocol.records.errors import RecordsError
from protocol.records.message_set import CODEC_MASK, TIMESTAMP_TYPE_BIT, encode_entry

_RECORD_BATCH_MAGIC = 2
_CONTROL = 0x20
_SIZE_AT = 8  # the int32 after the 8-byte offset: entry size (magic 0/1) or batch length (magic 2)
_ATTRIBUTES_AT = MAGIC_OFFSET + 1  # magic 0/1 attributes follow the magic
_BATCH_ATTRIBUTES_AT = offset_of(RecordBatchHeader, "attributes")  # int16; the codec is in its low byte


def target_magic(fetch_version: int) -> int:
    """The newest message format a consumer's Fetch version can read (Kafka 2.8's rule)."""
    return 0 if fetch_version <= 1 else 1 if fetch_version <= 3 else 2


def needs_conversion(data: bytes | bytearray | memoryview, to_magic: int) -> bool:
    """Whether any complete entry of a fetched set is newer than to_magic (Kafka's
    `!hasCompatibleMagic`); one header peek per entry, no copying."""
    if to_magic >= 2:
        return False
    view = memoryview(data)
    end = len(view)
    pos = 0
    while pos + MAGIC_OFFSET < end:
        if view[pos + MAGIC_OFFSET] > to_magic:
            return True
        size = int.from_bytes(view[pos + _SIZE_AT:pos + LOG_OVERHEAD], "big", signed=True)
        if size <= 0:
            return False
        pos += LOG_OVERHEAD + size
    return False


@dataclass
class Converted:
    """A converted set: its bytes, where each top-level entry ends, and where the entries made
    from the first stored entry end (the part Kafka always sends whole)."""

    data: bytes
    entry_ends: list[int]
    first_unit_end: int


def down_convert(data: bytes | bytearray | memoryview, to_magic: int, fetch_offset: int) -> Converted:
    """The complete entries of a stored set in message format to_magic (0 or 1)."""
    if to_magic not in (0, 1):
        raise ValueError(f"down-conversion targets magic 0 or 1, not {to_magic}")
    view = memoryview(data)
    out: list[bytes] = []
    ends: list[int] = []
    size = 0
    first_unit_end = -1
    pos = 0
    while pos + LOG_OVERHEAD <= len(view):
        magic = view[pos + MAGIC_OFFSET] if pos + MAGIC_OFFSET < len(view) else -1
        length = int.from_bytes(view[pos + _SIZE_AT:pos + LOG_OVERHEAD], "big", signed=True)
        if magic < 0 or pos + LOG_OVERHEAD + length > len(view):
            break  # cut off
        if magic <= to_magic:
            nxt = pos + LOG_OVERHEAD + length
            pieces = [bytes(view[pos:nxt])]
        elif magic == _RECORD_BATCH_MAGIC:
            if view[pos + _BATCH_ATTRIBUTES_AT + 1] & CODEC_MASK == compression.ZSTD:
                raise _zstd()  # before anything is inflated: magic 0/1 cannot carry it
            contents = record_batch.batch_contents(view, pos)
            if contents is None:
                break
            attributes, max_ts, records, nxt = contents
            pieces = [] if attributes & _CONTROL else _convert(records, attributes & CODEC_MASK,
                                                                 bool(attributes & TIMESTAMP_TYPE_BIT), max_ts,
                                                                 to_magic, fetch_offset)
        else:  # a magic-1 entry going to magic 0
            entry = message_set.decode_entry(view, pos)
            if entry is None:
                break
            legacy, nxt = entry
            attributes = view[pos + _ATTRIBUTES_AT]
            batch = [(r.offset, r.timestamp, r.key, r.value) for r in legacy]
            log_append = bool(attributes & TIMESTAMP_TYPE_BIT)
            pieces = _convert(batch, attributes & CODEC_MASK, log_append,
                              max((r.timestamp for r in legacy), default=-1), to_magic, fetch_offset)
        for p in pieces:
            out.append(p)
            size += len(p)
            ends.append(size)
        if first_unit_end < 0 and pieces:
            first_unit_end = size
        pos = nxt
    return Converted(b"".join(out), ends, max(first_unit_end, 0))


def _zstd() -> RecordsError:
    return RecordsError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                        "ZStandard batches cannot be down-converted to message format v0/v1")


def _convert(records: list[record_batch.BatchRecord], codec: int, log_append_time: bool, max_ts: int,
             to_magic: int, fetch_offset: int) -> list[bytes]:
    if codec == compression.ZSTD:
        raise _zstd()
    ts_bit = TIMESTAMP_TYPE_BIT if log_append_time and to_magic == 1 else 0

    def ts(t: int) -> int:
        return max_ts if log_append_time else t

    if codec == compression.NONE:
        return [encode_entry(o, to_magic, ts_bit, ts(t), k, v) for o, t, k, v in records if o >= fetch_offset]
    if not records:
        return []
    base = records[0][0] if to_magic == 1 else 0  # magic 1 wrappers hold relative inner offsets (KIP-31)
    inner = b"".join(encode_entry(o - base, to_magic, ts_bit, ts(t), k, v) for o, t, k, v in records)
    wrapper_ts = max_ts if log_append_time else max(t for _, t, _, _ in records)
    return [encode_entry(records[-1][0], to_magic, codec | ts_bit, wrapper_ts, None,
                         compression.compress(codec, inner, to_magic))]


def fit(converted: Converted, max_bytes: int, min_one: bool, allow_partial: bool) -> bytes:
    """What of a converted set a partition may send, by KIP-74's rules on the converted sizes.

    Fetch v3 (not allow_partial): the whole entries that fit in max_bytes; when min_one (no
    partition of the response has data yet) at least the conversion of the first stored
    entry. Fetch v0-2 (allow_partial): the first max_bytes bytes, ending inside a message if
    it must, as Kafka 0.10 sent them (the consumer then reports a message too large).
    """
    data = converted.data
    if len(data) <= max_bytes:
        return data
    if allow_partial:
        return data[:max(max_bytes, 0)]
    keep = 0
    for end in converted.entry_ends:
        if end > max_bytes:
            break
        keep = end
    if min_one:
        keep = max(keep, converted.first_unit_end)
    return data[:keep]
