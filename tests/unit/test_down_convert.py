"""Down-conversion (protocol.records.down_convert): RecordBatch v2 and magic 1 rewritten for old
consumers, golden bytes against kafka-python's legacy record builders, and KIP-74's size rules
on the converted sizes."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol.errors import ErrorCode
from protocol.records import compression
from protocol.records.down_convert import down_convert, fit, needs_conversion, target_magic
from protocol.records.errors import RecordsError
from protocol.records.message_set import build_message_set
from protocol.records.records import decode_records

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4]
T0 = 1_700_000_000_000
ATTRIBUTES_AT, MAX_TS_AT, CRC_AT, CRC_FROM = 21, 35, 17, 21


def recs(n: int) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(None if i % 5 == 0 else b"k%d" % i, None if i % 7 == 3 else b"value-%d" % i * (i % 4 + 1), T0 + 3 * i)
            for i in range(n)]


def v2_batch(base: int, records: list[tuple[bytes | None, bytes | None, int]], codec: int = 0) -> bytes:
    """A RecordBatch v2 of records at base.., every record with headers (which must be dropped)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (k, v, t) in enumerate(records):
        b.append(i, timestamp=t, key=k, value=v, headers=[("h", b"header-%d" % i), ("empty", None)])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base)  # the base offset is outside the CRC
    return bytes(data)


def rewrite(batch: bytes, attributes_or: int = 0, max_ts: int | None = None) -> bytes:
    """The batch with attribute bits set (or its max timestamp changed) and its CRC32C recomputed."""
    data = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", data, ATTRIBUTES_AT)
    struct.pack_into(">h", data, ATTRIBUTES_AT, attributes | attributes_or)
    if max_ts is not None:
        struct.pack_into(">q", data, MAX_TS_AT, max_ts)
    struct.pack_into(">I", data, CRC_AT, crc32c.crc32c(bytes(data[CRC_FROM:])))
    return bytes(data)


def legacy(magic: int, entries: list[tuple[int, int, bytes | None, bytes | None]], attributes: int = 0) -> bytes:
    """kafka-python's uncompressed magic 0/1 bytes for (offset, timestamp, key, value)."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 30)
    for offset, ts, k, v in entries:
        b.append(offset, timestamp=ts if magic else None, key=k, value=v)
    out = bytearray(b.build())
    if attributes:  # the timestamp type bit, which kafka-python's builder never sets: set it and re-CRC
        pos = 0
        while pos < len(out):
            (size,) = struct.unpack_from(">i", out, pos + 8)
            out[pos + 17] |= attributes
            struct.pack_into(">I", out, pos + 12, zlib.crc32(bytes(out[pos + 16:pos + 12 + size])))
            pos += 12 + size
    return bytes(out)


def entry(data: bytes, pos: int = 0) -> tuple[int, int, int, int, int, bytes | None, bytes | None]:
    """(offset, size, magic, attributes, timestamp or -1, key, value) of the magic 0/1 entry at pos."""
    offset, size, _crc, magic, attributes = struct.unpack_from(">qiIbb", data, pos)
    p = pos + 18
    ts = -1
    if magic == 1:
        (ts,) = struct.unpack_from(">q", data, p)
        p += 8
    fields: list[bytes | None] = []
    for _ in range(2):
        (n,) = struct.unpack_from(">i", data, p)
        p += 4
        fields.append(None if n < 0 else data[p:p + n])
        p += max(n, 0)
    return offset, size, magic, attributes, ts, fields[0], fields[1]


def test_fetch_versions_map_to_kafkas_target_formats() -> None:
    assert [target_magic(v) for v in range(13)] == [0, 0, 1, 1] + [2] * 9


@pytest.mark.parametrize("to_magic", [0, 1])
def test_uncompressed_batch_becomes_kafka_pythons_legacy_bytes(to_magic: int) -> None:
    rs = recs(12)
    batch = v2_batch(500, rs)
    assert needs_conversion(batch, to_magic)
    got = down_convert(batch, to_magic, 500)
    assert got.data == legacy(to_magic, [(500 + i, t, k, v) for i, (k, v, t) in enumerate(rs)])
    assert got.first_unit_end == len(got.data) and len(got.entry_ends) == 12


def test_records_below_the_fetch_offset_leave_an_uncompressed_batch() -> None:
    rs = recs(10)
    got = down_convert(v2_batch(100, rs), 1, 104)
    assert got.data == legacy(1, [(100 + i, t, k, v) for i, (k, v, t) in enumerate(rs) if i >= 4])


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batch_becomes_one_magic1_wrapper_with_relative_inner_offsets(codec: int) -> None:
    rs = recs(9)
    got = down_convert(v2_batch(40, rs, codec), 1, 43)  # a compressed batch goes whole, whatever the offset
    offset, size, magic, attributes, ts, key, value = entry(got.data)
    assert (offset, magic, attributes, ts, key) == (48, 1, codec, max(t for _, _, t in rs), None)
    assert len(got.data) == 12 + size and got.entry_ends == [len(got.data)]
    assert value is not None
    inner = compression.decompress(codec, value)
    assert inner == legacy(1, [(i, t, k, v) for i, (k, v, t) in enumerate(rs)])
    # kafka-python reads the wrapper back with absolute offsets.
    batch = MemoryRecords(got.data).next_batch()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch] == [
        (40 + i, t, k, v) for i, (k, v, t) in enumerate(rs)]


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batch_to_magic0_has_absolute_inner_offsets(codec: int) -> None:
    rs = recs(6)
    got = down_convert(v2_batch(7, rs, codec), 0, 7)
    offset, _size, magic, attributes, _ts, key, value = entry(got.data)
    assert (offset, magic, attributes, key) == (12, 0, codec, None)
    assert value is not None
    assert compression.decompress(codec, value) == legacy(0, [(7 + i, -1, k, v) for i, (k, v, _) in enumerate(rs)])
    assert [(r.offset, r.key, r.value) for r in decode_records(got.data)] == [
        (7 + i, k, v) for i, (k, v, _) in enumerate(rs)]


@pytest.mark.parametrize("codec", [0, *CODECS])
def test_magic1_entries_are_rebuilt_for_magic0_and_copied_for_magic1(codec: int) -> None:
    stored = build_message_set(recs(5), magic=1, codec=codec, base_offset=20)
    assert not needs_conversion(stored, 1) and needs_conversion(stored, 0)
    assert down_convert(stored, 1, 20).data == stored
    got = down_convert(stored, 0, 20)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(got.data)] == [
        (20 + i, -1, k, v) for i, (k, v, _) in enumerate(recs(5))]
    assert [entry(got.data, start)[2] for start in [0, *got.entry_ends[:-1]]] == [0] * len(got.entry_ends)


def test_a_mixed_log_converts_only_what_is_newer_and_drops_a_cut_off_tail() -> None:
    old = build_message_set(recs(3), magic=1, base_offset=0)
    new = v2_batch(3, recs(4))
    tail = v2_batch(7, recs(2))
    data = old + new + tail[:-5]
    got = down_convert(data, 1, 0)
    assert got.data[:len(old)] == old
    assert got.data[len(old):] == legacy(1, [(3 + i, t, k, v) for i, (k, v, t) in enumerate(recs(4))])
    assert got.first_unit_end == got.entry_ends[0] == 41  # the first stored message


def test_log_append_time_batches_keep_the_type_bit_and_the_max_timestamp() -> None:
    rs = recs(4)
    batch = rewrite(v2_batch(0, rs), attributes_or=0x08, max_ts=T0 + 999)
    got = down_convert(batch, 1, 0)
    assert got.data == legacy(1, [(i, T0 + 999, k, v) for i, (k, v, _) in enumerate(rs)], attributes=0x08)
    wrapped = down_convert(rewrite(v2_batch(0, rs, compression.GZIP), attributes_or=0x08, max_ts=T0 + 999), 1, 0)
    _offset, _size, _magic, attributes, ts, _key, value = entry(wrapped.data)
    assert (attributes, ts) == (compression.GZIP | 0x08, T0 + 999)
    assert value is not None
    assert compression.decompress(compression.GZIP, value) == legacy(
        1, [(i, T0 + 999, k, v) for i, (k, v, _) in enumerate(rs)], attributes=0x08)


def test_control_batches_are_skipped() -> None:
    control = rewrite(v2_batch(0, [(b"\0\0\0\0", b"\0\0\0\0\0\0", T0)]), attributes_or=0x30)
    data = control + v2_batch(1, recs(2))
    assert down_convert(data, 1, 0).data == legacy(1, [(1 + i, t, k, v) for i, (k, v, t) in enumerate(recs(2))])


def test_zstd_cannot_go_below_magic2() -> None:
    batch = rewrite(v2_batch(0, recs(2)), attributes_or=compression.ZSTD)
    with pytest.raises(RecordsError) as e:
        down_convert(batch, 1, 0)
    assert e.value.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_a_corrupt_stored_batch_is_an_error_not_garbage() -> None:
    data = bytearray(v2_batch(0, recs(3)))
    data[-1] ^= 1
    with pytest.raises(RecordsError):
        down_convert(bytes(data), 1, 0)


def test_fit_applies_kip74_to_converted_sizes() -> None:
    first = v2_batch(0, recs(3))
    second = v2_batch(3, recs(3))
    converted = down_convert(first + second, 1, 0)
    ends = converted.entry_ends
    assert len(ends) == 6 and converted.first_unit_end == ends[2]
    # Fetch v3: whole messages within the limit ...
    assert fit(converted, ends[3] + 5, min_one=False, allow_partial=False) == converted.data[:ends[3]]
    assert fit(converted, ends[0] - 1, min_one=False, allow_partial=False) == b""
    # ... but the first partition with data gets at least the first stored batch, converted, whole.
    assert fit(converted, 10, min_one=True, allow_partial=False) == converted.data[:ends[2]]
    assert fit(converted, ends[4], min_one=True, allow_partial=False) == converted.data[:ends[4]]
    # Fetch v0-2: the first max_bytes bytes, a message cut short if need be.
    assert fit(converted, ends[0] + 7, min_one=False, allow_partial=True) == converted.data[:ends[0] + 7]
    assert fit(converted, 1 << 20, min_one=False, allow_partial=False) == converted.data


def test_needs_conversion_only_for_newer_entries() -> None:
    assert not needs_conversion(b"", 1)
    assert not needs_conversion(build_message_set(recs(3), magic=0), 0)
    assert needs_conversion(build_message_set(recs(3), magic=1) + v2_batch(3, recs(1)), 1)
    assert not needs_conversion(v2_batch(0, recs(1)), 2)
