"""protocol.records.record_scan: the record walk of a produced v2 batch, loop and columns.

The loop (`scan_each`, the produce path's scanner before the columns) is the reference: every
case runs both ways and the two must agree on the outcome (the error code, the rejected records
and their messages, the max timestamp). kafka-python's DefaultRecordBatchBuilder is the
independent builder where whole batches are needed; then the cases of every error the scan can
give, on batches large enough to take the columns through `validate`.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.errors import ErrorCode
from protocol.records import compression, record_batch, record_scan
from protocol.records.errors import RecordsError
from protocol.records.record_batch import encode_record
from protocol.records.record_scan import COLUMNS_FROM, scan_columns, scan_each, scan_records
from protocol.records.records import decode_records, shallow_validate
from protocol.records.validator import ValidationConfig, validate

NOW = 1_700_000_100_000
MANY = 300  # records in a batch that `scan_records` hands to the columns (test_scan_records_picks_by_count)


def outcome(f, body: bytes, count: int, first_ts: int, lo: int | None, hi: int | None,  # noqa: ANN001
            keys: bool) -> tuple:
    try:
        scan = f(body, count, first_ts, lo, hi, keys)
    except RecordsError as e:
        return ("raised", e.error_code, e.record_errors)
    return ("ok", scan.max_timestamp, scan.errors)


def both(body: bytes, count: int, first_ts: int = NOW, lo: int | None = None, hi: int | None = None,
         keys: bool = False) -> tuple:
    each = outcome(scan_each, body, count, first_ts, lo, hi, keys)
    columns = outcome(scan_columns, body, count, first_ts, lo, hi, keys)
    assert columns == each
    return columns


def body_of(records: list[tuple[int, int, bytes | None, bytes | None, list]]) -> bytes:
    """(offset delta, timestamp delta, key, value, headers) records, encoded."""
    return b"".join(encode_record(o, t, k, v, h) for o, t, k, v, h in records)


def plain(n: int, value_size: int = 100, key: bytes | None = b"k") -> list:
    return [(i, i // 7, key, b"v" * value_size, []) for i in range(n)]


# ---- the two ways agree --------------------------------------------------------------------------

header = st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=6)))
record = st.tuples(st.one_of(st.none(), st.binary(max_size=8)),
                   st.sampled_from([0, 1, 60, 61, 200, 8300]),  # value sizes: runs of equal records
                   st.integers(-5, 100_000),
                   st.lists(header, max_size=3))


@settings(max_examples=150, deadline=None)
@given(st.lists(record, min_size=1, max_size=260), st.data())
def test_columns_agree_with_the_loop(records: list, data: st.DataObject) -> None:
    offsets = list(range(len(records)))
    if data.draw(st.booleans()):  # a few records out of place
        for i in data.draw(st.lists(st.integers(0, len(records) - 1), max_size=3)):
            offsets[i] += data.draw(st.integers(-3, 3))
    body = body_of([(o, t, k, b"x" * size, h) for o, (k, size, t, h) in zip(offsets, records, strict=True)])
    count = len(records) + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    if data.draw(st.booleans()) and body:  # a byte changed, cut or added
        pos = data.draw(st.integers(0, len(body) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "extra"]))
        if how == "flip":
            body = body[:pos] + bytes([body[pos] ^ data.draw(st.integers(1, 255))]) + body[pos + 1:]
        elif how == "cut":
            body = body[:pos]
        else:
            body = body + b"\x00"
    window = data.draw(st.sampled_from([None, (NOW + 10, NOW + 50_000)]))
    lo, hi = window if window else (None, None)
    both(body, max(count, 0), NOW, lo, hi, data.draw(st.booleans()))


# Runs of records of one size (what a producer of equal-size values sends) are checked whole by
# record_scan._uniform_run: batches built from one kind of record, then changed here and there.
TIMESTAMP_DELTAS = {
    "zero": lambda i: 0,
    "index": lambda i: i,  # one byte to 63, two to 8191, three after: sizes change with the offsets'
    "slow": lambda i: i // 50,
    "thousands": lambda i: i * 1000,  # three bytes from the start
    "negative": lambda i: -i,
    "both signs": lambda i: i if i % 3 else -i,
}


def varint_places(record: bytes) -> list[int]:
    """Where a header-less record's varints start: length, timestamp and offset deltas, key
    size, value size, header count."""
    _, p = record_batch.varint_at(record, 0)
    places = [0, p + 1]
    _, p = record_batch.varint_at(record, p + 1)
    places.append(p)
    _, p = record_batch.varint_at(record, p)
    for _ in range(2):  # key, value
        places.append(p)
        n, p = record_batch.varint_at(record, p)
        p += max(n, 0)
    return [*places, len(record) - 1]


@settings(max_examples=250, deadline=None)
@given(st.data())
def test_runs_of_one_size_agree_with_the_loop(data: st.DataObject) -> None:
    n = data.draw(st.one_of(st.sampled_from([128, 130, 1250, 8300]), st.integers(128, 700)), label="records")
    key = data.draw(st.sampled_from([None, b"", b"k", b"key-0123456789abcdef"]), label="key")
    value = data.draw(st.sampled_from([None, b"", b"v", b"v" * 5, b"v" * 100, b"v" * 300]), label="value")
    delta = TIMESTAMP_DELTAS[data.draw(st.sampled_from(sorted(TIMESTAMP_DELTAS)), label="timestamps")]
    records: list = [[i, delta(i), key, value, []] for i in range(n)]
    index = st.integers(0, n - 1)
    for _ in range(data.draw(st.integers(0, 3), label="changes")):
        i = data.draw(index)
        what = data.draw(st.sampled_from(["offset", "timestamp", "no key", "headers", "value", "key"]))
        if what == "offset":
            records[i][0] += data.draw(st.sampled_from([-1, 1, 64, 8192]))
        elif what == "timestamp":
            records[i][1] = data.draw(st.sampled_from([-NOW - 1, -5, 70, 9000, 10_000_000, 1 << 40]))
        elif what == "no key":
            records[i][2] = None
        elif what == "headers":
            records[i][4] = data.draw(st.lists(header, min_size=1, max_size=3))
        elif what == "value":
            records[i][3] = b"w" * data.draw(st.sampled_from([0, 4, 99, 101, 200]))
        else:
            records[i][2] = b"kk"
    encoded = [encode_record(*r) for r in records]
    starts = [0]
    for r in encoded:
        starts.append(starts[-1] + len(r))
    body = bytearray(b"".join(encoded))
    for _ in range(data.draw(st.integers(0, 2), label="corruptions")):
        # The first byte of one of a record's varints, or any of its first dozen bytes.
        i = data.draw(st.one_of(index, st.sampled_from([1, n // 2, n - 1])))  # mostly inside a run
        at = starts[i] + data.draw(st.one_of(st.sampled_from(varint_places(encoded[i])), st.integers(0, 12)))
        at = min(at, starts[i + 1] - 1)
        b = body[at]
        body[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, b ^ 0x01, b ^ 0x80, (b + 2) % 256,
                                              (b - 2) % 256]))
    cut = data.draw(st.sampled_from([None, None, None, "cut", "extra"]), label="end")
    if cut == "cut":
        body = body[:data.draw(st.integers(len(body) - 200, len(body) - 1))]
    elif cut == "extra":
        body += b"\x00"
    count = n + data.draw(st.sampled_from([0, 0, 0, 0, -1, 1]), label="count")
    first_ts = data.draw(st.sampled_from([NOW, NOW, NOW, 0, -1, (1 << 63) - 100, -(1 << 63) + 10]), label="first")
    window = data.draw(st.sampled_from([None, (NOW - 100, NOW + 5_000), (NOW, NOW + 10 ** 8)]), label="window")
    lo, hi = window if window else (None, None)
    both(bytes(body), count, first_ts, lo, hi, data.draw(st.booleans(), label="compacted"))


@pytest.mark.parametrize("key", [None, b"k", b"key-0123456789abcdef"])
@pytest.mark.parametrize("value", [None, b"v" * 100])
@pytest.mark.parametrize("delta", ["zero", "index", "thousands"])
def test_every_varint_byte_changed_inside_a_run(key: bytes | None, value: bytes | None, delta: str) -> None:
    """Each varint's first byte of a record inside a run, its neighbour's and the run's last,
    set to values that keep or break the record: the loop's answer every time."""
    n = 300
    encoded = [encode_record(i, TIMESTAMP_DELTAS[delta](i), key, value) for i in range(n)]
    for i in (1, 150, n - 1):
        record = encoded[i]
        for at in varint_places(record):
            b = record[at]
            for new in {0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, b ^ 0x01, b ^ 0x80, (b + 2) % 256, (b - 2) % 256} - {b}:
                changed = record[:at] + bytes([new]) + record[at + 1:]
                body = b"".join(encoded[:i]) + changed + b"".join(encoded[i + 1:])
                both(body, n, NOW, NOW - 100, NOW + 10 ** 6, key is not None)


# (key, value) pairs around the edges of record_scan._uniform_wide: records of 15 bytes and
# more, every field in their first 15 (a value size ending at byte 14 or 15), and longer ones.
WIDE_EDGES = [(None, b"v" * 100), (None, b"v" * 8), (None, b"v" * 7), (b"k" * 9, b"v" * 40),
              (b"k" * 10, b"v" * 40), (b"k", b"v" * 70), (b"", None)]


@pytest.mark.parametrize(("key", "value"), WIDE_EDGES)
def test_every_byte_of_the_wide_window_changed_inside_a_run(monkeypatch: pytest.MonkeyPatch, key: bytes | None,
                                                           value: bytes | None) -> None:
    """The 16 bytes that _uniform_wide gathers per record (the one before it and its first
    15), each set to values that keep or break the record, in a run's first, middle and last
    records and in the records after the first of three runs: the loop's answer every time,
    and the wide path asked whenever the record's layout fits in its window."""
    wide = []
    real = record_scan._uniform_wide

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        wide.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(record_scan, "_uniform_wide", spy)
    n = 300
    encoded = [encode_record(i, i * 3, key, value) for i in range(n)]
    both(b"".join(encoded), n, NOW, NOW - 100, NOW + 10 ** 6, key is not None)
    # Runs [0, 22), [22, 64) and [64, 300): timestamp deltas of one byte to 63, offset deltas to 63.
    def fits(record: bytes) -> bool:  # 15 bytes or more, the value size's varint ending by byte 15
        return len(record) >= 15 and record_batch.varint_at(record, varint_places(record)[-2])[1] <= 15

    assert bool(wide) == any(fits(encoded[i]) for i in (0, 22, 100))
    starts = [0]
    for r in encoded:
        starts.append(starts[-1] + len(r))
    body = b"".join(encoded)
    for i in (1, 22, 64, 65, 150, n - 1):  # 22: timestamp deltas of one byte end there; 64: offset deltas
        for at in range(starts[i] - 1, min(starts[i] + 15, len(body))):
            b = body[at]
            for new in {0x00, 0x01, 0x7F, 0x80, 0xFF, b ^ 0x01, b ^ 0x80, (b + 2) % 256} - {b}:
                changed = body[:at] + bytes([new]) + body[at + 1:]
                both(changed, n, NOW, NOW - 100, NOW + 10 ** 6, key is not None)
                both(changed, n, NOW, None, None, False)


def test_uniform_runs_are_taken_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench.produce_load's batches: every record is in a run that _uniform_run takes (three
    runs: offset deltas of one, two and three bytes), and the result is the loop's."""
    taken: list[tuple[int, int]] = []
    real = record_scan._uniform_run

    def spy(body, buf, run, *rest):  # noqa: ANN001, ANN002, ANN202
        ts = real(body, buf, run, *rest)
        taken.append((run.i, run.n if ts is not None else 0))
        return ts

    monkeypatch.setattr(record_scan, "_uniform_run", spy)
    records = [(i, i, None, b"v" * 100, []) for i in range(10_000)]
    assert both(body_of(records), 10_000, NOW, NOW - 1000, NOW + 10_000) == ("ok", NOW + 9999, [])
    assert taken == [(0, 64), (64, 8128), (8192, 1808)]
    taken.clear()
    records[5000] = (5000, -100, None, b"v" * 100, [])  # a delta below 0 (two bytes, as its neighbours): decoded
    assert both(body_of(records), 10_000) == ("ok", NOW + 9999, [])
    assert taken == [(0, 64), (64, 8128), (8192, 1808)]
    taken.clear()
    records[6000] = (6000, 1 << 40, None, b"v" * 100, [])  # out of the window: the run goes the general way
    kind, _, errors = both(body_of(records), 10_000, NOW, NOW - 1000, NOW + 10_000)
    assert (kind, [(i, code) for i, code, _ in errors]) == ("ok", [(6000, ErrorCode.INVALID_TIMESTAMP)])


@pytest.mark.parametrize("sizes", [[100], [1, 2], [60, 61, 62], [0] * 5 + [9000]])
def test_runs_of_equal_sizes_are_walked_in_strides_without_skipping_a_change(sizes: list[int]) -> None:
    # Runs of all lengths, so the walk's guesses end at every kind of change of size.
    records = []
    run = 1
    while len(records) < 3000:
        for s in sizes:
            records += [(len(records) + j, 0, b"k", b"v" * s, []) for j in range(run)]
        run = run * 3 % 97 + 1
    body = body_of(records)
    assert both(body, len(records)) == ("ok", NOW, [])
    assert both(body, len(records) - 1)[:2] == ("raised", ErrorCode.INVALID_RECORD)
    assert both(b"", 0) == ("ok", -1, [])


def test_offset_deltas_keys_and_timestamps_are_listed_per_record() -> None:
    records = plain(MANY)
    records[5] = (6, 0, b"k", b"v", [])  # offset delta 6 at index 5
    records[7] = (7, 0, None, b"v", [])  # no key
    records[9] = (9, 10_000_000, b"k", b"v", [])  # far in the future
    records[11] = (12, 10_000_000, None, b"v", [])  # all three: the key is judged before the timestamp
    body = body_of(records)
    kind, _, errors = both(body, MANY, NOW, NOW - 1000, NOW + 1000, True)
    assert kind == "ok"
    assert [(i, code) for i, code, _ in errors] == [
        (5, ErrorCode.INVALID_RECORD), (7, ErrorCode.INVALID_RECORD), (9, ErrorCode.INVALID_TIMESTAMP),
        (11, ErrorCode.INVALID_RECORD), (11, ErrorCode.INVALID_RECORD)]
    assert errors[1][2] == errors[4][2] == "Compacted topic cannot accept message without key."
    # Without the compaction rule record 11's timestamp is judged instead.
    _, _, errors = both(body, MANY, NOW, NOW - 1000, NOW + 1000, False)
    assert [(i, code) for i, code, _ in errors] == [
        (5, ErrorCode.INVALID_RECORD), (9, ErrorCode.INVALID_TIMESTAMP), (11, ErrorCode.INVALID_RECORD),
        (11, ErrorCode.INVALID_TIMESTAMP)]


def test_max_timestamp_and_no_timestamp() -> None:
    records = [(i, -NOW - 1 if i % 2 else (i * 37) % 1001, b"k", b"v", []) for i in range(MANY)]
    top = NOW + max((i * 37) % 1001 for i in range(0, MANY, 2))
    assert both(body_of(records), MANY, NOW, NOW, NOW + 1000) == ("ok", top, [])  # -1: never out of range
    assert both(body_of(records), MANY, -1 - 2000) == ("ok", -1, [])  # every timestamp below -1: the floor


def test_timestamps_wrap_as_kafka_longs() -> None:
    top = (1 << 63) - 1
    records = [(i, 5 if i == 3 else 0, b"k", b"v", []) for i in range(MANY)]
    kind, max_ts, _ = both(body_of(records), MANY, top - 1)
    assert (kind, max_ts) == ("ok", top - 1)  # top - 1 + 5 wraps to a large negative
    long_delta = [(i, (1 << 62) + 5 if i == 3 else 0, b"k", b"v", []) for i in range(MANY)]
    for count in (MANY, 5):  # columns and loop alike, a long delta from an ordinary first timestamp
        body = body_of(long_delta[:count])
        assert both(body, count, 1 << 62) == ("ok", 1 << 62, [])  # 2**63 + 5 wraps below -1


# ---- malformed records: INVALID_RECORD, both ways --------------------------------------------------

def zz(n: int) -> bytes:
    return record_batch.zigzag_varint(n)


def with_record(i: int, raw: bytes, n: int = MANY) -> bytes:
    """A body of n plain records where record i's bytes are raw."""
    return b"".join(raw if j == i else encode_record(j, 0, b"k", b"v" * 100) for j in range(n))


MALFORMED = {
    "negative length": zz(-5) + b"\x00" * 5,
    "length longer than its fields": zz(9) + b"\x00" + zz(0) + zz(40) + zz(-1) + zz(-1) + zz(0) + b"\x00\x00\x00",
    "length shorter than its fields": zz(5) + b"\x00" + zz(0) + zz(40) + zz(1) + b"k" + zz(-1) + zz(0),
    "negative header count": zz(6) + b"\x00" + zz(0) + zz(40) + zz(-1) + zz(-1) + zz(-1),
    "negative header key size": zz(8) + b"\x00" + zz(0) + zz(40) + zz(-1) + zz(-1) + zz(1) + zz(-1) + zz(-1),
    "more headers than room": zz(6) + b"\x00" + zz(0) + zz(40) + zz(-1) + zz(-1) + zz(1000),
    "varint of 11 bytes": zz(16) + b"\x00" + b"\xff" * 10 + b"\x01" + zz(40) + zz(-1) + zz(-1) + zz(0),
}


@pytest.mark.parametrize("why", MALFORMED)
@pytest.mark.parametrize("where", [0, 40, MANY - 1])
def test_malformed_record_is_invalid_record(why: str, where: int) -> None:
    kind, code, _ = both(with_record(where, MALFORMED[why]), MANY)
    assert (kind, code) == ("raised", ErrorCode.INVALID_RECORD)


def test_records_headers_in_columns_and_one_by_one() -> None:
    many_headers = [(f"h{j}", b"x" * j) for j in range(40)]
    records = [(i, 0, b"k", b"v", many_headers if i % 50 == 0 else [("a", None)] if i % 2 else [])
               for i in range(MANY * 2)]
    assert both(body_of(records), len(records)) == ("ok", NOW, [])


@pytest.mark.parametrize("count", [0, MANY - 1, MANY + 1, 10**9])
def test_count_other_than_the_records_is_invalid_record(count: int) -> None:
    kind, code, _ = both(body_of(plain(MANY)), count)
    assert (kind, code) == ("raised", ErrorCode.INVALID_RECORD)


def test_scan_records_picks_by_count(monkeypatch: pytest.MonkeyPatch) -> None:
    assert COLUMNS_FROM <= MANY
    picked: list[str] = []
    for name, real in (("scan_each", scan_each), ("scan_columns", scan_columns)):
        monkeypatch.setattr(record_scan, name, lambda *a, real=real, name=name: picked.append(name) or real(*a))
    assert scan_records(memoryview(body_of(plain(MANY))), MANY, NOW, None, None).max_timestamp == NOW + (MANY - 1) // 7
    assert scan_records(body_of(plain(3)), 3, NOW, None, None).max_timestamp == NOW
    assert picked == ["scan_columns", "scan_each"]


# ---- through the validator, with batches that take the columns ------------------------------------

CONFIG = ValidationConfig(max_message_bytes=1 << 22)


def kp_batch(n: int = MANY, codec: int = 0, key: bytes | None = b"k", ts_step: int = 1) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i in range(n):
        b.append(i, timestamp=NOW - 10_000 + i * ts_step, key=key, value=b"value-%d" % i, headers=[])
    return bytes(b.build())


def recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, record_batch.CRC_AT, crc32c.crc32c(bytes(buf[21:])))
    return buf


def rejects(data: bytes | bytearray, code: ErrorCode, config: ValidationConfig = CONFIG) -> RecordsError:
    with pytest.raises(RecordsError) as e:
        validate(data, 9, NOW, config)
    assert e.value.error_code == code, str(e.value)
    return e.value


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP, compression.LZ4, compression.ZSTD])
def test_a_large_batch_is_stored_as_sent_with_its_max_timestamp(codec: int) -> None:
    sent = kp_batch(codec=codec)
    v = validate(sent, 9, NOW, CONFIG)
    assert bytes(v.buffer) == sent and v.count == MANY and v.max_timestamp == NOW - 10_000 + MANY - 1
    v.assign_offsets(1000)
    assert shallow_validate(v.buffer) == (len(sent), 1000 + MANY - 1)
    assert [r.offset for r in decode_records(v.buffer)] == list(range(1000, 1000 + MANY))


def test_a_large_batch_with_a_wrong_max_timestamp_is_corrected_and_recrced() -> None:
    sent = bytearray(kp_batch())
    struct.pack_into(">q", sent, record_batch.MAX_TIMESTAMP_AT, 5)
    v = validate(recrc(sent), 9, NOW, CONFIG)
    assert v.max_timestamp == NOW - 10_000 + MANY - 1
    assert shallow_validate(v.buffer)[0] == len(sent)  # the CRC holds again


def test_log_append_time_topic_rewrites_the_header_of_a_large_batch() -> None:
    v = validate(kp_batch(), 9, NOW, ValidationConfig(1 << 22, timestamp_type=record_batch.LOG_APPEND_TIME))
    assert v.log_append_time == v.max_timestamp == NOW
    assert record_batch.RECORD_BATCH_HEADER.unpack_from(v.buffer)[8] == NOW
    assert shallow_validate(v.buffer)[0] == len(v.buffer)


def test_large_batch_corrupt_crc() -> None:
    sent = bytearray(kp_batch())
    sent[-3] ^= 0x40
    rejects(sent, ErrorCode.CORRUPT_MESSAGE)


def test_large_batch_record_count_disagreeing_with_the_records() -> None:
    bad = bytearray(kp_batch())
    struct.pack_into(">i", bad, 57, MANY + 1)
    struct.pack_into(">i", bad, record_batch.LAST_OFFSET_DELTA_AT, MANY)
    rejects(recrc(bad), ErrorCode.INVALID_RECORD)


def test_large_batch_malformed_record_in_a_compressed_body() -> None:
    body = with_record(MANY // 2, MALFORMED["length shorter than its fields"])
    batch = record_batch.batch_around(body, MANY, NOW, NOW, codec=compression.GZIP)
    rejects(batch, ErrorCode.INVALID_RECORD)


def test_large_batch_timestamps_out_of_range() -> None:
    e = rejects(kp_batch(ts_step=100), ErrorCode.INVALID_TIMESTAMP,
                ValidationConfig(1 << 22, timestamp_difference_max_ms=10_000))
    first_bad = 10_000 // 100 * 2 + 1  # NOW - 10_000 + i * 100 > NOW + 10_000
    assert [i for i, _ in e.record_errors] == list(range(first_bad, MANY))


def test_large_batch_without_keys_on_a_compacted_topic() -> None:
    e = rejects(kp_batch(key=None), ErrorCode.INVALID_RECORD, ValidationConfig(1 << 22, compacted=True))
    assert len(e.record_errors) == MANY


def test_large_batch_claiming_log_append_time() -> None:
    bad = bytearray(kp_batch())
    struct.pack_into(">h", bad, record_batch.ATTRIBUTES_AT, record_batch.TIMESTAMP_TYPE_BIT)
    e = rejects(recrc(bad), ErrorCode.INVALID_TIMESTAMP)
    assert [i for i, _ in e.record_errors] == list(range(MANY))



def _header_edit(at: int, fmt: str, value: int) -> bytes:
    bad = bytearray(kp_batch())
    struct.pack_into(fmt, bad, at, value)
    return bytes(recrc(bad))


@pytest.mark.parametrize(("data", "code", "version", "kw"), [
    pytest.param(lambda: kp_batch(), ErrorCode.MESSAGE_TOO_LARGE, 9, {}, id="too-large"),
    pytest.param(lambda: _header_edit(record_batch.ATTRIBUTES_AT, ">h", compression.ZSTD),
                 ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, 6, {}, id="zstd-before-v7"),
    pytest.param(lambda: _header_edit(record_batch.ATTRIBUTES_AT, ">h", record_batch.CONTROL_BIT),
                 ErrorCode.INVALID_RECORD, 9, {}, id="control"),
    pytest.param(lambda: _header_edit(record_batch.ATTRIBUTES_AT, ">h", record_batch.TRANSACTIONAL_BIT),
                 ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 9, {}, id="transactional"),
    pytest.param(lambda: _header_edit(record_batch.ATTRIBUTES_AT, ">h", record_batch.TRANSACTIONAL_BIT),
                 ErrorCode.INVALID_TXN_STATE, 9, {"transactional_id": "t"}, id="transactional-with-id"),
    pytest.param(lambda: _header_edit(0, ">q", 7), ErrorCode.INVALID_RECORD, 9, {}, id="base-offset"),
    pytest.param(lambda: _header_edit(43, ">q", 5), ErrorCode.INVALID_RECORD, 9, {}, id="producer-id-no-sequence"),
    pytest.param(lambda: kp_batch()[:-1], ErrorCode.CORRUPT_MESSAGE, 2, {}, id="cut-v2"),
    pytest.param(lambda: kp_batch()[:-1], ErrorCode.INVALID_RECORD, 9, {}, id="cut-v9"),
])
def test_large_batch_header_errors(data, code: ErrorCode, version: int, kw: dict) -> None:  # noqa: ANN001
    """The checks made before the records are walked give the same answers for large batches."""
    config = ValidationConfig(1000) if code == ErrorCode.MESSAGE_TOO_LARGE else CONFIG
    with pytest.raises(RecordsError) as e:
        validate(data(), version, NOW, config, **kw)
    assert e.value.error_code == code, str(e.value)
