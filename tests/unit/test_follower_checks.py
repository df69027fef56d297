"""A follower's one-pass checks (protocol.records.records.shallow_validate) on what its leader
stores: RecordBatch v2 as Kafka writes it (kafka-python's builder), magic 0/1, and both mixed."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.records import compression
from protocol.records.errors import RecordsError
from protocol.records.message_set import build_message_set
from protocol.records.records import shallow_validate

T0 = 1_700_000_000_000


def v2_batch(base: int, n: int, codec: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=T0 + i, key=b"k%d" % i, value=b"v" * i, headers=[("h", b"x")])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, base)  # outside the CRC, as the leader's offset assignment writes it
    return bytes(data)


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP, compression.LZ4])
def test_batches_end_at_base_plus_last_offset_delta(codec: int) -> None:
    data = v2_batch(0, 5, codec) + v2_batch(5, 3, codec) + v2_batch(8, 1, codec)
    assert shallow_validate(data) == (len(data), 8)


def test_a_cut_off_batch_is_left_for_the_next_fetch() -> None:
    whole = v2_batch(10, 4) + v2_batch(14, 4)
    nxt = v2_batch(18, 4)
    for cut in (1, 20, 60, len(nxt) - 1):
        assert shallow_validate(whole + nxt[:cut]) == (len(whole), 17)
    assert shallow_validate(nxt[:30]) == (0, -1)


def test_old_messages_then_batches_as_a_log_written_before_and_after_the_format_change() -> None:
    old = build_message_set([(b"k", b"v", T0), (None, b"w", T0 + 1)], magic=1, base_offset=0)
    wrapped = build_message_set([(b"k", b"v", T0)] * 3, magic=1, codec=compression.GZIP, base_offset=2)
    data = old + wrapped + v2_batch(5, 2) + v2_batch(7, 2)
    assert shallow_validate(data) == (len(data), 8)
    tail = build_message_set([(b"k", b"v", T0)], magic=1, base_offset=9)
    assert shallow_validate(data + tail) == (len(data) + len(tail), 9)
    assert shallow_validate(data + tail[:-3]) == (len(data), 8)


def test_a_bad_crc32c_is_refused() -> None:
    data = bytearray(v2_batch(0, 3) + v2_batch(3, 3))
    data[-2] ^= 0x40
    with pytest.raises(RecordsError):
        shallow_validate(bytes(data))


@pytest.mark.parametrize("base", [2, 4])
def test_offsets_must_increase_across_batches_and_formats(base: int) -> None:
    with pytest.raises(RecordsError):
        shallow_validate(v2_batch(0, 5) + v2_batch(base, 2))
    old = build_message_set([(b"k", b"v", T0)] * 6, magic=1, base_offset=0)
    with pytest.raises(RecordsError):
        shallow_validate(old + v2_batch(base, 2))


def test_impossible_lengths_and_deltas_are_refused() -> None:
    short = bytearray(v2_batch(0, 1))
    struct.pack_into(">i", short, 8, 10)  # below the batch header
    with pytest.raises(RecordsError):
        shallow_validate(bytes(short))
    negative = bytearray(v2_batch(0, 1))
    struct.pack_into(">i", negative, 23, -1)  # lastOffsetDelta (outside nothing: the CRC catches it too)
    with pytest.raises(RecordsError):
        shallow_validate(bytes(negative))
