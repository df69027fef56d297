"""Kafka 2.8's LogValidator cases against protocol.records.validator, with kafka-python's record
builders (kafka.record.default_records / legacy_records) as the independent implementation."""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol.errors import ErrorCode
from protocol.records import compression, record_batch
from protocol.records.errors import RecordsError
from protocol.records.message_set import build_message_set
from protocol.records.records import decode_records, shallow_validate
from protocol.records.validator import TARGET_CODECS, ValidationConfig, validate

NOW = 1_700_000_100_000
CONFIG = ValidationConfig(max_message_bytes=1 << 20)
CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


def recs(n: int) -> list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]]:
    return [(None if i % 5 == 0 else b"k%d" % i, b"value-%d" % i * (i % 4 + 1), NOW - 1000 + i,
             [(f"h{j}", f"hv{i * j}".encode()) for j in range(i % 3)]) for i in range(n)]


def kp_batch(n: int = 5, codec: int = 0, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             transactional: bool = False, records: list | None = None) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  base_sequence=base_sequence, batch_size=1 << 22)
    for i, (k, v, t, h) in enumerate(records if records is not None else recs(n)):
        b.append(i, timestamp=t, key=k, value=v, headers=h)
    return bytes(b.build())


def recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return buf


def rejects(data: bytes | bytearray, code: ErrorCode, version: int = 9, config: ValidationConfig = CONFIG,
            **kw: object) -> RecordsError:
    with pytest.raises(RecordsError) as e:
        validate(data, version, NOW, config, **kw)  # type: ignore[arg-type]
    assert e.value.error_code == code, str(e.value)
    return e.value


# ---- what is stored -----------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_batch_is_stored_as_sent_with_the_base_offset_written(codec: int) -> None:
    sent = kp_batch(20, codec, producer_id=7, producer_epoch=3, base_sequence=40)
    v = validate(sent, 9, NOW, CONFIG)
    assert (v.count, v.producer_id, v.producer_epoch, v.base_sequence, v.codec) == (20, 7, 3, 40, codec)
    assert v.log_append_time == -1 and v.max_timestamp == NOW - 1000 + 19
    assert bytes(v.buffer) == sent  # CreateTime with a correct max timestamp: not a byte changes
    assert v.assign_offsets(1000) == (1000, 1019)
    v.stamp_leader_epoch(12)
    assert struct.unpack_from(">qiib", v.buffer) == (1000, len(sent) - 12, 12, 2)
    assert bytes(v.buffer[16:]) == sent[16:]  # the leader epoch is outside the CRC, the rest is as sent
    assert shallow_validate(v.buffer) == (len(sent), 1019)
    # kafka-python reads it back: offsets, keys, values, timestamps and headers byte for byte
    got = MemoryRecords(bytes(v.buffer)).next_batch()
    assert got.base_offset == 1000 and got.producer_id == 7 and got.base_sequence == 40
    assert [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in got] == [
        (1000 + i, k, val, t, h) for i, (k, val, t, h) in enumerate(recs(20))]


def test_build_batch_matches_kafka_python_byte_for_byte() -> None:
    for codec in (compression.NONE, compression.GZIP):
        ours = record_batch.build_batch([(t, k, v, h) for k, v, t, h in recs(9)], codec=codec,
                                        producer_id=5, producer_epoch=1, base_sequence=9,
                                        partition_leader_epoch=0)  # kafka-python writes 0 there
        theirs = kp_batch(9, codec, producer_id=5, producer_epoch=1, base_sequence=9)
        if codec == compression.NONE:
            assert ours == theirs
        else:  # compressed bytes differ by library; the records inside must not
            assert decode_records(ours) == decode_records(theirs)


def test_wrong_max_timestamp_is_corrected_and_crc_recomputed() -> None:
    sent = bytearray(kp_batch(4))
    struct.pack_into(">q", sent, 35, 5)
    v = validate(recrc(sent), 9, NOW, CONFIG)
    assert struct.unpack_from(">q", v.buffer, 35)[0] == NOW - 1000 + 3
    assert shallow_validate(v.buffer)[0] == len(sent)


def test_in_place_numbers_the_senders_own_buffer_and_copies_read_only_or_rewritten_input() -> None:
    # The broker passes a slice of the request frame it owns (in_place=True): no copy of the batch.
    frame = bytearray(b"head" + kp_batch(4))
    data = memoryview(frame)[4:]
    struct.pack_into(">q", data, 35, 5)  # a wrong max timestamp: corrected in the frame itself
    recrc(data)  # type: ignore[arg-type]
    v = validate(data, 9, NOW, CONFIG, in_place=True)
    v.assign_offsets(700)
    v.stamp_leader_epoch(3)
    assert isinstance(v.buffer, memoryview) and v.buffer.obj is frame
    assert struct.unpack_from(">q", frame, 4)[0] == 700  # base offset
    assert struct.unpack_from(">i", frame, 4 + 12)[0] == 3  # partition leader epoch
    assert struct.unpack_from(">q", frame, 4 + 35)[0] == NOW - 1000 + 3
    assert shallow_validate(bytes(frame[4:]))[0] == len(data)
    # Read-only input, the default, and a batch the topic recompresses are copied: the caller's bytes stay.
    sent = kp_batch(4)
    assert validate(sent, 9, NOW, CONFIG, in_place=True).buffer is not sent
    held = bytearray(sent)
    validate(held, 9, NOW, CONFIG).assign_offsets(9)
    assert held == sent
    recompressed = validate(held, 9, NOW, ValidationConfig(1 << 20, compression_type="gzip"), in_place=True)
    recompressed.assign_offsets(9)
    assert held == sent


def test_in_place_leaves_a_refused_batch_as_sent() -> None:
    sent = bytearray(kp_batch(4))
    struct.pack_into(">q", sent, 35, 5)
    recrc(sent)
    struct.pack_into(">i", sent, 61 + 3, 1 << 20)  # a record's bytes changed after the CRC: ...
    before = bytes(recrc(sent))  # ... a valid CRC over malformed records
    rejects(sent, ErrorCode.INVALID_RECORD, in_place=True)
    assert sent == before


def test_log_append_time_rewrites_max_timestamp_attributes_and_crc() -> None:
    sent = kp_batch(4)
    v = validate(sent, 9, NOW, ValidationConfig(1 << 20, timestamp_type=record_batch.LOG_APPEND_TIME))
    assert v.log_append_time == NOW and v.max_timestamp == NOW
    attributes, = struct.unpack_from(">h", v.buffer, 21)
    assert attributes & record_batch.TIMESTAMP_TYPE_BIT
    assert struct.unpack_from(">q", v.buffer, 35)[0] == NOW
    assert shallow_validate(v.buffer)[0] == len(sent)  # CRC32C valid again
    assert bytes(v.buffer[61:]) == sent[61:]  # records untouched
    got = MemoryRecords(bytes(v.buffer)).next_batch()
    assert [r.timestamp for r in got] == [NOW] * 4  # readers see the append time
    assert [r.timestamp for r in decode_records(v.buffer)] == [NOW] * 4


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS[:4])
def test_v0_v1_input_is_up_converted(magic: int, codec: int) -> None:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i, (k, v, t, _) in enumerate(recs(7)):
        b.append(i, timestamp=t, key=k, value=v)
    v = validate(bytes(b.build()), 2, NOW, CONFIG)
    assert v.converted and v.count == 7 and v.codec == codec and v.buffer[16] == 2
    v.assign_offsets(50)
    got = decode_records(v.buffer)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
        (50 + i, k, val, t if magic == 1 else -1) for i, (k, val, t, _) in enumerate(recs(7))]
    assert shallow_validate(v.buffer) == (len(v.buffer), 56)


def test_our_legacy_sets_up_convert() -> None:
    v = validate(build_message_set([(b"k", b"v", NOW)] * 3, magic=1), 0, NOW, CONFIG)
    assert v.count == 3 and v.max_timestamp == NOW


# ---- Kafka's rejections -------------------------------------------------------------------------

def test_bad_crc_is_corrupt_message() -> None:
    bad = bytearray(kp_batch(3))
    bad[-1] ^= 1
    rejects(bad, ErrorCode.CORRUPT_MESSAGE)


def test_batch_length_beyond_the_bytes_or_below_the_header() -> None:
    sent = kp_batch(3)
    rejects(sent[:-1], ErrorCode.INVALID_RECORD)  # v3+: no complete batch
    rejects(sent[:-1], ErrorCode.CORRUPT_MESSAGE, version=2)
    short = bytearray(sent)
    struct.pack_into(">i", short, 8, 30)
    rejects(short, ErrorCode.CORRUPT_MESSAGE)


def test_wrong_record_count() -> None:
    for count in (2, 4):
        bad = bytearray(kp_batch(3))
        struct.pack_into(">i", bad, 57, count)
        rejects(recrc(bad), ErrorCode.INVALID_RECORD)
    bad = bytearray(kp_batch(3))
    struct.pack_into(">i", bad, 57, 0)
    struct.pack_into(">i", bad, 23, -1)
    rejects(recrc(bad), ErrorCode.INVALID_RECORD)


def test_count_and_delta_agree_but_records_do_not() -> None:
    bad = bytearray(kp_batch(3))
    struct.pack_into(">i", bad, 57, 4)
    struct.pack_into(">i", bad, 23, 3)
    rejects(recrc(bad), ErrorCode.INVALID_RECORD)  # the fourth record is not there


@pytest.mark.parametrize("delta", [-1, -(1 << 31), (1 << 31) - 1])
def test_negative_or_overflowing_last_offset_delta(delta: int) -> None:
    bad = bytearray(kp_batch(3))
    struct.pack_into(">i", bad, 23, delta)
    rejects(recrc(bad), ErrorCode.INVALID_RECORD)


def test_record_offset_deltas_must_be_the_record_index() -> None:
    body = b"".join(record_batch.encode_record(d, 0, b"k", b"v") for d in (0, 2, 1))
    batch = bytearray(record_batch.build_batch([(NOW, b"k", b"v", ())] * 3))
    batch[61:] = body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    e = rejects(recrc(batch), ErrorCode.INVALID_RECORD)
    assert [i for i, _ in e.record_errors] == [1, 2]


def test_too_large_is_message_too_large_before_anything_else() -> None:
    sent = bytearray(kp_batch(50))
    sent[-1] ^= 1  # a bad CRC too: size is checked first, as Kafka does
    rejects(sent, ErrorCode.MESSAGE_TOO_LARGE, config=ValidationConfig(max_message_bytes=len(sent) - 1))
    validate(kp_batch(50), 9, NOW, ValidationConfig(max_message_bytes=len(sent)))


@pytest.mark.parametrize("codec", [compression.GZIP, compression.LZ4, compression.ZSTD])  # snappy: ~21x at most
def test_compression_bomb_is_refused_without_inflating_it_all(codec: int) -> None:
    big = [(NOW, b"k", b"\0" * (1 << 20), ())] * 80
    bomb = record_batch.build_batch(big, codec=codec)
    assert len(bomb) < 1 << 20
    rejects(bomb, ErrorCode.MESSAGE_TOO_LARGE, config=ValidationConfig(max_message_bytes=1 << 20))


def test_truncated_zstd_frame_is_invalid_record() -> None:
    sent = bytearray(kp_batch(30, compression.ZSTD))
    cut = sent[:-8]
    struct.pack_into(">i", cut, 8, len(cut) - 12)
    rejects(recrc(cut), ErrorCode.INVALID_RECORD)


def test_transactional_batch_gets_a_clear_error() -> None:
    txn = kp_batch(2, producer_id=3, producer_epoch=0, base_sequence=0, transactional=True)
    rejects(txn, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    rejects(txn, ErrorCode.INVALID_TXN_STATE, transactional_id="tx")


def test_control_batch_from_a_client_is_invalid_record() -> None:
    bad = bytearray(kp_batch(1))
    struct.pack_into(">h", bad, 21, record_batch.CONTROL_BIT)
    rejects(recrc(bad), ErrorCode.INVALID_RECORD)


def test_producer_id_without_a_sequence() -> None:
    rejects(kp_batch(2, producer_id=3, producer_epoch=0, base_sequence=-1), ErrorCode.INVALID_RECORD)


def test_base_offset_must_be_zero() -> None:
    bad = bytearray(kp_batch(2))
    struct.pack_into(">q", bad, 0, 5)
    rejects(bad, ErrorCode.INVALID_RECORD)


def test_more_than_one_batch_and_v3_magic_rules() -> None:
    one = kp_batch(2)
    rejects(one + one, ErrorCode.INVALID_RECORD)
    rejects(one + one, ErrorCode.INVALID_RECORD, version=2)
    rejects(build_message_set([(b"k", b"v", NOW)], magic=1), ErrorCode.INVALID_RECORD, version=3)
    rejects(b"", ErrorCode.INVALID_RECORD, version=3)


@pytest.mark.parametrize("tail", range(1, 17))
def test_a_short_tail_after_the_batch_is_corrupt_not_an_index_error(tail: int) -> None:
    # A fuzzed Produce: 13-16 bytes after the batch made the magic check read past the buffer.
    rejects(kp_batch(2) + b"\x02" * tail, ErrorCode.CORRUPT_MESSAGE, version=2)


def test_zstd_needs_produce_v7() -> None:
    bad = bytearray(kp_batch(1))
    struct.pack_into(">h", bad, 21, compression.ZSTD)
    rejects(recrc(bad), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, version=6)


def test_timestamp_out_of_range_lists_the_records() -> None:
    records = [(b"k", b"v", NOW, []), (b"k", b"v", NOW - 10_000, []), (b"k", b"v", NOW + 5, []),
               (b"k", b"v", NOW + 10_000, [])]
    cfg = ValidationConfig(1 << 20, timestamp_difference_max_ms=1000)
    e = rejects(kp_batch(records=records), ErrorCode.INVALID_TIMESTAMP, config=cfg)
    assert [i for i, _ in e.record_errors] == [1, 3]
    # LogAppendTime topics do not judge timestamps
    validate(kp_batch(records=records), 9, NOW, ValidationConfig(1 << 20, record_batch.LOG_APPEND_TIME, 1000))
    b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    b.append(0, timestamp=NOW - 10_000, key=None, value=b"v")
    rejects(bytes(b.build()), ErrorCode.INVALID_TIMESTAMP, version=2, config=cfg)


def test_producer_may_not_say_log_append_time() -> None:
    bad = bytearray(kp_batch(2))
    struct.pack_into(">h", bad, 21, record_batch.TIMESTAMP_TYPE_BIT)
    e = rejects(recrc(bad), ErrorCode.INVALID_TIMESTAMP)
    assert [i for i, _ in e.record_errors] == [0, 1]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 400), st.integers(0, 255), st.sampled_from(CODECS), st.integers(0, 9))
def test_mutated_batches_raise_only_records_errors(pos: int, xor: int, codec: int, version: int) -> None:
    sent = bytearray(kp_batch(6, codec))
    pos %= len(sent)
    sent[pos] ^= xor or 1
    for data in (sent, recrc(bytearray(sent)) if pos >= 21 else sent, sent[:pos]):
        try:
            v = validate(data, version, NOW, CONFIG)
        except RecordsError:
            continue
        v.assign_offsets(10)
        assert shallow_validate(v.buffer) == (len(v.buffer), 10 + v.count - 1)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 9))
def test_fuzz_raises_only_records_errors(data: bytes, version: int) -> None:
    try:
        validate(data, version, NOW, CONFIG)
    except RecordsError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.binary(max_size=300)),
                          st.integers(0, 1 << 45)), min_size=1, max_size=40), st.sampled_from([0, 1]),
       st.sampled_from(CODECS[:4]))
def test_up_conversion_keeps_every_message(msgs: list, magic: int, codec: int) -> None:
    v = validate(build_message_set(msgs, magic=magic, codec=codec), 2, NOW, CONFIG)
    v.assign_offsets(7)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(v.buffer)] == [
        (7 + i, k, val, t if magic == 1 else -1) for i, (k, val, t) in enumerate(msgs)]
    assert shallow_validate(v.buffer) == (len(v.buffer), 7 + len(msgs) - 1)


def test_legacy_rejections() -> None:
    one = build_message_set([(b"k", b"v" * 100, NOW)], magic=1)
    bad = bytearray(one)
    bad[-1] ^= 1
    rejects(bad, ErrorCode.CORRUPT_MESSAGE, version=2)
    rejects(one + build_message_set([(b"k", b"v", NOW)], magic=0), ErrorCode.INVALID_RECORD, version=2)
    rejects(one, ErrorCode.MESSAGE_TOO_LARGE, version=2, config=ValidationConfig(len(one) - 1))
    lat = bytearray(build_message_set([(b"k", b"v", NOW)] * 2, magic=1))
    lat[17] |= record_batch.TIMESTAMP_TYPE_BIT  # the first message says LogAppendTime
    struct.pack_into(">I", lat, 12, zlib.crc32(bytes(lat[16:lat.index(b"v") + 1])))
    rejects(lat, ErrorCode.INVALID_TIMESTAMP, version=2)
    short = bytearray(one)
    struct.pack_into(">i", short, 8, 10)
    rejects(short, ErrorCode.CORRUPT_MESSAGE, version=2)


@pytest.mark.parametrize("target", ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("codec", [compression.NONE, compression.LZ4])
def test_topic_compression_type_recompresses_keeping_the_batch_fields(target: str, codec: int) -> None:
    sent = kp_batch(12, codec, producer_id=4, producer_epoch=2, base_sequence=8)
    v = validate(sent, 9, NOW, ValidationConfig(1 << 20, compression_type=target))
    want = codec if target == "producer" else TARGET_CODECS[target]
    assert v.codec == want and struct.unpack_from(">h", v.buffer, 21)[0] & 7 == want
    if want == codec:
        assert bytes(v.buffer) == sent
    got = MemoryRecords(bytes(v.buffer)).next_batch()
    assert (got.producer_id, got.producer_epoch, got.base_sequence) == (4, 2, 8)
    assert [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in got] == [
        (i, k, val, t, h) for i, (k, val, t, h) in enumerate(recs(12))]
    assert shallow_validate(v.buffer)[0] == len(v.buffer)
    legacy = validate(build_message_set([(b"k", b"v", NOW)] * 3, magic=1), 2, NOW,
                      ValidationConfig(1 << 20, compression_type=target))
    assert legacy.codec == (compression.NONE if target == "producer" else TARGET_CODECS[target])
    assert [r.value for r in decode_records(legacy.buffer)] == [b"v"] * 3


# ---- compacted topics: every record needs a key (Kafka 2.8's validateKey) ----------------------

COMPACTED = ValidationConfig(max_message_bytes=1 << 20, compacted=True)


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP])
def test_a_compacted_topic_refuses_records_without_a_key(codec: int) -> None:
    data = kp_batch(10, codec)  # records 0 and 5 have no key
    err = rejects(data, ErrorCode.INVALID_RECORD, config=COMPACTED)
    assert [i for i, _ in err.record_errors] == [0, 5]
    assert all("without key" in text for _, text in err.record_errors)
    keyed = kp_batch(records=[(b"k%d" % i, b"v", NOW, []) for i in range(3)], codec=codec)
    assert validate(keyed, 9, NOW, COMPACTED).count == 3
    assert validate(data, 9, NOW, CONFIG).count == 10  # not compacted: keys are optional


@pytest.mark.parametrize("magic", [0, 1])
def test_a_compacted_topic_refuses_keyless_old_format_messages(magic: int) -> None:
    data = build_message_set([(b"k", b"v", NOW), (None, b"v", NOW)], magic=magic)
    err = rejects(data, ErrorCode.INVALID_RECORD, version=2, config=COMPACTED)
    assert [i for i, _ in err.record_errors] == [1]
    gz = build_message_set([(None, b"v", NOW), (b"k", b"v", NOW)], magic=magic, codec=compression.GZIP)
    assert [i for i, _ in rejects(gz, ErrorCode.INVALID_RECORD, version=2, config=COMPACTED).record_errors] == [0]
