"""Kafka 2.8's LogValidator for a leader append from a client, onto a log of RecordBatch v2.

`validate(data, produce_version, now_ms, config)` checks a partition's record set and returns
it as one RecordBatch v2 in a bytearray, with its base offset still 0; `Validated.assign_offsets`
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
  departure, Kafka rebuilds such batches instead) and, with CreateTime, the timestamp
  against `message.timestamp.difference.max.ms`; a batch that says LogAppendTime is
  rejected record by record, as Kafka's validateTimestamp does. Rejected records give
  INVALID_TIMESTAMP if any was a timestamp, else INVALID_RECORD, with record_errors.
- then in place, as Kafka's assignOffsetsNonCompressed / in-place compressed path do: the
  max timestamp becomes the records' largest (CreateTime) or now with the LogAppendTime
  bit (LogAppendTime), the CRC recomputed only if that changed anything.

The batch is stored as sent (compressed or not): with `compression.type` other than
`producer` Kafka would recompress; this broker keeps the producer's codec (a departure).

Magic 0/1 input (Produce v0-v2 from old clients) is validated by protocol.records.message_set
and up-converted to one RecordBatch v2 (Kafka's convertAndAssignOffsetsNonCompressed and
buildRecordsAndAssignOffsets, the log's message format being 2.x): uncompressed stays
uncompressed, a compressed wrapper is recompressed with its codec, magic-0 records get no
timestamp (-1), and no producer id.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ErrorCode
from protocol.layouts import LOG_OVERHEAD, RECORD_BATCH_HEADER, RECORD_BATCH_HEADER_SIZE
from protocol.records import compression, message_set, record_batch
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


@dataclass(slots=True)
class Validated:
    """One validated RecordBatch v2, base offset 0 until `assign_offsets`.

    producer_id / producer_epoch / base_sequence are the batch's (-1 when not idempotent);
    log_append_time is now_ms under LogAppendTime, else -1 (Produce's log_append_time_ms).
    """

    buffer: bytearray
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


def _record_errors(scan: record_batch.RecordScan) -> RecordsError:
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
             transactional_id: str | None = None) -> Validated:
    """See the module docstring; raises RecordsError with the partition's error code."""
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
    return _validate_batch(buf, produce_version, now_ms, config, transactional_id)


def _validate_batch(buf: memoryview, produce_version: int, now_ms: int, config: ValidationConfig,
                    transactional_id: str | None) -> Validated:
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
        if len(buf) - end > LOG_OVERHEAD and buf[end + MAGIC_AT] == RECORD_BATCH_MAGIC and produce_version < 3:
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
    scan = record_batch.scan_records(body, count, first_ts, lo, hi)
    if attributes & TIMESTAMP_TYPE_BIT:
        scan.errors.extend((i, ErrorCode.INVALID_TIMESTAMP, "Invalid timestamp type in message. Producer should "
                            "not set timestamp type to LogAppendTime.") for i in range(count)
                           if all(j != i for j, _, _ in scan.errors))
        scan.errors.sort()
    if scan.errors:
        raise _record_errors(scan)
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


def _up_convert(buf: memoryview, now_ms: int, config: ValidationConfig) -> Validated:
    info = message_set.validate_and_assign(buf, 0, now_ms, config.max_message_bytes)
    records = message_set.decode_records(info.buffer)
    lo, hi = _window(now_ms, config)
    errors: list[tuple[int, str]] = []
    timestamp_errors = False
    for i, r in enumerate(records):
        if lo is not None and hi is not None and r.timestamp != NO_TIMESTAMP and not lo <= r.timestamp <= hi:
            errors.append((i, f"Timestamp {r.timestamp} of message with offset {i} is out of range. The "
                              f"timestamp should be within [{lo}, {hi}]"))
            timestamp_errors = True
    if message_set.any_log_append_time(info.buffer):
        errors = [(i, "Invalid timestamp type in message. Producer should not set timestamp type to "
                      "LogAppendTime.") for i in range(len(records))]
        timestamp_errors = True
    if errors:
        raise RecordsError(ErrorCode.INVALID_TIMESTAMP if timestamp_errors else ErrorCode.INVALID_RECORD,
                           "One or more records have been rejected due to invalid timestamp", errors)
    log_append = config.timestamp_type == LOG_APPEND_TIME
    batch = record_batch.build_batch([(r.timestamp, r.key, r.value, ()) for r in records], 0, info.codec,
                                     LOG_APPEND_TIME if log_append else CREATE_TIME,
                                     now_ms if log_append else NO_TIMESTAMP)
    max_ts = now_ms if log_append else max(r.timestamp for r in records)
    return Validated(bytearray(batch), len(records), max_ts, now_ms if log_append else NO_TIMESTAMP,
                     -1, -1, -1, False, info.codec, True)
