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
- `scan_columns`, for batches of many records: a walk finds where each record starts (the
  length varints are a chain: a record's start is known only from the one before), in Python
  one record at a time except where records repeat one size, which it confirms a strided
  column at a time. Such a run of records of one size (a producer's equal-size values: a size
  changes only where an offset or timestamp delta needs another varint byte, so such a batch
  is two to four runs) is checked whole against its first record's layout, a few 8-byte
  strided columns compared under a mask (`_uniform_run`); when every field of its records lies
  in their first 15 bytes (keyless or short-keyed records), one 16-byte window per record
  gathered once into a contiguous array, the same masks applied there (`_uniform_wide`: one
  strided pass over the batch instead of two). The other records have every field
  decoded at once as numpy columns (a varint column takes a few array operations whatever the
  number of records), the checks being column comparisons; records with headers walk their
  headers in columns too, one header per round, until few are left. When fewer than
  COLUMNS_FROM records are left outside runs, the loop takes them.
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
# A run of records of one size this long is checked whole by `_uniform_run` (some 20 array
# operations on a few strided columns, whatever its length: the loop's cost of ~20 records).
UNIFORM_FROM = 16
STRIDE_FIRST, STRIDE_MAX = 64, 1 << 16
# `_uniform_wide`'s window: the byte before a record and its first 15.
_WIDE = 16
_U64_MAX = (1 << 64) - 1
_ZERO = (0,)
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
              max_timestamp: int | None, require_keys: bool = False, first_index: int = 0) -> RecordScan:
    """`scan_records` as a loop over the records; only ints are made per record.

    With `first_index`, body holds the batch's records from that index on (`scan_columns`
    hands it the records that its equal-size runs left): offset deltas and errors count from it."""
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
    # Every varint is read inline when it is one byte (small lengths, deltas and counts),
    # falling back to varint_at otherwise.
    i = first_index
    try:
        for i in range(first_index, first_index + count):
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


class _Run:
    """Records i .. i + n - 1 of the batch, all `size` bytes from position p on, found by the
    walk; `guessed` lists the (index, position, count, length varint width) of its records that
    were placed by a guess rather than stepped on (their places are written only if the run
    goes back to the general path)."""

    __slots__ = ("i", "p", "size", "n", "guessed")

    def __init__(self, i: int, p: int, size: int) -> None:
        self.i, self.p, self.size, self.n = i, p, size, 0
        self.guessed: list[tuple[int, int, int, int]] = []


def _record_heads(body: bytes | memoryview, buf: U8, count: int) -> tuple[I64, I64, int, list[_Run]]:
    """Where each record's length varint starts (count + 1 places, the last one where the walk
    ended), where its body starts (after that varint), where the walk ended, and the runs of
    records of one size that it found.

    The lengths are a chain: a record's place follows from the length of the one before. The
    walk steps one record at a time in Python, but once a few records in a row have had the
    same size, it guesses that the next ones have it too and checks the guess for a whole
    stride at once (the bytes of the length varint at those places against the last record's,
    as one strided column): records of a batch are often all of one size (a size changes only
    where an offset or timestamp delta needs one more varint byte). A guess is kept up to its
    first record of another size, so every kept place is one the step-by-step walk would have
    found. Where sizes repeat only by chance, guesses fall short and the walk waits for ever
    longer runs before guessing again.

    Places are written for the records stepped on only: a run's guessed records get theirs from
    `_place` if the run is not taken whole by `_uniform_run`.
    """
    # Zeros by repetition: no zeroed bytes object made and copied first (2% of a loaded event
    # loop's samples for a 10,000-record batch).
    heads = array("q", _ZERO) * (count + 1)
    starts = array("q", _ZERO) * count
    head_column: I64 = np.frombuffer(heads, dtype=np.int64)
    start_column: I64 = np.frombuffer(starts, dtype=np.int64)
    runs: list[_Run] = []
    end = len(body)
    p = 0
    i = 0
    last = run = 0
    streak: _Run | None = None  # the current streak of one size, once a guess has kept some of it
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
                last, run, streak = size, 0, None
                continue
            run += 1
            if run < need:
                continue
            k = min(count - i, (end - p) // size, stride)
            if k <= 0:
                continue
            # The guessed places are a strided view of the batch: no index column, no gather.
            if width == 1:
                fits = buf[p:p + size * k:size] == b
            elif width == 2:
                fits = np.ndarray((k,), "<u2", buf, p, (size,)) == b | (c << 8)
            else:
                fits = buf[p:p + size * k:size] == body[p - size]
                for j in range(1, width):
                    fits &= buf[p + j:p + j + size * k:size] == body[p - size + j]
            kept = int(fits.argmin())  # the first record of another size, or 0 when all fit
            if fits[kept]:
                kept = k
            if kept:
                if streak is None:  # its records so far were all stepped on: run + 1 of them
                    streak = _Run(i - run - 1, p - (run + 1) * size, size)
                    runs.append(streak)
                streak.guessed.append((i, p, kept, width))
                streak.n = i + kept - streak.i
                i += kept
                p += size * kept
            if kept == k:
                stride, need = min(stride * 4, STRIDE_MAX), RUN_BEFORE_GUESS
            else:
                # A guess cut short: sizes repeat only briefly here, so wait for longer runs
                # before the next guess (its cost is the same for one record kept or many).
                # The next record starts a new streak even if its size is the same (another
                # encoding of its length): a run's records have one length varint.
                stride, run, need, last = STRIDE_FIRST, 0, min(need * 2, RUN_MAX), -1
    except (IndexError, ValueError) as e:
        raise _structure(i, str(e)) from e
    heads[count] = p
    return head_column, start_column, p, runs


def _place(run: _Run, heads: I64, starts: I64) -> None:
    """Write the places of a run's guessed records (`_record_heads`)."""
    for i, p, k, width in run.guessed:
        heads[i:i + k] = np.arange(p, p + run.size * k, run.size, dtype=np.int64)
        starts[i:i + k] = heads[i:i + k] + width


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


# ---- runs of records of one size -------------------------------------------------------------------

def _od_bytes(width: int, below: int) -> npt.NDArray[np.unsignedinteger]:
    """The offset deltas 0 .. below - 1 as the little-endian integer of their `width`-byte
    zigzag varints, in the dtype that `_field` reads such a varint as (only those of that width
    are right: the caller asks for its range)."""
    x = np.arange(below, dtype=np.uint32) << np.uint32(1)
    out = x & np.uint32(0x7F)
    for k in range(1, width):
        out |= np.uint32(0x80) << np.uint32(8 * (k - 1))  # continuation bits
        out |= ((x >> np.uint32(7 * k)) & np.uint32(0x7F)) << np.uint32(8 * k)
    return out.astype(_FIELD_DTYPES[width])


_FIELD_DTYPES = {1: np.uint8, 2: np.uint16, 3: np.uint32}
# Offset deltas as varint bytes, by width: what a run's offset deltas are compared with.
_OD_FROM = {1: 0, 2: 64, 3: 8192}  # the first index whose offset delta takes that many bytes
_OD_BELOW = {1: 64, 2: 8192, 3: 1 << 20}
_OD_TABLES: dict[int, npt.NDArray[np.unsignedinteger]] = {1: _od_bytes(1, 64), 2: _od_bytes(2, 8192)}
U64 = npt.NDArray[np.uint64]


def _od_table(width: int, below: int) -> npt.NDArray[np.unsignedinteger]:
    table = _OD_TABLES.get(width)
    if table is None or table.size < below:
        table = _OD_TABLES[width] = _od_bytes(width, min(1 << max(below - 1, 1).bit_length(), _OD_BELOW[width]))
    return table


def _field(window: U64, at: int, width: int) -> npt.NDArray[np.unsignedinteger]:
    """The `width` bytes at byte `at` of every window, as a little-endian unsigned column."""
    if width == 1:
        return window.view(np.uint8)[at::8]
    if width == 2 and at <= 6:
        return np.ndarray(window.shape, "<u2", window, at, (8,))
    if at <= 4:
        return np.ndarray(window.shape, "<u4", window, at, (8,)) & np.uint32(0xFFFFFF)
    return (window >> np.uint64(8 * at)) & np.uint64((1 << 8 * width) - 1)


def _zigzag_range(raw: npt.NDArray[np.unsignedinteger], width: int) -> tuple[int, int]:
    """The least and largest of a column of `width`-byte zigzag varints given as the
    little-endian integers of their bytes (their continuation bits are the caller's to check)."""
    v = raw.astype(np.int32)
    if width >= 2:
        v = (v & 0x7F) | ((v >> 1) & 0x3F80) | ((v >> 2) & 0x1FC000)
    values = v >> 1
    v &= 1
    np.negative(v, out=v)
    values ^= v
    return int(np.minimum.reduce(values)), int(np.maximum.reduce(values))


def _even_zigzag(le: int, width: int) -> int:
    """The value of a `width`-byte zigzag varint of an even (non-negative) value, given as the
    little-endian integer of its bytes."""
    raw = 0
    for k in range(width):
        raw |= ((le >> 8 * k) & 0x7F) << 7 * k
    return raw >> 1


def _uniform_run(body: bytes | memoryview, buf: U8, run: _Run, first_timestamp: int, min_timestamp: int | None,
                 max_timestamp: int | None, require_keys: bool) -> int | None:
    """The largest timestamp of a run of records of one size when every record of it is laid
    out as its first one and passes every check; None when any might not (the run then takes
    the general path, which finds what is wrong).

    The first record is read in Python. It gives the run's layout: where each varint starts
    and how many bytes it has. Every record of the run must then have the same bytes for its
    length, key size, value size and header count (none), the same widths for its timestamp
    and offset deltas, and the offset delta that is its index; those bytes sit at fixed places
    from each record's start, so they are read as a few strided 8-byte columns of the batch
    (a record's header count is read with the next record's first bytes, its last byte being
    just before them), compared with the first record's under a mask (the offset deltas with a
    table of their expected bytes), and the least and largest timestamp deltas taken from their
    bytes (which order as their values when none is below 0; decoded otherwise). Every record
    is then as well-formed as the first, has the right offset delta, and has a key if the first
    has one; the timestamps, first_timestamp within 2**62 and deltas below 2**20, cannot wrap,
    so the least and largest settle the window. What the loop would reject never passes here.
    """
    i0, p0, size, n = run.i, run.p, run.size, run.n
    if not -(1 << 62) <= first_timestamp <= 1 << 62:
        return None  # a timestamp sum could wrap: the general path's 64-bit arithmetic
    try:
        _, q = varint_at(body, p0)
        length_width = q - p0
        ts_at = q + 1 - p0  # after the attributes byte, unused in v2
        ts0, q = varint_at(body, q + 1)
        od_at = q - p0
        od0, q = varint_at(body, q)
        key_at = q - p0
        key, q = varint_at(body, q)
        key_width = q - p0 - key_at
        q += max(key, 0)
        value_at = q - p0
        value, q = varint_at(body, q)
        value_width = q - p0 - value_at
        q += max(value, 0)
    except (IndexError, ValueError):
        return None
    ts_width, od_width = od_at - ts_at, key_at - od_at
    end = p0 + size * n
    # One header count, 0, in the first record and the last (the others are read with the next
    # record's first bytes), and nothing after it.
    if q + 1 != p0 + size or body[q] != 0 or body[end - 1] != 0 or od0 != i0 or (require_keys and key < 0) \
            or ts_width > 3 or od_width > 3 or length_width > 4 or key_width > 4 or value_width > 4 \
            or not _OD_FROM[od_width] <= i0 < i0 + n <= _OD_BELOW[od_width]:
        return None
    first = memoryview(body)[p0:p0 + size]
    rows = n - 1  # the records after the first, each read from the byte before it
    if size >= _WIDE - 1 and value_at + value_width <= _WIDE - 1:
        return _uniform_wide(buf, run, first, length_width, ts_at, ts_width, od_width, key_at, key_width, value_at,
                             value_width, ts0, first_timestamp, min_timestamp, max_timestamp)
    # (place from the record's start, width): the header count of the record before it, its
    # length, timestamp delta, offset delta, key size and value size, in the record's order.
    fields = [(-1, 1), (0, length_width), (ts_at, ts_width), (od_at, od_width), (key_at, key_width),
              (value_at, value_width)]
    low = high = ts0
    k = 0
    while k < len(fields):
        # A window at the field, or ending with the record when it is nearer its end: 8 bytes
        # always fit (a record has at least 7, and the window may start at the byte before it).
        start = min(fields[k][0], size - 8)
        mask = expect = sign = 0
        window: U64 = np.ndarray((rows,), "<u8", buf, p0 + size + start, (size,))  # strided
        ts: npt.NDArray[np.unsignedinteger] | None = None
        if fields[k][0] <= od_at <= start + 8 - od_width or fields[k][0] <= ts_at <= start + 8 - ts_width:
            window = window.copy()  # read more than once: contiguous
        while k < len(fields) and fields[k][0] + fields[k][1] <= start + 8:
            place, width = fields[k]
            shift = 8 * (place - start)
            if place == od_at:  # compared whole, continuation bits included
                if np.count_nonzero(_field(window, place - start, width) != _od_table(width, i0 + n)[i0 + 1:i0 + n]):
                    return None
            elif place == ts_at:
                ts = _field(window, place - start, width)
                # Continuation bits, and the zigzag sign bit: with every delta at least 0 (as
                # a producer's usually are), the varints' bytes order as their values do.
                mask |= int.from_bytes(b"\x80" * width, "little") << shift
                expect |= int.from_bytes(b"\x80" * (width - 1), "little") << shift
                sign = 1 << shift
            else:
                mask |= ((1 << 8 * width) - 1) << shift
                expect |= (0 if place < 0 else int.from_bytes(first[place:place + width], "little")) << shift
            k += 1
        if ts is None:
            if np.count_nonzero(np.bitwise_and(window, np.uint64(mask)) != np.uint64(expect)):
                return None
        elif not np.count_nonzero(np.bitwise_and(window, np.uint64(mask | sign)) != np.uint64(expect)):
            low = min(low, _even_zigzag(int(np.minimum.reduce(ts)), ts_width))
            high = max(high, _even_zigzag(int(np.maximum.reduce(ts)), ts_width))
        elif not np.count_nonzero(np.bitwise_and(window, np.uint64(mask)) != np.uint64(expect)):
            lo, hi = _zigzag_range(ts, ts_width)  # some timestamp delta below 0: decoded
            low, high = min(low, lo), max(high, hi)
        else:
            return None
    low, high = first_timestamp + low, first_timestamp + high
    if min_timestamp is not None and max_timestamp is not None and not min_timestamp <= low <= high <= max_timestamp:
        return None  # some record out of the window, or NO_TIMESTAMP: the general path lists them
    return high


def _wide_column(windows: U8, at: int, width: int) -> npt.NDArray[np.unsignedinteger]:
    """The `width` bytes at byte `at` of every 16-byte window (`_uniform_wide`), as a
    little-endian unsigned column in `_FIELD_DTYPES[width]` (what `_od_table` holds)."""
    rows = windows.size // _WIDE
    if width == 1:
        return windows[at::_WIDE]
    if width == 2:
        return np.ndarray((rows,), "<u2", windows, at, (_WIDE,))
    if at + 4 <= _WIDE:
        return np.ndarray((rows,), "<u4", windows, at, (_WIDE,)) & np.uint32(0xFFFFFF)
    return np.ndarray((rows,), "<u4", windows, at - 1, (_WIDE,)) >> np.uint32(8)


def _uniform_wide(buf: U8, run: _Run, first: memoryview, length_width: int, ts_at: int, ts_width: int,
                  od_width: int, key_at: int, key_width: int, value_at: int, value_width: int, ts0: int,
                  first_timestamp: int, min_timestamp: int | None, max_timestamp: int | None) -> int | None:
    """`_uniform_run` for a run whose record fields all lie in the record's first 15 bytes (a
    producer's keyless or short-keyed records): one 16-byte window per record after the first,
    from the byte before it (the previous record's header count), gathered once into a
    contiguous array; every check is then an array operation on that copy instead of a strided
    read of the batch. The checks are `_uniform_run`'s, the same bytes under the same masks."""
    i0, p0, size, n = run.i, run.p, run.size, run.n
    rows = n - 1
    mask = expect = 0  # over the 16 bytes, byte k of the window at bits 8k..8k+7
    for place, width in ((-1, 1), (0, length_width), (key_at, key_width), (value_at, value_width)):
        shift = 8 * (place + 1)
        mask |= ((1 << 8 * width) - 1) << shift
        expect |= (0 if place < 0 else int.from_bytes(first[place:place + width], "little")) << shift
    shift = 8 * (ts_at + 1)
    mask |= int.from_bytes(b"\x80" * ts_width, "little") << shift  # continuation bits
    expect |= int.from_bytes(b"\x80" * (ts_width - 1), "little") << shift
    sign = 1 << shift  # the zigzag sign bit of the timestamp delta: in the low half (a length has 4 bytes at most)
    windows: U8 = np.ndarray((rows,), f"V{_WIDE}", buf, p0 + size - 1, (size,)).copy().view(np.uint8)
    od_at = ts_at + ts_width  # the offset delta follows the timestamp delta
    if np.count_nonzero(_wide_column(windows, od_at + 1, od_width)
                        != _od_table(od_width, i0 + n)[i0 + 1:i0 + n]):
        return None
    halves = windows.view("<u8")
    lo, hi = halves[0::2], halves[1::2]  # bytes -1..6 and 7..14 of the records (not broadcast: slow)
    mask_lo, mask_hi, expect_lo, expect_hi = mask & _U64_MAX, mask >> 64, expect & _U64_MAX, expect >> 64
    if mask_hi and np.count_nonzero(np.bitwise_and(hi, np.uint64(mask_hi)) != np.uint64(expect_hi)):
        return None
    ts = _wide_column(windows, ts_at + 1, ts_width)
    if not np.count_nonzero(np.bitwise_and(lo, np.uint64(mask_lo | sign)) != np.uint64(expect_lo)):
        # Every timestamp delta at least 0: the varints' bytes order as their values do.
        low = min(ts0, _even_zigzag(int(np.minimum.reduce(ts)), ts_width))
        high = max(ts0, _even_zigzag(int(np.maximum.reduce(ts)), ts_width))
    else:
        if np.count_nonzero(np.bitwise_and(lo, np.uint64(mask_lo)) != np.uint64(expect_lo)):
            return None
        lo_ts, hi_ts = _zigzag_range(ts, ts_width)  # some timestamp delta below 0: decoded
        low, high = min(ts0, lo_ts), max(ts0, hi_ts)
    low, high = first_timestamp + low, first_timestamp + high
    if min_timestamp is not None and max_timestamp is not None and not min_timestamp <= low <= high <= max_timestamp:
        return None  # some record out of the window, or NO_TIMESTAMP: the general path lists them
    return high


def scan_columns(body: bytes | memoryview, count: int, first_timestamp: int, min_timestamp: int | None,
                 max_timestamp: int | None, require_keys: bool = False) -> RecordScan:
    """`scan_records` over numpy columns (module docstring): the runs of records of one size
    that `_uniform_run` takes whole, the rest one column per field (or the loop when few)."""
    end = len(body)
    if count <= 0 or end == 0:
        return scan_each(bytes(body), count, first_timestamp, min_timestamp, max_timestamp, require_keys)
    if count * MIN_RECORD_SIZE > end:
        raise _structure(end // MIN_RECORD_SIZE, f"{count} records cannot fit in {end} bytes")
    buf: U8 = np.frombuffer(body, dtype=np.uint8)  # the batch's own bytes, not a copy
    heads, starts, walked, runs = _record_heads(body, buf, count)
    if walked != end:
        if walked < end:
            raise RecordsError(ErrorCode.INVALID_RECORD, "incorrect declared batch size, records still remaining")
        raise _structure(count - 1, "the last record runs past the batch")
    scan = RecordScan()
    top = NO_TIMESTAMP
    rest: list[tuple[int, int]] = []  # ranges of records the runs did not take
    i = 0
    for run in runs:
        ts = None if run.n < UNIFORM_FROM else _uniform_run(body, buf, run, first_timestamp, min_timestamp,
                                                              max_timestamp, require_keys)
        if ts is None:
            _place(run, heads, starts)  # its records stay in the rest
            continue
        top = max(top, ts)
        if i < run.i:
            rest.append((i, run.i))
        i = run.i + run.n
    if i < count:
        rest.append((i, count))
    left = sum(b - a for a, b in rest)
    if 0 < left < COLUMNS_FROM:
        for a, b in rest:
            part = scan_each(bytes(body[int(heads[a]):int(heads[b])]), b - a, first_timestamp, min_timestamp, max_timestamp,
                             require_keys, a)
            top = max(top, part.max_timestamp)
            scan.errors += part.errors
    elif left:
        if len(rest) == 1:
            a, b = rest[0]
            index = np.arange(a, b, dtype=np.int64)
            top = max(top, _columns(buf, body, index, heads[a:b], starts[a:b], heads[a + 1:b + 1], first_timestamp,
                                    min_timestamp, max_timestamp, require_keys, scan))
        else:
            index = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in rest])
            top = max(top, _columns(buf, body, index, heads[index], starts[index], heads[index + 1],
                                    first_timestamp, min_timestamp, max_timestamp, require_keys, scan))
    scan.max_timestamp = top
    return scan


def _columns(buf: U8, body: bytes | memoryview, index: I64, heads: I64, starts: I64, ends: I64,
             first_timestamp: int, min_timestamp: int | None, max_timestamp: int | None, require_keys: bool,
             scan: RecordScan) -> int:
    """Check the records `index` (their length varints at heads, their bodies from starts to
    ends) one column per field; append their errors to scan, return their largest timestamp."""
    count = index.size
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
        raise _structure(int(index[np.argmax(bad)]), "record size disagrees with its fields")
    timestamps = ts_delta + np.int64(_wrap64(first_timestamp))  # int64: wraps as Kafka's longs do
    wrong_offset = offset_delta != index
    keyless = (key_len < 0) if require_keys else np.zeros(count, dtype=np.bool_)
    out_of_range = np.zeros(count, dtype=np.bool_)
    lo = hi = 0
    if min_timestamp is not None and max_timestamp is not None:
        lo, hi = min_timestamp, max_timestamp
        out_of_range = ~keyless & (timestamps != NO_TIMESTAMP) & ((timestamps < lo) | (timestamps > hi))
    rejected = wrong_offset | keyless | out_of_range
    if rejected.any():  # rare: a message per rejected record, as Kafka's record_errors carry
        for k in np.flatnonzero(rejected).tolist():
            i = int(index[k])
            if wrong_offset[k]:
                scan.errors.append((i, ErrorCode.INVALID_RECORD, _offset_delta(i, int(offset_delta[k]))))
            if keyless[k]:
                scan.errors.append((i, ErrorCode.INVALID_RECORD, _COMPACTED_NO_KEY))
            elif out_of_range[k]:
                scan.errors.append((i, ErrorCode.INVALID_TIMESTAMP, _out_of_range(i, int(timestamps[k]), lo, hi)))
    return int(timestamps.max())
