"""Every fixed binary layout of the wire, declared once, with construct.

The declarations below are the reference: each names the Kafka source it follows. The hot
paths never run construct (it costs tens of times more per field than struct); they use the
`struct.Struct` objects, sizes and field offsets that `fixed()`, `offset_of()` and `size_of()`
derive from these declarations at import time, so a field's order, width and signedness are
written down in exactly one place. tests/unit/test_layouts.py holds the struct paths to the
construct declarations byte for byte, both ways.

Only big-endian fixed-width integers can be derived to struct; a layout's variable part (a
client id, tagged fields, a message's key and value) is declared here for the tests, and read
by hand after the fixed prefix.
"""

from __future__ import annotations

import struct
from typing import Any

import construct as c

from protocol.primitives import TaggedFields

# ---- framing -------------------------------------------------------------------------------------

# Every request and response: an int32 size, then that many bytes.
# Kafka: org.apache.kafka.common.network.NetworkReceive / NetworkSend (the 4-byte size prefix).
FrameHead = c.Struct("size" / c.Int32sb)

# ---- request and response headers ----------------------------------------------------------------

# Kafka: clients/src/main/resources/common/message/RequestHeader.json. Version 0 (only
# ControlledShutdown v0) has no client id; version 1 adds ClientId, a classic nullable string;
# version 2 is flexible and adds a tagged section, but ClientId stays classic
# ("flexibleVersions": "none" on the field).
RequestHeaderV0 = c.Struct(
    "request_api_key" / c.Int16sb,
    "request_api_version" / c.Int16sb,
    "correlation_id" / c.Int32sb,
)
RequestHeaderV1 = c.Struct(
    *RequestHeaderV0.subcons,
    # A negative length is null (the broker reads any negative length so; clients send -1).
    "client_id_length" / c.Rebuild(c.Int16sb, lambda ctx: -1 if ctx.client_id is None else len(ctx.client_id)),
    "client_id" / c.If(c.this.client_id_length >= 0, c.Bytes(c.this.client_id_length)),
)
RequestHeaderV2 = c.Struct(*RequestHeaderV1.subcons, "tagged_fields" / TaggedFields)

# Kafka: clients/src/main/resources/common/message/ResponseHeader.json. Version 1 (flexible
# responses other than ApiVersions') adds a tagged section.
ResponseHeaderV0 = c.Struct("correlation_id" / c.Int32sb)
ResponseHeaderV1 = c.Struct(*ResponseHeaderV0.subcons, "tagged_fields" / TaggedFields)

# ---- message format v0/v1 (magic 0 and 1) --------------------------------------------------------

# A log entry: offset, then the size of the message that follows.
# Kafka 0.10.1: kafka.message.MessageSet (OffsetLength, MessageSizeLength, LogOverhead = 12);
# later org.apache.kafka.common.record.Records (OFFSET_OFFSET, SIZE_OFFSET, LOG_OVERHEAD).
LogEntryHead = c.Struct("offset" / c.Int64sb, "size" / c.Int32sb)

# A message's head, behind its entry head. The CRC covers magic .. the end of the message;
# attributes bits 0-2 are the codec, bit 3 (magic 1) the timestamp type.
# Kafka 0.10.1: kafka.message.Message (CrcOffset, MagicOffset, AttributesOffset, TimestampOffset,
# KeySizeOffset_V0/_V1); later org.apache.kafka.common.record.LegacyRecord.
MessageV0Head = c.Struct(
    *LogEntryHead.subcons,
    "crc" / c.Int32ub,
    "magic" / c.Int8sb,
    "attributes" / c.Int8sb,
)
MessageV1Head = c.Struct(*MessageV0Head.subcons, "timestamp" / c.Int64sb)

# Key and value: int32 length, -1 for null, then the bytes (Kafka: kafka.message.Message).
NullableBytes = c.FocusedSeq(
    "data",
    "length" / c.Rebuild(c.Int32sb, lambda ctx: -1 if ctx.data is None else len(ctx.data)),
    "data" / c.If(c.this.length >= 0, c.Bytes(c.this.length)),
)
MessageV0 = c.Struct(*MessageV0Head.subcons, "key" / NullableBytes, "value" / NullableBytes)
MessageV1 = c.Struct(*MessageV1Head.subcons, "key" / NullableBytes, "value" / NullableBytes)

# ---- RecordBatch v2 (magic 2) --------------------------------------------------------------------

# The 61-byte batch header; batch_length counts from partition_leader_epoch on, and the CRC32C
# covers attributes .. the end of the batch.
# Kafka: org.apache.kafka.common.record.DefaultRecordBatch (BASE_OFFSET_OFFSET ..
# RECORDS_COUNT_OFFSET, RECORD_BATCH_OVERHEAD = 61).
RecordBatchHeader = c.Struct(
    "base_offset" / c.Int64sb,
    "batch_length" / c.Int32sb,
    "partition_leader_epoch" / c.Int32sb,
    "magic" / c.Int8sb,
    "crc" / c.Int32ub,
    "attributes" / c.Int16sb,
    "last_offset_delta" / c.Int32sb,
    "first_timestamp" / c.Int64sb,
    "max_timestamp" / c.Int64sb,
    "producer_id" / c.Int64sb,
    "producer_epoch" / c.Int16sb,
    "base_sequence" / c.Int32sb,
    "records_count" / c.Int32sb,
)


# ---- a segment's time index ----------------------------------------------------------------------

# One `.timeindex` entry: the largest timestamp so far and the (relative) offset that carries it.
# Kafka: kafka.log.TimeIndex (entrySize = 12: timestamp long, relative offset int).
TimeIndexEntry = c.Struct("timestamp" / c.Int64sb, "relative_offset" / c.Int32sb)

# ---- derivation ----------------------------------------------------------------------------------

def _format_field(sub: Any) -> Any:
    """The FormatField under a field's name and Rebuild, or None if the field is not one."""
    while isinstance(sub, (c.Renamed, c.Rebuild)):
        sub = sub.subcon
    return sub if isinstance(sub, c.FormatField) else None


def fields(layout: Any) -> list[tuple[str, str]]:
    """(name, big-endian struct code) of each field of the layout's fixed-width prefix."""
    out: list[tuple[str, str]] = []
    for sub in layout.subcons:
        ff = _format_field(sub)
        if ff is None:
            break
        fmt = str(ff.fmtstr)
        if fmt[0] != ">":
            raise TypeError(f"{sub.name}: only big-endian fields derive to struct, not {fmt!r}")
        out.append((str(sub.name), fmt[1:]))
    return out


def offset_of(layout: Any, name: str) -> int:
    """Byte offset of a field within the layout's fixed-width prefix."""
    pos = 0
    for field, code in fields(layout):
        if field == name:
            return pos
        pos += struct.calcsize(">" + code)
    raise KeyError(f"{name} is not in the fixed prefix of the layout")


def size_of(layout: Any) -> int:
    """Size of the layout's fixed-width prefix (the whole layout when it is all fixed)."""
    return struct.calcsize(">" + "".join(code for _, code in fields(layout)))


def fixed(layout: Any, first: str | None = None, last: str | None = None) -> struct.Struct:
    """A struct.Struct for the fields first..last (inclusive) of the layout's fixed-width prefix.

    Unpack it at offset_of(layout, first) to read those fields in one call.
    """
    names = [n for n, _ in fields(layout)]
    lo = 0 if first is None else names.index(first)
    hi = len(names) - 1 if last is None else names.index(last)
    if hi < lo:
        raise ValueError(f"{last} comes before {first}")
    return struct.Struct(">" + "".join(code for _, code in fields(layout)[lo:hi + 1]))


# ---- what the hot paths use ----------------------------------------------------------------------

FRAME_SIZE = fixed(FrameHead)

REQUEST_HEADER_FIXED = fixed(RequestHeaderV1)  # api key, version, correlation id, client id length
RESPONSE_HEADER = fixed(ResponseHeaderV0)
EMPTY_TAGGED_FIELDS: bytes = TaggedFields.build([])

LOG_OVERHEAD = size_of(LogEntryHead)  # 12
MAGIC_OFFSET = offset_of(MessageV0Head, "magic")  # 16; where every format keeps its magic
# The message formats and the batch agree on where offset, size/length and magic are: that is
# what lets a reader peek at the magic before it knows which format it holds.
if (fixed(RecordBatchHeader, last="batch_length").format != fixed(LogEntryHead).format
        or offset_of(RecordBatchHeader, "magic") != MAGIC_OFFSET):  # pragma: no cover
    raise AssertionError("log entry head and record batch header disagree")

RECORD_BATCH_HEADER = fixed(RecordBatchHeader)
RECORD_BATCH_HEADER_SIZE = size_of(RecordBatchHeader)  # 61
RECORD_BATCH_CRC_FROM = offset_of(RecordBatchHeader, "attributes")  # 21
RECORD_BATCH_PRODUCER_ID = offset_of(RecordBatchHeader, "producer_id")  # 43
PRODUCER_ID = struct.Struct(">q")

# ---- producer state snapshot (`<offset>.snapshot`) -----------------------------------------------

# A partition's producer table on disk: version, then a CRC32C of everything after the CRC
# field, then an int32 entry count and the entries.
# Kafka 2.8: kafka.log.ProducerStateManager (PidSnapshotMapSchema, ProducerSnapshotEntrySchema,
# VersionOffset = 0, CrcOffset = 2, ProducerEntriesOffset = 6).
ProducerSnapshotHead = c.Struct("version" / c.Int16sb, "crc" / c.Int32ub)
ProducerSnapshotEntry = c.Struct(
    "producer_id" / c.Int64sb,
    "epoch" / c.Int16sb,
    "last_sequence" / c.Int32sb,
    "last_offset" / c.Int64sb,
    "offset_delta" / c.Int32sb,
    "timestamp" / c.Int64sb,
    "coordinator_epoch" / c.Int32sb,
    "current_txn_first_offset" / c.Int64sb,
)
ProducerSnapshot = c.Struct(*ProducerSnapshotHead.subcons,
                            "entries" / c.PrefixedArray(c.Int32sb, ProducerSnapshotEntry))

PRODUCER_SNAPSHOT_HEAD = fixed(ProducerSnapshotHead)
PRODUCER_SNAPSHOT_ENTRY = fixed(ProducerSnapshotEntry)  # 46 bytes
PRODUCER_SNAPSHOT_CRC_FROM = size_of(ProducerSnapshotHead)  # 6
