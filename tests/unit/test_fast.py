"""The data-path struct codecs agree with the declared schemas and with kafka-python, and fail cleanly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.old.fetch import FetchRequest, FetchResponse
from kafka.protocol.old.produce import ProduceRequest

from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.fast import (
    decode_fetch_request,
    decode_produce_request,
    encode_fetch_response,
    encode_produce_response,
)
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


messages = st.one_of(st.none(), st.text(max_size=20))
produce_responses = st.fixed_dictionaries({
    "responses": st.lists(st.fixed_dictionaries({"name": names, "partition_responses": st.lists(st.fixed_dictionaries(
        {"index": st.integers(0, 100), "error_code": st.integers(-1, 100), "base_offset": st.integers(-1, 1 << 40)},
        optional={"log_append_time_ms": st.integers(-1, 1 << 42), "log_start_offset": st.integers(-1, 1 << 40),
                  "record_errors": st.one_of(st.none(), st.lists(st.fixed_dictionaries(
                      {"batch_index": st.integers(0, 1000)},
                      optional={"batch_index_error_message": messages}), max_size=2)),
                  "error_message": messages}), max_size=3)}), max_size=3)},
    optional={"throttle_time_ms": st.integers(0, 1 << 20)})


@pytest.mark.parametrize("version", range(10))
def test_produce_response_encoder_agrees_with_the_schema(version: int) -> None:
    """Byte for byte what the schema codec writes, missing fields taking its defaults."""
    @settings(max_examples=80, deadline=None)
    @given(produce_responses)
    def check(body: dict) -> None:
        assert encode_produce_response(version, body) == response_codec(ApiKey.PRODUCE, version).encode(body)
    check()


def test_produce_response_encoder_refuses_versions_it_does_not_serve() -> None:
    with pytest.raises(ProtocolError):
        encode_produce_response(10, {"responses": []})


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


def test_golden_against_kafka_python() -> None:
    raw = ProduceRequest[2](required_acks=-1, timeout=1500, topics=[("t", [(3, b"RECORDS")])]).encode()
    got = decode_produce_request(raw, 2)
    assert got["acks"] == -1 and got["timeout_ms"] == 1500
    assert bytes(got["topic_data"][0]["partition_data"][0]["records"]) == b"RECORDS"
    raw = FetchRequest[3](replica_id=1, max_wait_time=500, min_bytes=1, max_bytes=10 << 20,
                          topics=[("t", [(0, 123, 1 << 20), (1, 9, 5)])]).encode()
    assert decode_fetch_request(raw, 3) == {
        "replica_id": 1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 10 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 123, "partition_max_bytes": 1 << 20},
            {"partition": 1, "current_leader_epoch": -1, "fetch_offset": 9, "partition_max_bytes": 5}]}]}
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
