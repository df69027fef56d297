"""bench.produce_load's pre-encoded requests: what the broker's own decoders and validator read
from them, and how a response is checked (the bench itself is never run or timed here)."""

from __future__ import annotations

import pytest

from bench.produce_load import IdempotentFrames, LoadError, check_response, produce_frame, record_batch
from protocol.api_keys import ApiKey
from protocol.fast import decode_produce_request
from protocol.headers import decode_request_header, encode_response_header
from protocol.layouts import FRAME_SIZE
from protocol.records.record_batch import parse_batch
from protocol.records.validator import ValidationConfig, validate
from protocol.schema import response_codec


def test_batch_holds_the_records_and_passes_the_leaders_validation() -> None:
    batch = record_batch(records=300, value_size=100, first_timestamp=1_000)
    parsed = parse_batch(memoryview(batch), 0, strict=True)
    assert parsed is not None
    records, end = parsed
    assert end == len(batch)
    assert [r[0] for r in records] == list(range(300))
    assert [r[1] for r in records] == [1_000 + i for i in range(300)]
    assert all(r[2] is None and r[3] == b"v" * 100 for r in records)
    validated = validate(batch, 7, 0, ValidationConfig(max_message_bytes=1 << 20))
    assert (validated.count, validated.producer_id, validated.max_timestamp) == (300, -1, 1_299)


@pytest.mark.parametrize("version", [3, 7, 9])
def test_frame_decodes_as_one_partitions_produce_request(version: int) -> None:
    batch = record_batch(records=10)
    frame = produce_frame("load-8", 5, batch, version=version, acks=1, timeout_ms=1234)
    (size,) = FRAME_SIZE.unpack_from(frame)
    assert size == len(frame) - FRAME_SIZE.size
    header, at = decode_request_header(memoryview(frame)[FRAME_SIZE.size:])
    assert (header.api_key, header.api_version, header.correlation_id) == (ApiKey.PRODUCE, version, 5)
    request = decode_produce_request(memoryview(frame)[FRAME_SIZE.size + at:], version)
    assert (request["acks"], request["timeout_ms"]) == (1, 1234)
    [topic] = request["topic_data"]
    [part] = topic["partition_data"]
    assert (topic["name"], part["index"], bytes(part["records"])) == ("load-8", 5, batch)


def _response(version: int, correlation_id: int, topic: str, partition: int, error_code: int,
              base_offset: int) -> bytes:
    body = {"responses": [{"name": topic, "partition_responses": [
        {"index": partition, "error_code": error_code, "base_offset": base_offset, "log_append_time_ms": -1,
         "log_start_offset": 0, "record_errors": [], "error_message": None}]}], "throttle_time_ms": 0}
    return encode_response_header(correlation_id, ApiKey.PRODUCE, version) \
        + response_codec(ApiKey.PRODUCE, version).encode(body)


@pytest.mark.parametrize("version", [7, 9])
def test_a_success_gives_its_base_offset(version: int) -> None:
    assert check_response(_response(version, 3, "t", 3, 0, 40_000), "t", 3, version) == 40_000


@pytest.mark.parametrize(("cid", "name", "partition", "code", "offset"), [
    (2, "t", 3, 0, 0),  # answers another request
    (3, "u", 3, 0, 0),  # another topic
    (3, "t", 4, 0, 0),  # another partition
    (3, "t", 3, 2, -1),  # CORRUPT_MESSAGE
    (3, "t", 3, 0, -1),  # no offset
])
def test_anything_else_fails_the_load(cid: int, name: str, partition: int, code: int, offset: int) -> None:
    with pytest.raises(LoadError):
        check_response(_response(7, cid, name, partition, code, offset), "t", 3, 7)


def test_idempotent_frames_carry_the_producer_and_advancing_sequences_with_a_valid_crc() -> None:
    batch = record_batch(records=10)
    frames = {p: produce_frame("t", p, batch, version=7) for p in range(2)}
    producer = IdempotentFrames(frames, len(batch), 10, producer_id=77, epoch=3)
    seen = []
    for partition in (0, 1, 0, 0):
        frame = producer.next(partition)
        header, at = decode_request_header(memoryview(frame)[FRAME_SIZE.size:])
        request = decode_produce_request(memoryview(frame)[FRAME_SIZE.size + at:], 7)
        [topic] = request["topic_data"]
        [part] = topic["partition_data"]
        assert part["index"] == partition
        # The leader's validation checks the CRC32C (CORRUPT_MESSAGE otherwise).
        validated = validate(bytes(part["records"]), 7, 0, ValidationConfig(max_message_bytes=1 << 20))
        assert (validated.producer_id, validated.producer_epoch, validated.count) == (77, 3, 10)
        seen.append((partition, validated.base_sequence))
    assert seen == [(0, 0), (1, 0), (0, 10), (0, 20)]
