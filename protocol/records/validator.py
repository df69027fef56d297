"""Kafka 2.8's LogValidator for a leader append from a client, onto a log of RecordBatch v2.

`validate(data, produce_version, now_ms, config)` checks a partition's record set and returns
it as one RecordBatch v2 in a bytearray, with its base offset still 0 (with `in_place`, a v2
batch kept as sent is edited where it lies when `data` is writable: the request frame's own
buffer, which the broker owns, so a megabyte batch is not copied before it is written); `Validated.assign_offsets`
then writes the leader's next offset into the batch (and `stamp_leader_epoch` the leader epoch).
The two steps are apart so that what needs the producer id, epoch, base sequence and record
count of a validated batch (the idempotent producer's state) can look at `Validated` before
anything is assigned or appended. Pure: the caller passes the clock's now_ms.

In Kafka's order (Log.analyzeAndValidateRecords, then LogValidator), for magic 2:
- Produce v3+ must hold exactly one magic-2 batch, else INVALID_RECORD
  (ProduceRequest.validateRecords); zstd needs Produce v7+, else UNSUPPORTED_COMPRESSION_TYPE.
  A second batch is INVALID_RECORD at every version ("Compressed outer record has more than
  one batch": Kafka allows only one v2 batch per partition and request).
- base offset not 0: INVALID_RECORD; a batch above `max.message.bytes` (log overhead
  included): MESSAGE_TOO_LARGE, before its CRC is computed or anything inflated; a CRC32C
  mismatch or a batch length below the header or beyond the bytes sent: CORRUPT_MESSAGE.
- validateBatch: lastOffsetDelta + 1 <= 0, a record count <= 0, or the two disagreeing:
  INVALID_RECORD; a control batch: INVALID_RECORD; a producer id with a negative base
  sequence: INVALID_RECORD. A transactional batch: this broker has no transactions, so
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the request names no transactional id (Kafka
  2.8's answer to that request) and INVALID_TXN_STATE when it does (what Kafka answers a
  transactional batch outside a transaction since KIP-890), for that partition only.
- the records, decompressed once (bounded by compression.inflated_limit of the size limit):
  their structure (INVALID_RECORD), then per record the offset delta (must be its index: a
  departure, Kafka rebuilds such batches instead), on a compacted topic the key (a record
  without one is INVALID_RECORD: Kafka 2.8's validateKey, which comes before the timestamp
  check of that record) and, with CreateTime, the timestamp
  against `message.timestamp.difference.max.ms`; a batch that says LogAppendTime is
  rejected record by record, as Kafka's validateTimestamp does. Rejected records give
  INVALID_TIMESTAMP if any was a timestamp, else INVALID_RECORD, with record_errors. This
  walk is protocol.records.record_scan's: no object per record (a large batch's fields are
  read as numpy columns), the one per-record pass Kafka makes too.
- then in place, as Kafka's assignOffsetsNonCompressed / in-place compressed path do: the
  max timestamp becomes the records' largest (CreateTime) or now with the LogAppendTime
  bit (LogAppendTime), the CRC recomputed only if that changed anything.

The batch is stored as sent when the topic's `compression.type` is `producer` (the default) or
names the batch's own codec. Otherwise, as Kafka does, its records (already inflated for
validation) are compressed with that codec, or stored uncompressed for `uncompressed`, in a
new header carrying the same producer id, epoch, sequence, timestamps and count.

Magic 0/1 input (Produce v0-v2 from old clients) is validated by protocol.records.message_set
and up-converted to one RecordBatch v2 (Kafka's convertAndAssignOffsetsNonCompressed and
buildRecordsAndAssignOffsets, the log's message format being 2.x): uncompressed stays
uncompressed, a compressed wrapper is recompressed with its codec, magic-0 records get no
timestamp (-1), and no producer id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.errors import ErrorCode
from protocol.layouts import (
    LOG_OVERHEAD,
    RECORD_BATCH_HEADER,
    RECORD_BATCH_HEADER_SIZE,
    MessageV0Head,
    MessageV1Head,
    fixed,
    size_of,
)
from protocol.records import compression, message_set, record_batch, record_scan
from protocol.records.crc import crc32
from protocol.records.errors import RecordsError
from protocol.records.record_batch import (
    CODEC_MASK,
    CONTROL_BIT,
    CREATE_TIME,
    LOG_APPEND_TIME,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
)

RECORD_BATCH_MAGIC = 2
# Kafka's default message.timestamp.difference.max.ms (Long.MaxValue): no window at all.
NO_TIMESTAMP_LIMIT = (1 << 63) - 1
MAGIC_AT = 16
ZSTD_MIN_PRODUCE_VERSION = 7


@dataclass(frozen=True, slots=True)
class ValidationConfig:
    """The topic's settings that validation applies (Kafka's LogConfig)."""

    max_message_bytes: int
    timestamp_type: int = CREATE_TIME  # message.timestamp.type
    timestamp_difference_max_ms: int = NO_TIMESTAMP_LIMIT  # message.timestamp.difference.max.ms
    compression_type: str = "producer"  # compression.type: producer, uncompressed, gzip, snappy, lz4, zstd
    compacted: bool = False  # cleanup.policy holds `compact`: every record needs a key


# compression.type values other than `producer`, as codecs (Kafka's BrokerCompressionCodec).
TARGET_CODECS = {"uncompressed": compression.NONE, "gzip": compression.GZIP, "snappy": compression.SNAPPY,
                 "lz4": compression.LZ4, "zstd": compression.ZSTD}


@dataclass(slots=True)
class Validated:
    """One validated RecordBatch v2, base offset 0 until `assign_offsets`.

    producer_id / producer_epoch / base_sequence are the batch's (-1 when not idempotent);
    log_append_time is now_ms under LogAppendTime, else -1 (Produce's log_append_time_ms).
    """

    buffer: bytearray | memoryview  # a memoryview of the caller's data when validated in place
    count: int
    max_timestamp: int
    log_append_time: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    codec: int
    converted: bool

    @property
    def last_offset_delta(self) -> int:
        return self.count - 1

    def assign_offsets(self, base_offset: int) -> tuple[int, int]:
        """Write base_offset into the batch; returns (first offset, last offset)."""
        record_batch.set_base_offset(self.buffer, base_offset)
        return base_offset, base_offset + self.count - 1

    def stamp_leader_epoch(self, epoch: int) -> None:
        record_batch.stamp_leader_epoch(self.buffer, epoch)


def _record_errors(scan: record_scan.RecordScan) -> RecordsError:
    if any(code == ErrorCode.INVALID_TIMESTAMP for _, code, _ in scan.errors):
        code, message = ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to invalid timestamp"
    else:
        code, message = ErrorCode.INVALID_RECORD, "One or more records have been rejected"
    return RecordsError(code, message, [(i, text) for i, _, text in scan.errors])


def _window(now_ms: int, config: ValidationConfig) -> tuple[int | None, int | None]:
    diff = config.timestamp_difference_max_ms
    if config.timestamp_type != CREATE_TIME or diff >= NO_TIMESTAMP_LIMIT:
        return None, None
    return now_ms - diff, now_ms + diff


def validate(data: bytes | bytearray | memoryview, produce_version: int, now_ms: int, config: ValidationConfig,
             transactional_id: str | None = None, in_place: bool = False) -> Validated:
    """See the module docstring; raises RecordsError with the partition's error code.

    With `in_place`, a writable `data` holding a v2 batch that is stored as sent is the returned
    buffer: its max timestamp (and CRC), then base offset and leader epoch, are written into it.
    Nothing is written into it unless it validates."""
    buf = memoryview(data)
    if len(buf) <= MAGIC_AT:
        if produce_version >= 3:
            raise RecordsError(ErrorCode.INVALID_RECORD,
                               f"Produce requests with version {produce_version} must have at least one record batch")
        raise RecordsError.corrupt("empty or truncated record set")
    magic = buf[MAGIC_AT]
    if magic != RECORD_BATCH_MAGIC:
        if produce_version >= 3:
            raise RecordsError(ErrorCode.INVALID_RECORD, f"Produce requests with version {produce_version} are only "
                                                         "allowed to contain record batches with magic version 2")
        return _up_convert(buf, now_ms, config)
    return _validate_batch(buf, produce_version, now_ms, config, transactional_id, in_place)


def _validate_batch(buf: memoryview, produce_version: int, now_ms: int, config: ValidationConfig,
                    transactional_id: str | None, in_place: bool = False) -> Validated:
    if len(buf) < RECORD_BATCH_HEADER_SIZE:
        raise _incomplete(produce_version)
    (base_offset, length, _epoch, _magic, crc, attributes, last_delta, first_ts, _max_ts, producer_id,
     producer_epoch, base_sequence, count) = RECORD_BATCH_HEADER.unpack_from(buf, 0)
    if length < MIN_BATCH_LENGTH:
        raise RecordsError.corrupt(f"record batch length {length} is less than the minimum {MIN_BATCH_LENGTH}")
    end = LOG_OVERHEAD + length
    if end > len(buf):
        raise _incomplete(produce_version)
    if end < len(buf):
        if len(buf) - end > MAGIC_AT and buf[end + MAGIC_AT] == RECORD_BATCH_MAGIC and produce_version < 3:
            raise RecordsError(ErrorCode.INVALID_RECORD, "Compressed outer record has more than one batch")
        if produce_version >= 3:
            raise RecordsError(ErrorCode.INVALID_RECORD, f"Produce requests with version {produce_version} are "
                                                         "only allowed to contain exactly one record batch")
        raise RecordsError.corrupt(f"{len(buf) - end} bytes after the record batch")
    codec = attributes & CODEC_MASK
    if codec == compression.ZSTD and produce_version < ZSTD_MIN_PRODUCE_VERSION:
        raise RecordsError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                           f"Produce requests with version {produce_version} cannot use zstd")
    if base_offset != 0:
        raise RecordsError(ErrorCode.INVALID_RECORD, f"the baseOffset of the record batch should be 0, "
                                                     f"but it is {base_offset}")
    if end > config.max_message_bytes:
        raise RecordsError(ErrorCode.MESSAGE_TOO_LARGE, f"the record batch size is {end} bytes, which exceeds "
                                                        f"the maximum of {config.max_message_bytes}")
    if record_batch.batch_crc(buf, 0, end) != crc:
        raise RecordsError.corrupt(f"record batch is corrupt (stored crc = {crc})")
    if last_delta + 1 <= 0:
        raise RecordsError(ErrorCode.INVALID_RECORD, f"batch has an invalid offset range: [0, {last_delta}]")
    if count <= 0:
        raise RecordsError(ErrorCode.INVALID_RECORD, f"invalid reported count for record batch: {count}")
    if last_delta + 1 != count:
        raise RecordsError(ErrorCode.INVALID_RECORD,
                           f"inconsistent batch offset range [0, {last_delta}] and count of records {count}")
    if attributes & CONTROL_BIT:
        raise RecordsError(ErrorCode.INVALID_RECORD, "clients are not allowed to write control records")
    if producer_id >= 0 and base_sequence < 0:
        raise RecordsError(ErrorCode.INVALID_RECORD, f"invalid sequence number {base_sequence} in record batch "
                                                     f"with producerId {producer_id}")
    transactional = bool(attributes & TRANSACTIONAL_BIT)
    if transactional:
        if transactional_id is None:
            raise RecordsError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                               "transactional records without a transactional id")
        raise RecordsError(ErrorCode.INVALID_TXN_STATE, "this broker does not support transactions")
    body = buf[RECORD_BATCH_HEADER_SIZE:end]
    if codec != compression.NONE:
        body = memoryview(compression.decompress(codec, body, compression.inflated_limit(config.max_message_bytes)))
    lo, hi = _window(now_ms, config)
    scan = record_scan.scan_records(body, count, first_ts, lo, hi, config.compacted)
    if attributes & TIMESTAMP_TYPE_BIT:
        listed = {j for j, _, _ in scan.errors}
        scan.errors.extend((i, ErrorCode.INVALID_TIMESTAMP, "Invalid timestamp type in message. Producer should "
                            "not set timestamp type to LogAppendTime.") for i in range(count) if i not in listed)
        scan.errors.sort()
    if scan.errors:
        raise _record_errors(scan)
    target = TARGET_CODECS.get(config.compression_type, codec)
    out: bytearray | memoryview
    if target != codec:
        out = bytearray(record_batch.batch_around(
            bytes(body), count, first_ts, NO_TIMESTAMP, 0, target, CREATE_TIME, producer_id, producer_epoch,
            base_sequence))
        codec = target
    elif in_place and not buf.readonly:
        out = buf
    else:
        out = bytearray(buf)
    if config.timestamp_type == LOG_APPEND_TIME:
        record_batch.set_max_timestamp(out, LOG_APPEND_TIME, now_ms)
        max_ts, append_time = now_ms, now_ms
    else:
        record_batch.set_max_timestamp(out, CREATE_TIME, scan.max_timestamp)
        max_ts, append_time = scan.max_timestamp, NO_TIMESTAMP
    return Validated(out, count, max_ts, append_time, producer_id, producer_epoch, base_sequence, False, codec,
                     False)


def _incomplete(produce_version: int) -> RecordsError:
    if produce_version >= 3:
        return RecordsError(ErrorCode.INVALID_RECORD,
                            f"Produce requests with version {produce_version} must have at least one record batch")
    return RecordsError.corrupt("truncated record batch")


_LEGACY_HEAD = fixed(MessageV0Head)  # offset, size, crc, magic, attributes
_LEGACY_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LEGACY_KEY_AT = {0: size_of(MessageV0Head), 1: size_of(MessageV1Head)}  # 18, 26: the key length
_LEGACY_MIN_SIZE = {m: at - LOG_OVERHEAD + 8 for m, at in _LEGACY_KEY_AT.items()}
_LEGACY_TIMESTAMP_AT = size_of(MessageV0Head)


def _plain_legacy(buf: memoryview, max_message_bytes: int) -> tuple[list[bytes], list[int], list[int]] | None:
    """Uncompressed magic 0/1 messages as encoded v2 records and their timestamps, in one pass.

    Checks what protocol.records.message_set does of a plain set (sizes, magic, CRC-32, key and
    value lengths against the message size) and what Kafka adds: one magic for the whole set
    (INVALID_RECORD), a message above max.message.bytes (MESSAGE_TOO_LARGE). The third list
    holds the indexes of messages without a key. None when an entry is a compressed wrapper:
    message_set's general path takes those.
    """
    out: list[bytes] = []
    stamps: list[int] = []
    keyless: list[int] = []
    end = len(buf)
    pos = 0
    first_magic = buf[MAGIC_AT]
    first_ts = 0
    unpack, length_of, zz, null = _LEGACY_HEAD.unpack_from, _LENGTH.unpack_from, record_batch.zigzag_varint, b"\x01"
    while pos < end:
        if pos + _LEGACY_HEAD.size > end:
            raise RecordsError.corrupt("truncated log entry header")
        _, size, crc, magic, attributes = unpack(buf, pos)
        nxt = pos + LOG_OVERHEAD + size
        if magic not in (0, 1) or size < _LEGACY_MIN_SIZE[magic] or nxt > end:
            raise RecordsError.corrupt(f"bad message (magic {magic}, size {size}) at {pos}")
        if magic != first_magic:
            raise RecordsError(ErrorCode.INVALID_RECORD, f"message magic {magic} differs from the first, {first_magic}")
        if attributes & CODEC_MASK:
            return None
        if nxt - pos > max_message_bytes:
            raise RecordsError(ErrorCode.MESSAGE_TOO_LARGE,
                               f"message of {nxt - pos} bytes exceeds the limit of {max_message_bytes}")
        if crc32(buf[pos + MAGIC_AT:nxt]) != crc:
            raise RecordsError.corrupt(f"CRC mismatch in message at {pos}")
        ts = NO_TIMESTAMP
        if magic == 1:
            (ts,) = _LEGACY_TIMESTAMP.unpack_from(buf, pos + _LEGACY_TIMESTAMP_AT)
            if attributes & TIMESTAMP_TYPE_BIT:
                raise RecordsError(ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to "
                                   "invalid timestamp", [(len(out), "Invalid timestamp type in message. Producer "
                                                                    "should not set timestamp type to LogAppendTime.")])
        p = pos + _LEGACY_KEY_AT[magic]
        (klen,) = length_of(buf, p)
        p += 4
        if klen < -1 or p + max(klen, 0) + 4 > nxt:
            raise RecordsError.corrupt("key overruns its message")
        if klen < 0:
            keyless.append(len(out))
        key = null if klen < 0 else zz(klen) + bytes(buf[p:p + klen])
        p += max(klen, 0)
        (vlen,) = length_of(buf, p)
        p += 4
        if vlen < -1 or p + max(vlen, 0) != nxt:
            raise RecordsError.corrupt("message size disagrees with its key and value")
        value = null if vlen < 0 else zz(vlen) + bytes(buf[p:nxt])
        if not out:
            first_ts = ts
        body = b"".join((b"\x00", zz(ts - first_ts), zz(len(out)), key, value, b"\x00"))
        out.append(zz(len(body)) + body)
        stamps.append(ts)
        pos = nxt
    return out, stamps, keyless


def _up_convert(buf: memoryview, now_ms: int, config: ValidationConfig) -> Validated:
    plain = _plain_legacy(buf, config.max_message_bytes)
    codec = compression.NONE
    if plain is not None:
        encoded, stamps, keyless = plain
    else:
        info = message_set.validate_and_assign(buf, 0, now_ms, config.max_message_bytes)
        if message_set.any_log_append_time(info.buffer):
            raise RecordsError(ErrorCode.INVALID_TIMESTAMP, "Producer should not set timestamp type to "
                               "LogAppendTime", [(0, "Invalid timestamp type in message")])
        records = message_set.timestamped_key_values(info.buffer)
        codec = info.codec
        stamps = [ts for ts, _, _ in records]
        keyless = [i for i, (_, k, _) in enumerate(records) if k is None]
        encoded = [record_batch.encode_record(i, ts - stamps[0], k, v) for i, (ts, k, v) in enumerate(records)]
    if config.compacted and keyless:
        # Kafka's validateKey: INVALID_RECORD, one record error per keyless message.
        raise RecordsError(ErrorCode.INVALID_RECORD, "One or more records have been rejected",
                           [(i, "Compacted topic cannot accept message without key.") for i in keyless])
    lo, hi = _window(now_ms, config)
    if lo is not None and hi is not None:
        errors = [(i, f"Timestamp {ts} of message with offset {i} is out of range. The timestamp should be "
                      f"within [{lo}, {hi}]")
                  for i, ts in enumerate(stamps) if ts != NO_TIMESTAMP and not lo <= ts <= hi]
        if errors:
            raise RecordsError(ErrorCode.INVALID_TIMESTAMP, "One or more records have been rejected due to "
                               "invalid timestamp", errors)
    codec = TARGET_CODECS.get(config.compression_type, codec)
    log_append = config.timestamp_type == LOG_APPEND_TIME
    max_ts = now_ms if log_append else max(stamps)
    batch = record_batch.batch_around(b"".join(encoded), len(encoded), stamps[0], max_ts, 0, codec,
                                      LOG_APPEND_TIME if log_append else CREATE_TIME)
    return Validated(bytearray(batch), len(encoded), max_ts, now_ms if log_append else NO_TIMESTAMP,
                     -1, -1, -1, False, codec, True)
