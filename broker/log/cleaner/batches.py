"""The cleaner's record rules, pure: the offset map, and what stays of each stored batch.

Kafka 2.8's Cleaner.buildOffsetMapForSegment, shouldRetainRecord and the cleaner's RecordFilter
(MemoryRecords.filterTo, buildRetainedRecordsInto) over RecordBatch v2 bytes:

- the offset map holds, for each key's hash, the offset of its latest record in the dirty range
  (`OffsetMap`, bounded: once full, mapping stops and what lies beyond `latest_offset` is kept);
- a record stays if it lies past the map's latest offset, or if it has a key, is the latest
  record of that key, and has a value or `retain_deletes` (its segment is newer than the delete
  horizon); a record without a key goes (Kafka counts it as invalid);
- a batch whose records all stay is written as it is; one that keeps some is rebuilt with the
  same base offset, last offset delta, producer id, epoch, base sequence, leader epoch, codec
  and timestamp type (records keep their offset deltas, so every offset is unchanged); one that
  keeps none goes, except the last batch of a live idempotent producer, kept as an empty header
  so the producer's last sequence and epoch survive (Kafka's BatchRetention.RETAIN_EMPTY).

Departures: the rebuilt batch keeps its first timestamp and the retained records' bytes as they
were (Kafka re-encodes them against the first retained record's timestamp; the absolute
timestamps a reader computes are the same). Control batches (none are written without
transactions) and magic 0/1 entries (older logs) are copied unchanged and left out of the map.
Keys are hashed with MD5, as Kafka's SkimpyOffsetMap does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container

from protocol.layouts import RECORD_BATCH_HEADER, RECORD_BATCH_HEADER_SIZE
from protocol.records import compression, record_batch
from protocol.records.record_batch import CODEC_MASK, CONTROL_BIT, TIMESTAMP_TYPE_BIT
from protocol.records.record_batch import varint_at as _varint

MAGIC_AT = 16
LOG_OVERHEAD = 12
_EMPTY = b""


def key_hash(key: bytes | memoryview) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key hash -> offset of the latest record with that key; at most `capacity` keys."""

    __slots__ = ("capacity", "offsets", "latest_offset")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self.offsets)

    def clear(self) -> None:
        self.offsets.clear()
        self.latest_offset = -1

    def update_latest(self, offset: int) -> None:
        if offset > self.latest_offset:
            self.latest_offset = offset


def _body(batch: bytes | memoryview, attributes: int) -> bytes:
    codec = attributes & CODEC_MASK
    raw = batch[RECORD_BATCH_HEADER_SIZE:]
    if codec != compression.NONE:
        return compression.decompress(codec, raw, None)
    return bytes(raw)


def map_batch(offset_map: OffsetMap, batch: bytes | memoryview, start_offset: int) -> bool:
    """Put the keys of one stored batch at or after `start_offset` in the map (Kafka's
    buildOffsetMapForSegment for one batch). False when the map filled up before the batch's
    end: the caller stops there and cleans only up to `offset_map.latest_offset`."""
    if batch[MAGIC_AT] != 2:
        return True
    (base, _len, _ple, _magic, _crc, attributes, last_delta, _fts, _mts, _pid, _pep, _seq,
     count) = RECORD_BATCH_HEADER.unpack_from(batch, 0)
    if not attributes & CONTROL_BIT and count > 0:
        offsets = offset_map.offsets
        capacity = offset_map.capacity
        body = _body(batch, attributes)
        p = 0
        varint = _varint
        for _ in range(count):
            b = body[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                length, p = varint(body, p)
            end = p + length
            p += 1  # attributes
            _, p = varint(body, p)  # timestamp delta
            b = body[p]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = varint(body, p)
            b = body[p]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                n, p = varint(body, p)
            offset = base + offset_delta
            if n >= 0 and offset >= start_offset:
                h = key_hash(body[p:p + n])
                if h not in offsets and len(offsets) >= capacity:
                    return False
                offsets[h] = offset
                if offset > offset_map.latest_offset:
                    offset_map.latest_offset = offset
            p = end
    last = base + last_delta
    if last >= start_offset:
        offset_map.update_latest(last)
    return True


def filter_batch(batch: bytes | memoryview, offset_map: OffsetMap, retain_deletes: bool,
                 producer_last_offsets: Container[tuple[int, int]]) -> tuple[bytes | memoryview, int, int, int] | None:
    """What stays of one stored batch: (bytes to write, records kept, max timestamp, records read),
    or None when nothing stays. The bytes are `batch` itself when every record stays.

    `producer_last_offsets` holds (producer id, last offset) of each live producer's last batch.
    """
    if batch[MAGIC_AT] != 2:
        return batch, 1, -1, 1
    (base, _len, ple, _magic, _crc, attributes, last_delta, first_ts, max_ts, pid, pepoch, base_seq,
     count) = RECORD_BATCH_HEADER.unpack_from(batch, 0)
    if attributes & CONTROL_BIT:
        return batch, 0, max_ts, 0
    last_offset = base + last_delta
    keep_empty = pid >= 0 and (pid, last_offset) in producer_last_offsets
    if count == 0:
        return (batch, 0, max_ts, 0) if keep_empty else None
    body = _body(batch, attributes)
    offsets = offset_map.offsets
    latest = offset_map.latest_offset
    log_append = attributes & TIMESTAMP_TYPE_BIT
    varint = _varint
    kept: list[bytes] = []  # runs of consecutive retained records, copied as they are
    run_start = -1
    kept_count = 0
    top_ts = -1
    p = 0
    for _ in range(count):
        rec_start = p
        b = body[p]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            length, p = varint(body, p)
        end = p + length
        p += 1  # attributes
        ts_delta, p = varint(body, p)
        b = body[p]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            offset_delta, p = varint(body, p)
        offset = base + offset_delta
        if offset > latest:
            keep = True
        else:
            b = body[p]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                klen, p = varint(body, p)
            if klen < 0:
                keep = False  # no key: Kafka's cleaner drops it
            else:
                found = offsets.get(key_hash(body[p:p + klen]), -1)
                keep = offset >= found
                if keep and not retain_deletes:
                    p += klen
                    b = body[p]
                    vlen = (b >> 1) ^ -(b & 1) if b < 0x80 else varint(body, p)[0]
                    keep = vlen >= 0
        if keep:
            kept_count += 1
            ts = first_ts + ts_delta
            if ts > top_ts:
                top_ts = ts
            if run_start < 0:
                run_start = rec_start
        elif run_start >= 0:
            kept.append(body[run_start:rec_start])
            run_start = -1
        p = end
    if kept_count == count:
        return batch, count, max_ts, count
    if kept_count == 0:
        if not keep_empty:
            return None
        # Kafka's writeEmptyHeader: no records, uncompressed, the original offsets and producer.
        empty = record_batch.batch_around(
            _EMPTY, 0, max_ts, max_ts, base, compression.NONE,
            record_batch.LOG_APPEND_TIME if log_append else record_batch.CREATE_TIME, pid, pepoch, base_seq,
            bool(attributes & record_batch.TRANSACTIONAL_BIT), False, ple, last_delta)
        return empty, 0, max_ts, count
    if run_start >= 0:
        kept.append(body[run_start:])
    new_max = max_ts if log_append else top_ts
    rebuilt = record_batch.batch_around(
        b"".join(kept), kept_count, first_ts, new_max, base, attributes & CODEC_MASK,
        record_batch.LOG_APPEND_TIME if log_append else record_batch.CREATE_TIME, pid, pepoch, base_seq,
        bool(attributes & record_batch.TRANSACTIONAL_BIT), False, ple, last_delta)
    return rebuilt, kept_count, new_max, count


def batch_size(head: bytes | memoryview, pos: int) -> int:
    """Whole size of the entry at pos (log overhead included), from its 12-byte head."""
    return LOG_OVERHEAD + int.from_bytes(head[pos + 8:pos + 12], "big", signed=True)
