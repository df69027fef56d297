"""The per-record checks of a produced RecordBatch v2, without a Python object per record.

Kafka 2.8's LogValidator walks every record of a client's v2 batch, compressed or not
(DefaultRecord.readFrom, or skipKeyValueIterator in place): the record's structure (its length
against its fields, header counts and key sizes, nothing left over after `count` records), then
per record validateKey (a compacted topic needs keys) or else validateTimestamp (CreateTime
within `message.timestamp.difference.max.ms`), and the largest timestamp for the batch header.
This module does that walk; the batch-level checks (CRC-32C, counts, offsets, attributes) are
the validator's.

Two ways, one result (`scan_records` picks):
- `scan_each`, a Python loop over the records that makes only ints: cheapest for a few records
  (a latency-bound producer sends one record per batch).
- `scan_columns`, for batches of many records: one Python step per record finds where each
  record starts (the length varints are a chain: a record's start is known only from the one
  before), then every field of every record is decoded at once as numpy columns (a varint
  column takes a few array operations whatever the number of records), and the checks are
  column comparisons. Records with headers walk their headers in columns too, one header per
  round, until few are left.
A departure from Kafka, kept from before: a record's offset delta must be its index in the
batch (Kafka 2.8 rebuilds a compressed batch whose inner offsets are off, and stores an
uncompressed one as sent); such records are rejected with INVALID_RECORD.

Arithmetic is Kafka's: varints are read as 64-bit and wrap, and a timestamp is
firstTimestamp + timestampDelta in 64 bits.
"""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

from protocol.errors import ErrorCode
from protocol.records.errors import RecordsError
from protocol.records.record_batch import varint_at

NO_TIMESTAMP = -1
# Below this many records the loop is cheaper than the columns' fixed cost (some 40 array
# operations, ~60-120 us here, whatever the count; the loop costs ~1 us a record).
COLUMNS_FROM = 128
# A record is at least 7 bytes: its length, attributes, timestamp delta, offset delta, key
# length, value length and header count, one byte each.
MIN_RECORD_SIZE = 7
# Record header rounds run as columns while at least this many records still have headers left;
# the rest walk theirs one by one (a round costs some 15 array operations, which a few records
# with very many headers would pay once per header).
HEADER_COLUMNS_FROM = 256
MIN_HEADER_SIZE = 2  # a key length and a value length, one byte each
# The walk guesses once this many records in a row had one size (more after a guess that fell
# short); its first guess covers STRIDE_FIRST records, each confirmed one four times more.
RUN_BEFORE_GUESS, RUN_MAX = 2, 1024
STRIDE_FIRST, STRIDE_MAX = 64, 1 << 16
_MAX_VARINT_BYTES = 10  # a varlong's most
_COMPACTED_NO_KEY = "Compacted topic cannot accept message without key."

I64 = npt.NDArray[np.int64]
# A column of varint values: int32 when every varint of it has at most three bytes (what
# records nearly always hold), int64 otherwise; numpy widens where it meets int64 columns.
Values = npt.NDArray[np.int32] | npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Bools = npt.NDArray[np.bool_]


class RecordScan:
    """What a scan found: the records' max timestamp and the rejected records.

    errors holds (record index in the batch, Kafka's error code, message), as Kafka's
    RecordError (batch_index, message) in Produce v8's record_errors.
    """

    __slots__ = ("max_timestamp", "errors")

    def __init__(self) -> None:
        self.max_timestamp = NO_TIMESTAMP
        self.errors: list[tuple[int, int, str]] = []


def scan_records(body: bytes | memoryview, count: int, first_timestamp: int, min_timestamp: int | None,
                 max_timestamp: int | None, require_keys: bool = False) -> RecordScan:
    """Check the structure of a batch's `count` records (uncompressed body) in one pass.

    Structure (a record's length disagreeing with its fields, a negative header count or header
    key length, bytes left after the last record, too few bytes) raises INVALID_RECORD, as
    Kafka's DefaultRecord.readFrom does. A record whose offset delta is not its index, or whose
    timestamp is outside [min_timestamp, max_timestamp] (when given: CreateTime with
    `message.timestamp.difference.max.ms`; NO_TIMESTAMP is never out of range), is listed in
    the result's errors. With `require_keys` (a compacted topic), a record without a key is
    listed instead of its timestamp check (Kafka's validateKey, then validateTimestamp).
    """
    if count < COLUMNS_FROM:
        # Indexing bytes is markedly faster than indexing a memoryview, and the copy is small.
        return scan_each(bytes(body), count, first_timestamp, min_timestamp, max_timestamp, require_keys)
    return scan_columns(body, count, first_timestamp, min_timestamp, max_timestamp, require_keys)


def _structure(i: int, why: str) -> RecordsError:
    return RecordsError(ErrorCode.INVALID_RECORD, f"found invalid record structure at record {i}: {why}")


def _out_of_range(i: int, ts: int, lo: int, hi: int) -> str:
    return (f"Timestamp {ts} of message with offset {i} is out of range. The timestamp should be within "
            f"[{lo}, {hi}]")


def _offset_delta(i: int, delta: int) -> str:
    return f"record {i} has offset delta {delta}, expected {i}"


def _wrap64(n: int) -> int:
    return ((n + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


# ---- one record at a time ------------------------------------------------------------------------

def scan_each(body: bytes, count: int, first_timestamp: int, min_timestamp: int | None,
              max_timestamp: int | None, require_keys: bool = False) -> RecordScan:
    """`scan_records` as a loop over the records; only ints are made per record."""
    scan = RecordScan()
    errors = scan.errors
    check_window = min_timestamp is not None and max_timestamp is not None
    lo = min_timestamp if min_timestamp is not None else 0
    hi = max_timestamp if max_timestamp is not None else 0
    top = NO_TIMESTAMP
    varint = varint_at
    # A one-byte delta takes the sum out of 64 bits only from a first timestamp this close to a
    # limit (a longer delta is wrapped where it is read).
    near_limit = not -(1 << 62) <= first_timestamp <= 1 << 62
    end = len(body)
    p = 0
    i = 0
    # Every varint is read inline when it is one byte (small lengths, deltas and counts),
    # falling back to varint_at otherwise.
    try:
        for i in range(count):
            b = body[p]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                length, p = varint(body, p)
            start = p
            if length < 0 or start + length > end:
                raise _structure(i, f"invalid record size {length}")
            b = body[p + 1]  # after the attributes byte, unused in v2
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 2
            else:
                ts_delta, p = varint(body, p + 1)
                # Only a long delta can take the sum out of 64 bits: the delta that gives the
                # wrapped sum, as Kafka's long addition does.
                ts_delta = _wrap64(first_timestamp + ts_delta) - first_timestamp
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
            keyless = n < 0
            if n > 0:
                p += n
            b = body[p]
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                n, p = varint(body, p)
            if n > 0:
                p += n
            if body[p] == 0:
                p += 1
            else:
                headers, p = varint(body, p)
                if headers < 0:
                    raise _structure(i, f"invalid number of record headers {headers}")
                for _ in range(headers):
                    n, p = varint(body, p)
                    if n < 0:
                        raise _structure(i, "invalid negative header key size")
                    p += n
                    n, p = varint(body, p)
                    if n > 0:
                        p += n
                    if p > start + length:
                        break  # more headers than the record has room for
            if p - start != length:
                raise _structure(i, f"record size {length} disagrees with its fields ({p - start} bytes)")
            if offset_delta != i:
                errors.append((i, ErrorCode.INVALID_RECORD, _offset_delta(i, offset_delta)))
            ts = first_timestamp + ts_delta
            if near_limit:
                ts = _wrap64(ts)
            if ts > top:
                top = ts
            if keyless and require_keys:
                errors.append((i, ErrorCode.INVALID_RECORD, _COMPACTED_NO_KEY))
            elif check_window and ts != NO_TIMESTAMP and not lo <= ts <= hi:
                errors.append((i, ErrorCode.INVALID_TIMESTAMP, _out_of_range(i, ts, lo, hi)))
    except (IndexError, ValueError) as e:
        raise _structure(i, str(e)) from e
    if p != end:
        raise RecordsError(ErrorCode.INVALID_RECORD, "incorrect declared batch size, records still remaining")
    scan.max_timestamp = top
    return scan


# ---- columns -------------------------------------------------------------------------------------

def _varints(buf: U8, pos: I64, bad: Bools) -> tuple[Values, I64]:
    """The zigzag varints starting at every position of pos: (values, positions after them);
    bad marks those longer than 10 bytes.

    Reads past the end of buf read its last byte instead (ndarray.take with "clip"): the varint of a
    record that runs past the batch gets a wrong value, but its position still moves on, so the
    record fails the check of its end.

    When every varint of the column is one byte (most fields of most records), a handful of
    array operations give the values whatever the count. Columns of up to three bytes
    (record lengths, value sizes, offset and timestamp deltas below 2**20) are read as byte
    columns with small-integer arithmetic and no loop, as int32; longer ones take `_long_varints`.
    """
    b = buf.take(pos, mode="clip")
    if int(np.maximum.reduce(b)) < 0x80:
        one = b.astype(np.int32)
        return (one >> 1) ^ -(one & 1), pos + 1
    b1 = buf.take(pos + 1, mode="clip")
    more = b >> 7  # 1 where a second byte follows
    more1 = more & (b1 >> 7)  # 1 where a third byte follows
    raw = (b & 0x7F).astype(np.int32)
    raw |= ((b1 & 0x7F) * more).astype(np.int32) << 7
    width = more + 1
    if more1.any():
        b2 = buf.take(pos + 2, mode="clip")
        if (more1 & (b2 >> 7)).any():
            return _long_varints(buf, pos, bad)
        raw |= ((b2 & 0x7F) * more1).astype(np.int32) << 14
        width += more1
    return (raw >> 1) ^ -(raw & 1), pos + width


def _long_varints(buf: U8, pos: I64, bad: Bools) -> tuple[Values, I64]:
    """`_varints` for a column with a varint of four bytes or more: byte by byte, in 64 bits."""
    last = buf.size - 1
    b = buf.take(pos, mode="clip")
    more = b >= 0x80
    raw = (b & 0x7F).astype(np.uint64)
    after = pos + 1
    for k in range(1, _MAX_VARINT_BYTES):
        at = pos + k
        nxt = buf[np.minimum(at, last, out=at)]
        raw |= ((nxt & 0x7F).astype(np.uint64) << np.uint64(7 * k)) * more
        after += more
        more &= nxt >= 0x80
        if not more.any():
            break
    else:
        bad |= more
    values: I64 = (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64)
    return values, after


def _record_heads(body: bytes | memoryview, buf: U8, count: int) -> tuple[I64, I64, int]:
    """Where each record's length varint starts, where its body starts (after that varint),
    and where the walk ended.

    The lengths are a chain: a record's place follows from the length of the one before. The
    walk steps one record at a time in Python, but once a few records in a row have had the
    same size, it guesses that the next ones have it too and checks the guess for a whole
    stride at once (the bytes of the length varint at those places against the last record's,
    as one column per byte): records of a batch are often all of one size (a size changes only
    where an offset or timestamp delta needs one more varint byte). A guess is kept up to its
    first record of another size, so every kept place is one the step-by-step walk would have
    found. Where sizes repeat only by chance, guesses fall short and the walk waits for ever
    longer runs before guessing again.
    """
    heads = array("q", bytes(8 * count))
    starts = array("q", bytes(8 * count))
    # The same memory as numpy arrays, written a stride at a time.
    head_column: I64 = np.frombuffer(heads, dtype=np.int64)
    start_column: I64 = np.frombuffer(starts, dtype=np.int64)
    end = len(body)
    p = 0
    i = 0
    last = run = 0
    stride, need = STRIDE_FIRST, RUN_BEFORE_GUESS
    try:
        while i < count:
            heads[i] = p
            b = body[p]
            if b < 0x80:  # one byte: lengths up to 63
                if b & 1:
                    raise _structure(i, "negative record size")
                width = 1
                size = 1 + (b >> 1)
            else:
                c = body[p + 1]
                if c < 0x80:  # two bytes: up to 8191
                    v = (b & 0x7F) | (c << 7)
                    if v & 1:
                        raise _structure(i, "negative record size")
                    width = 2
                    size = 2 + (v >> 1)
                else:
                    length, q = varint_at(body, p)
                    if length < 0:
                        raise _structure(i, "negative record size")
                    width = q - p
                    size = width + length
            starts[i] = p + width
            p += size
            i += 1
            if size != last:
                last, run = size, 0
                continue
            run += 1
            if run < need:
                continue
            k = min(count - i, (end - p) // size, stride)
            if k <= 0:
                continue
            stop = p + size * k  # <= end: every guessed record's length varint is in the batch
            varint = bytes(body[p - size:p - size + width])  # the last record's length, as sent
            # The guessed places are a strided view of the batch: no index column, no gather.
            fits = buf[p:stop:size] == varint[0]
            for j in range(1, width):
                fits &= buf[p + j:stop + j:size] == varint[j]
            kept = k if fits.all() else int(np.argmin(fits))
            guess = np.arange(p, p + size * kept, size, dtype=np.int64)
            head_column[i:i + kept] = guess
            start_column[i:i + kept] = guess + width
            i += kept
            p += size * kept
            if kept == k:
                stride, need = min(stride * 4, STRIDE_MAX), RUN_BEFORE_GUESS
            else:
                # A guess cut short: sizes repeat only briefly here, so wait for longer runs
                # before the next guess (its cost is the same for one record kept or many).
                stride, run, need = STRIDE_FIRST, 0, min(need * 2, RUN_MAX)
    except (IndexError, ValueError) as e:
        raise _structure(i, str(e)) from e
    return head_column, start_column, p


def _skip(pos: I64, n: Values, limit: I64) -> I64:
    """pos moved past n bytes (none when n is negative: a null), held at limit at most."""
    room: I64 = limit - pos
    np.minimum(np.maximum(n, 0), room, out=room)  # not np.clip: its Python wrapper costs more here
    return pos + room


def _walk_headers(buf: U8, data: bytes | memoryview, pos: I64, headers: Values, ends: I64, bad: Bools) -> None:
    """Move pos past the headers of the records that have some; bad marks a negative header key
    size or an overlong varint (a record overrunning its end is found by the caller)."""
    idx = np.flatnonzero((headers > 0) & ~bad)
    hpos, left, limit = pos[idx], headers[idx], ends[idx] + 1
    while idx.size >= HEADER_COLUMNS_FROM:
        long = np.zeros(idx.size, dtype=np.bool_)
        key_len, hpos = _varints(buf, hpos, long)
        hpos = _skip(hpos, key_len, limit)
        value_len, hpos = _varints(buf, hpos, long)
        hpos = _skip(hpos, value_len, limit)
        bad[idx[(key_len < 0) | long]] = True
        left -= 1
        done = (left == 0) | (hpos >= limit)
        pos[idx[done]] = hpos[done]
        keep = ~done
        idx, hpos, left, limit = idx[keep], hpos[keep], left[keep], limit[keep]
    for j, p, n, lim in zip(idx.tolist(), hpos.tolist(), left.tolist(), limit.tolist(), strict=True):
        try:
            for _ in range(n):
                k, p = varint_at(data, p)
                if k < 0:
                    bad[j] = True
                    break
                p += k
                v, p = varint_at(data, p)
                if v > 0:
                    p += v
                if p >= lim:
                    break
        except (IndexError, ValueError):
            bad[j] = True
        pos[j] = min(p, lim)


def scan_columns(body: bytes | memoryview, count: int, first_timestamp: int, min_timestamp: int | None,
                 max_timestamp: int | None, require_keys: bool = False) -> RecordScan:
    """`scan_records` over numpy columns, one per field (module docstring)."""
    end = len(body)
    if count <= 0 or end == 0:
        return scan_each(bytes(body), count, first_timestamp, min_timestamp, max_timestamp, require_keys)
    if count * MIN_RECORD_SIZE > end:
        raise _structure(end // MIN_RECORD_SIZE, f"{count} records cannot fit in {end} bytes")
    buf: U8 = np.frombuffer(body, dtype=np.uint8)  # the batch's own bytes, not a copy
    heads, starts, walked = _record_heads(body, buf, count)
    if walked != end:
        if walked < end:
            raise RecordsError(ErrorCode.INVALID_RECORD, "incorrect declared batch size, records still remaining")
        raise _structure(count - 1, "the last record runs past the batch")
    ends = np.empty(count, dtype=np.int64)
    ends[:-1] = heads[1:]
    ends[-1] = end
    limit = ends + 1  # a position past a record's end stays here: the record is malformed
    bad = np.zeros(count, dtype=np.bool_)
    ts_delta, pos = _varints(buf, starts + 1, bad)  # after the attributes byte, unused in v2
    offset_delta, pos = _varints(buf, np.minimum(pos, limit), bad)
    key_len, pos = _varints(buf, np.minimum(pos, limit), bad)
    pos = _skip(pos, key_len, limit)
    value_len, pos = _varints(buf, pos, bad)
    pos = _skip(pos, value_len, limit)
    headers, pos = _varints(buf, pos, bad)
    pos = np.minimum(pos, limit)
    # More headers than the rest of the record can hold: malformed without walking them.
    bad |= (headers < 0) | (headers > (ends - pos) // MIN_HEADER_SIZE)
    if (headers > 0).any():
        _walk_headers(buf, body, pos, headers, ends, bad)
    bad |= pos != ends
    if bad.any():
        i = int(np.argmax(bad))
        raise _structure(i, "record size disagrees with its fields")
    timestamps = ts_delta + np.int64(_wrap64(first_timestamp))  # int64: wraps as Kafka's longs do
    scan = RecordScan()
    scan.max_timestamp = max(NO_TIMESTAMP, int(timestamps.max()))
    index = np.arange(count, dtype=np.int64)
    wrong_offset = offset_delta != index
    keyless = (key_len < 0) if require_keys else np.zeros(count, dtype=np.bool_)
    out_of_range = np.zeros(count, dtype=np.bool_)
    lo = hi = 0
    if min_timestamp is not None and max_timestamp is not None:
        lo, hi = min_timestamp, max_timestamp
        out_of_range = ~keyless & (timestamps != NO_TIMESTAMP) & ((timestamps < lo) | (timestamps > hi))
    rejected = wrong_offset | keyless | out_of_range
    if rejected.any():  # rare: a message per rejected record, as Kafka's record_errors carry
        for i in np.flatnonzero(rejected).tolist():
            if wrong_offset[i]:
                scan.errors.append((i, ErrorCode.INVALID_RECORD, _offset_delta(i, int(offset_delta[i]))))
            if keyless[i]:
                scan.errors.append((i, ErrorCode.INVALID_RECORD, _COMPACTED_NO_KEY))
            elif out_of_range[i]:
                scan.errors.append((i, ErrorCode.INVALID_TIMESTAMP, _out_of_range(i, int(timestamps[i]), lo, hi)))
    return scan
