"""Message format v0/v1 with every codec, the any-format front (readers, follower check, down-conversion),
and kafka-python as the cross-check. The produce-side validation of RecordBatch v2 is test_validator.py."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol.errors import ErrorCode
from protocol.records import compression
from protocol.records.errors import RecordsError
from protocol.records.message_set import (
    build_message_set,
    scan_entries,
    shallow_validate,
    validate_and_assign,
)
from protocol.records.records import decode_records, down_convert
from protocol.records.records import shallow_validate as shallow_validate_any

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4]


def recs(n: int) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(None if i % 5 == 0 else b"k%d" % i, b"value-%d" % i * (i % 4 + 1), 1_700_000_000_000 + i)
            for i in range(n)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_assigns_offsets(magic: int, codec: int) -> None:
    data = build_message_set(recs(7), magic=magic, codec=codec)
    info = validate_and_assign(data, 1000, 0)
    assert (info.first_offset, info.last_offset, info.count) == (1000, 1006, 7)
    got = decode_records(info.buffer)
    assert [r.offset for r in got] == list(range(1000, 1007))
    assert [(r.key, r.value) for r in got] == [(k, v) for k, v, _ in recs(7)]
    if magic == 1:
        assert [r.timestamp for r in got] == [t for _, _, t in recs(7)]
        assert info.max_timestamp == recs(7)[-1][2]
    # A follower appends the leader's bytes unchanged and learns the same offsets.
    again = validate_and_assign(info.buffer, None, 0)
    assert (again.first_offset, again.last_offset, again.buffer) == (1000, 1006, info.buffer)


def test_uncompressed_offsets_are_rewritten_in_place() -> None:
    data = build_message_set(recs(3), magic=1)
    info = validate_and_assign(data, 42, 0)
    assert len(info.buffer) == len(data)
    assert [o for _, o, _ in scan_entries(info.buffer)] == [42, 43, 44]
    assert info.buffer[8:] [:4] == data[8:12]  # sizes (and so CRCs and bodies) untouched


def test_magic1_wrapper_keeps_relative_inner_offsets_without_recompressing() -> None:
    data = build_message_set(recs(5), magic=1, codec=compression.GZIP)
    info = validate_and_assign(data, 10, 0)
    assert info.buffer[8:] == data[8:]  # only the wrapper's offset changed
    assert [o for _, o, _ in scan_entries(info.buffer)] == [14]


def test_magic0_wrapper_gets_absolute_inner_offsets() -> None:
    data = build_message_set(recs(4), magic=0, codec=compression.SNAPPY)
    info = validate_and_assign(data, 100, 0)
    inner = compression.decompress(compression.SNAPPY, decode_wrapper_value(info.buffer))
    assert [o for _, o, _ in scan_entries(inner)] == [100, 101, 102, 103]


def decode_wrapper_value(buf: bytes) -> bytes:
    pos = 12 + 4 + 2  # entry header, crc, magic, attributes (magic 0: no timestamp)
    (klen,) = struct.unpack_from(">i", buf, pos)
    pos += 4 + max(klen, 0)
    (vlen,) = struct.unpack_from(">i", buf, pos)
    return buf[pos + 4:pos + 4 + vlen]


def test_bad_crc_is_corrupt_message() -> None:
    data = bytearray(build_message_set(recs(3), magic=1))
    data[-1] ^= 0xFF
    with pytest.raises(RecordsError) as e:
        validate_and_assign(data, 0, 0)
    assert e.value.error_code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("bad", [b"", b"\x00" * 11, b"\x00" * 12 + b"\xff\xff\xff\xff"])
def test_malformed_sets_are_corrupt(bad: bytes) -> None:
    with pytest.raises(RecordsError):
        validate_and_assign(bad, 0, 0)


def test_truncated_tail_is_tolerated_by_readers() -> None:
    data = build_message_set(recs(6), magic=1)
    cut = data[:-5]
    assert len(list(scan_entries(cut))) == 5
    assert len(decode_records(cut)) == 5
    with pytest.raises(RecordsError):
        validate_and_assign(cut, 0, 0)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_legacy_sets_validate(magic: int, codec: int) -> None:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i, (k, v, t) in enumerate(recs(9)):
        b.append(i, timestamp=t if magic else None, key=k, value=v)
    info = validate_and_assign(bytes(b.build()), 77, 0)
    got = decode_records(info.buffer)
    assert [(r.offset, r.key, r.value) for r in got] == [(77 + i, k, v) for i, (k, v, _) in enumerate(recs(9))]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_our_sets_read_by_kafka_python(magic: int, codec: int) -> None:
    info = validate_and_assign(build_message_set(recs(9), magic=magic, codec=codec), 300, 0)
    mr = MemoryRecords(info.buffer)
    got: list[tuple[int, bytes | None, bytes | None]] = []
    while (batch := mr.next_batch()) is not None:
        got.extend((r.offset, r.key, r.value) for r in batch)
    assert got == [(300 + i, k, v) for i, (k, v, _) in enumerate(recs(9))]


def test_magic0_lz4_with_kafka_3160_checksum_reads() -> None:
    frame = compression.compress(compression.LZ4, b"payload" * 50, magic=0)
    assert compression.decompress(compression.LZ4, frame) == b"payload" * 50
    assert compression.decompress(compression.LZ4, compression.compress(compression.LZ4, b"x", magic=1)) == b"x"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 1 << 40))
def test_fuzz_raises_only_records_errors(data: bytes, base: int) -> None:
    try:
        validate_and_assign(data, base, 0)
    except RecordsError:
        pass
    try:
        decode_records(data)
    except RecordsError:
        pass
    list(scan_entries(data))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 60), st.sampled_from(CODECS), st.sampled_from([0, 1]))
def test_fuzz_mutated_valid_sets(cut: int, codec: int, magic: int) -> None:
    data = bytearray(build_message_set(recs(3), magic=magic, codec=codec))
    data[min(cut, len(data) - 1)] ^= 0x5A
    try:
        validate_and_assign(data, 0, 0)
    except RecordsError:
        pass


@given(st.binary(max_size=64), st.integers(0, 0xFFFFFFFF))
def test_xxh32_matches_the_reference(data: bytes, seed: int) -> None:
    import xxhash

    assert compression.xxh32(data, seed) == xxhash.xxh32_intdigest(data, seed)


def test_shallow_validate_checks_top_level_crcs_and_trims_the_tail() -> None:
    plain = validate_and_assign(build_message_set(recs(4), magic=1), 10, 0).buffer
    wrapped = validate_and_assign(build_message_set(recs(3), magic=1, codec=compression.LZ4), 14, 0).buffer
    data = plain + wrapped
    assert shallow_validate(data) == (len(data), 16)
    assert shallow_validate(data[:-3]) == (len(plain), 13)
    assert shallow_validate(b"") == (0, -1)
    bad = bytearray(data)
    bad[len(plain) - 1] ^= 1
    with pytest.raises(RecordsError):
        shallow_validate(bad)


def _batch(n: int, codec: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (k, v, t) in enumerate(recs(n)):
        b.append(i, timestamp=t, key=k, value=v, headers=[])
    return bytes(b.build())


def test_front_reads_batches_and_messages_mixed_and_the_codecs_stay_apart() -> None:
    """records.decode_records reads magic 2 batches too; message_set alone knows magic 0/1 only."""
    from protocol.records import message_set

    batch = _batch(3)
    legacy = build_message_set(recs(2), magic=1, base_offset=3)
    got = decode_records(batch + legacy)
    assert [(r.offset, r.key, r.value) for r in got] == [(i, k, v) for i, (k, v, _) in enumerate(recs(3))] + [
        (3 + i, k, v) for i, (k, v, _) in enumerate(recs(2))]
    assert decode_records(batch[:-1]) == []  # a cut-off batch is a fetched tail
    assert message_set.decode_records(legacy) == decode_records(legacy)
    with pytest.raises(RecordsError):
        message_set.validate_and_assign(batch, 0, 0)


def _at(batch: bytes, base: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base)
    return bytes(out)


def test_follower_check_takes_batches_and_messages_mixed() -> None:
    """A log written before v2 (magic 1) continued with batches: the follower's check reads both."""
    legacy = validate_and_assign(build_message_set(recs(4), magic=1), 0, 0).buffer
    batch = _at(_batch(3), 4)
    data = legacy + batch + _at(_batch(2, compression.GZIP), 7)
    assert shallow_validate_any(data) == (len(data), 8)
    assert shallow_validate_any(data[:-1]) == (len(legacy) + len(batch), 6)
    bad = bytearray(data)
    bad[len(legacy) + 40] ^= 1  # inside the batch's CRC32C range
    with pytest.raises(RecordsError):
        shallow_validate_any(bad)
    backwards = legacy + _at(_batch(3), 2)
    with pytest.raises(RecordsError):
        shallow_validate_any(backwards)


@pytest.mark.parametrize("codec", CODECS)
def test_down_convert_gives_magic1_with_offsets_kept(codec: int) -> None:
    legacy = validate_and_assign(build_message_set(recs(2), magic=1), 0, 0).buffer
    data = legacy + _at(_batch(5, codec), 2)
    out = down_convert(data)
    assert {b for pos, _, _ in scan_entries(out) for b in [out[pos + 16]]} == {1}
    assert [(r.offset, r.key, r.value) for r in decode_records(out)] == [(r.offset, r.key, r.value)
                                                                          for r in decode_records(data)]
    assert down_convert(legacy) == legacy
    assert down_convert(data[:-1]) == legacy  # a cut-off batch is left out
    cut = _batch(5, codec)[:-1]
    assert down_convert(cut) == cut  # unless it is all there is: the client sees a partial entry
    kp = MemoryRecords(out)
    n = 0
    while (b := kp.next_batch()) is not None:
        n += len(list(b))
    assert n == 7


def test_no_codec_imports_the_other() -> None:
    import ast
    import pathlib

    import protocol.records

    root = pathlib.Path(protocol.records.__file__).parent
    for name, other in [("message_set", "record_batch"), ("record_batch", "message_set")]:
        tree = ast.parse((root / f"{name}.py").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not any(m and m.endswith(other) for m in imported), (name, imported)
