"""RecordBatch v2 (magic 2) decoding, and its conversion to magic-1 messages for the log.

The served table is Kafka 0.10.1's, whose log format is magic 1, but aiokafka's producer sends
magic-2 batches even inside Produce v2. They are checked (CRC32C over attributes..end),
decompressed, and rewritten as uncompressed magic-1 messages with CreateTime timestamps;
record headers, which magic 1 cannot carry, are dropped. Transactional and control batches
need a newer message format and are refused.

Batch header: baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8,
crc uint32, attributes int16, lastOffsetDelta int32, firstTimestamp int64, maxTimestamp int64,
producerId int64, producerEpoch int16, baseSequence int32, recordCount int32 (61 bytes).
"""

from __future__ import annotations

import struct

import crc32c

from protocol.errors import ErrorCode
from protocol.primitives import Reader
from protocol.records import compression
from protocol.records.errors import RecordsError
from protocol.records.message_set import Record, encode_entry

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_TRANSACTIONAL, _CONTROL = 0x10, 0x20


def _records(batch: memoryview, attributes: int, count: int, base_offset: int, first_ts: int
             ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    body = batch[HEADER_SIZE:]
    codec = attributes & 0x07
    if codec != compression.NONE:
        body = memoryview(compression.decompress(codec, body))
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


def _parse(buf: memoryview, pos: int, strict: bool) -> tuple[list[tuple[int, int, bytes | None, bytes | None]],
                                                            int] | None:
    if pos + HEADER_SIZE > len(buf):
        if strict:
            raise RecordsError.corrupt("truncated record batch header")
        return None
    (base_offset, length, _epoch, magic, crc, attributes, _last_delta, first_ts, _max_ts, _pid, _pepoch, _seq,
     count) = _HEADER.unpack_from(buf, pos)
    end = pos + 12 + length
    if magic != 2 or length < HEADER_SIZE - 12 or count < 0:
        raise RecordsError.corrupt("bad record batch header")
    if end > len(buf):
        if strict:
            raise RecordsError.corrupt("truncated record batch")
        return None
    batch = buf[pos:end]
    if crc32c.crc32c(batch[21:]) != crc:
        raise RecordsError.corrupt("record batch CRC32C mismatch")
    if attributes & (_TRANSACTIONAL | _CONTROL):
        raise RecordsError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                           "transactional and control batches need message format v2")
    return _records(batch, attributes, count, base_offset, first_ts), end


def decode_batch(buf: memoryview, pos: int) -> tuple[list[Record], int] | None:
    """Records of the batch at pos and the position after it; None when the batch is cut off."""
    parsed = _parse(buf, pos, strict=False)
    if parsed is None:
        return None
    records, end = parsed
    return [Record(o, t, k, v) for o, t, k, v in records], end


def batches_to_message_set(data: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """Every batch in data as uncompressed magic-1 entries numbered from base_offset."""
    buf = memoryview(data)
    pos = 0
    out = []
    n = 0
    while pos < len(buf):
        parsed = _parse(buf, pos, strict=True)
        assert parsed is not None
        records, pos = parsed
        for _, ts, key, value in records:
            out.append(encode_entry(base_offset + n, 1, 0, ts, key, value))
            n += 1
    if not out:
        raise RecordsError.corrupt("record batches without records")
    return b"".join(out)
