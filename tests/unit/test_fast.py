"""The data-path struct codecs agree with the declared schemas and with kafka-python, and fail cleanly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.old.fetch import FetchRequest, FetchResponse
from kafka.protocol.old.produce import ProduceRequest

from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.fast import decode_fetch_request, decode_produce_request, encode_fetch_response
from protocol.schema import request_codec, response_codec

names = st.text(alphabet="abcdefgh._-", min_size=1, max_size=10)
produce_bodies = st.fixed_dictionaries({
    "acks": st.sampled_from([0, 1, -1]), "timeout_ms": st.integers(0, 1 << 30),
    "topic_data": st.lists(st.fixed_dictionaries({"name": names, "partition_data": st.lists(st.fixed_dictionaries(
        {"index": st.integers(0, 100), "records": st.one_of(st.none(), st.binary(max_size=50))}), max_size=3)}),
        max_size=3)})
fetch_bodies = st.fixed_dictionaries({
    "replica_id": st.integers(-2, 5), "max_wait_ms": st.integers(0, 1000), "min_bytes": st.integers(0, 1 << 20),
    "max_bytes": st.integers(0, 0x7FFFFFFF),
    "topics": st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(st.fixed_dictionaries(
        {"partition": st.integers(0, 100), "fetch_offset": st.integers(-2, 1 << 40),
         "partition_max_bytes": st.integers(0, 1 << 24)}), max_size=3)}), max_size=3)})


@pytest.mark.parametrize("version", range(10))
def test_produce_decoder_agrees_with_the_schema(version: int) -> None:
    @settings(max_examples=60, deadline=None)
    @given(produce_bodies, st.one_of(st.none(), names))
    def check(body: dict, transactional_id: str | None) -> None:
        if version >= 3:
            body = {"transactional_id": transactional_id, **body}
        raw = request_codec(ApiKey.PRODUCE, version).encode(body)
        got = decode_produce_request(raw, version)
        for t in got["topic_data"]:
            for p in t["partition_data"]:
                if p["records"] is not None:
                    p["records"] = bytes(p["records"])
        assert got == {"transactional_id": None, **body}
    check()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_request_decoder_agrees_with_the_schema(version: int) -> None:
    @settings(max_examples=60, deadline=None)
    @given(fetch_bodies)
    def check(body: dict) -> None:
        raw = request_codec(ApiKey.FETCH, version).encode(body)
        got = decode_fetch_request(raw, version)
        expected = dict(body)
        if version < 3:
            expected["max_bytes"] = 0x7FFFFFFF
        assert got == expected
    check()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_response_encoder_agrees_with_the_schema(version: int) -> None:
    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(st.fixed_dictionaries({
        "partition_index": st.integers(0, 50), "error_code": st.integers(-1, 80),
        "high_watermark": st.integers(-1, 1 << 50), "records": st.binary(max_size=6000)}), max_size=3)}),
        max_size=3), st.integers(0, 1000))
    def check(responses: list, throttle: int) -> None:
        raw = b"".join(encode_fetch_response(version, throttle, responses))
        expected = {"responses": responses}
        if version >= 1:
            expected["throttle_time_ms"] = throttle
        assert response_codec(ApiKey.FETCH, version).decode(raw) == expected
    check()


def test_golden_against_kafka_python() -> None:
    raw = ProduceRequest[2](required_acks=-1, timeout=1500, topics=[("t", [(3, b"RECORDS")])]).encode()
    got = decode_produce_request(raw, 2)
    assert got["acks"] == -1 and got["timeout_ms"] == 1500
    assert bytes(got["topic_data"][0]["partition_data"][0]["records"]) == b"RECORDS"
    raw = FetchRequest[3](replica_id=1, max_wait_time=500, min_bytes=1, max_bytes=10 << 20,
                          topics=[("t", [(0, 123, 1 << 20), (1, 9, 5)])]).encode()
    assert decode_fetch_request(raw, 3) == {
        "replica_id": 1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 10 << 20,
        "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "fetch_offset": 123, "partition_max_bytes": 1 << 20},
            {"partition": 1, "fetch_offset": 9, "partition_max_bytes": 5}]}]}
    body = b"".join(encode_fetch_response(3, 7, [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 99, "records": b"x" * 5000}]}]))
    kp = FetchResponse[3].decode(body).to_object()
    assert kp["throttle_time_ms"] == 7
    part = kp["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 99 and part["records"] == b"x" * 5000


@pytest.mark.parametrize("version", [0, 2, 3, 9])
def test_truncated_produce_is_a_protocol_error(version: int) -> None:
    raw = request_codec(ApiKey.PRODUCE, version).encode({"acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "topic", "partition_data": [{"index": 0, "records": b"abcdef"}]}]})
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            decode_produce_request(raw[:cut], version)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100), st.integers(0, 9))
def test_fuzz_raises_only_protocol_errors(data: bytes, version: int) -> None:
    for fn in (decode_fetch_request, decode_produce_request):
        try:
            fn(data, version if fn is decode_produce_request else min(version, 3))
        except ProtocolError:
            pass


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_response_decoder_agrees_with_the_schema(version: int) -> None:
    from protocol.fast import decode_fetch_response

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(st.fixed_dictionaries({
        "partition_index": st.integers(0, 50), "error_code": st.integers(-1, 80),
        "high_watermark": st.integers(-1, 1 << 50), "records": st.one_of(st.none(), st.binary(max_size=300))}),
        max_size=3)}), max_size=3))
    def check(responses: list) -> None:
        body = {"responses": responses, "throttle_time_ms": 5}
        raw = response_codec(ApiKey.FETCH, version).encode(body)
        got = decode_fetch_response(raw, version)
        for t in got["responses"]:
            for p in t["partitions"]:
                if p["records"] is not None:
                    p["records"] = bytes(p["records"])
        assert got == response_codec(ApiKey.FETCH, version).decode(raw)
        for cut in range(0, len(raw) - 1, 7):
            try:
                decode_fetch_response(raw[:cut], version)
            except ProtocolError:
                pass
    check()
