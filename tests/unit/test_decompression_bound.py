"""The streamed decompression bound (protocol.records.compression) and the message size limit
in validation: a bomb is stopped at its bound, oversize entries are refused before inflating."""

from __future__ import annotations

import gzip
import tracemalloc

import pytest

from protocol.errors import ErrorCode
from protocol.records import compression, record_batch
from protocol.records.errors import RecordsError
from protocol.records.message_set import build_message_set
from protocol.records.validator import ValidationConfig, validate

BOMB_INFLATED = 200 << 20


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY, compression.LZ4])
def test_round_trip_within_the_bound(codec: int) -> None:
    data = bytes(range(256)) * 4000
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed, len(data)) == data
    assert compression.decompress(codec, packed) == data


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY, compression.LZ4])
def test_one_byte_over_the_bound_is_message_too_large(codec: int) -> None:
    data = b"x" * 100_000
    packed = compression.compress(codec, data)
    with pytest.raises(RecordsError) as e:
        compression.decompress(codec, packed, len(data) - 1)
    assert e.value.error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_gzip_bomb_is_stopped_without_inflating_it() -> None:
    bomb = gzip.compress(bytes(BOMB_INFLATED), compresslevel=9)
    assert len(bomb) < 400_000
    tracemalloc.start()
    try:
        with pytest.raises(RecordsError) as e:
            compression.decompress(compression.GZIP, bomb, 8 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert peak < 32 << 20  # the bound plus a step or two, not the 200 MB the bomb holds


def test_concatenated_gzip_members_and_truncation() -> None:
    two = gzip.compress(b"abc") + gzip.compress(b"def")
    assert compression.decompress(compression.GZIP, two, 100) == b"abcdef"
    with pytest.raises(RecordsError) as e:
        compression.decompress(compression.GZIP, gzip.compress(b"abc" * 1000)[:-12], 1 << 20)
    assert e.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_inflated_limit_is_tied_to_the_message_limit() -> None:
    assert compression.inflated_limit(1048588) == 64 * 1048588
    assert compression.inflated_limit(1000) == compression.MIN_INFLATED_LIMIT


def test_entry_over_the_message_limit_is_refused_before_decompression() -> None:
    entry = build_message_set([(None, b"v" * 2000, 0)], magic=1, codec=compression.NONE)
    with pytest.raises(RecordsError) as e:
        validate(entry, 2, 0, ValidationConfig(len(entry) - 1))
    assert e.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert validate(entry, 2, 0, ValidationConfig(len(entry))).count == 1


def test_compressed_wrapper_bomb_in_a_message_set() -> None:
    # The wrapper is small, its inner set is not; the inflation bound stops it.
    wrapper = build_message_set([(None, bytes(80 << 20), 0)], magic=1, codec=compression.GZIP)
    assert len(wrapper) < 1 << 20
    with pytest.raises(RecordsError) as e:
        validate(wrapper, 2, 0, ValidationConfig(1 << 20))
    assert e.value.error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_record_batch_over_the_limit_is_refused_before_its_crc() -> None:
    header = record_batch.RECORD_BATCH_HEADER
    batch = bytearray(header.size + 100)
    header.pack_into(batch, 0, 0, len(batch) - 12, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1)
    with pytest.raises(RecordsError) as e:
        validate(bytes(batch), 9, 0, ValidationConfig(50))
    assert e.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
