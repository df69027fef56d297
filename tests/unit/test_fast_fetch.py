"""The Fetch v0-12 struct codecs (protocol.fast) agree with the declared schema (Kafka's JSON)
and with kafka-python's own Fetch classes, and fail only with ProtocolError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchRequest as JsonFetchRequest
from kafka.protocol.consumer.fetch import FetchResponse as JsonFetchResponse
from kafka.protocol.old.fetch import FetchRequest, FetchResponse

from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.fast import (
    decode_fetch_request,
    decode_fetch_response,
    decode_fetch_response_v3_partitions,
    encode_fetch_request_v3,
    encode_fetch_response,
)
from protocol.schema import request_codec, response_codec

VERSIONS = range(13)
names = st.text(alphabet="abcdefgh._-", min_size=1, max_size=10)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)

fetch_bodies = st.fixed_dictionaries({
    "replica_id": st.integers(-2, 5), "max_wait_ms": st.integers(0, 1000), "min_bytes": st.integers(0, 1 << 20),
    "max_bytes": st.integers(0, 0x7FFFFFFF), "isolation_level": st.integers(0, 1),
    "session_id": int32, "session_epoch": int32,
    "topics": st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(st.fixed_dictionaries(
        {"partition": st.integers(0, 100), "current_leader_epoch": st.integers(-1, 1000),
         "fetch_offset": st.integers(-2, 1 << 40), "partition_max_bytes": st.integers(0, 1 << 24)}),
        max_size=3)}), max_size=3),
    "forgotten_topics_data": st.lists(st.fixed_dictionaries(
        {"topic": names, "partitions": st.lists(st.integers(0, 100), max_size=3)}), max_size=2),
    "rack_id": st.text(max_size=5)})

partitions = st.fixed_dictionaries({
    "partition_index": st.integers(0, 50), "error_code": st.integers(-1, 80),
    "high_watermark": st.integers(-1, 1 << 50), "last_stable_offset": st.integers(-1, 1 << 50),
    "log_start_offset": st.integers(-1, 1 << 50),
    "aborted_transactions": st.one_of(st.none(), st.lists(st.fixed_dictionaries(
        {"producer_id": st.integers(0, 1 << 40), "first_offset": st.integers(0, 1 << 40)}), max_size=2)),
    "preferred_read_replica": st.integers(-1, 5),
    "records": st.one_of(st.none(), st.binary(max_size=40), st.just(b"x" * 5000))})
responses = st.lists(st.fixed_dictionaries({"topic": names, "partitions": st.lists(partitions, max_size=3)}),
                     max_size=3)


def _in_version(body: dict[str, Any], version: int, request: bool) -> dict[str, Any]:
    """The body as the schema codec at this version reads it back (fields it lacks dropped)."""
    codec = request_codec(ApiKey.FETCH, version) if request else response_codec(ApiKey.FETCH, version)
    return codec.decode(codec.encode(body))


def _as_bytes(resp: dict[str, Any]) -> dict[str, Any]:
    for t in resp["responses"]:
        for p in t["partitions"]:
            if p["records"] is not None:
                p["records"] = bytes(p["records"])
    return resp


@pytest.mark.parametrize("version", VERSIONS)
def test_request_decoder_agrees_with_the_schema(version: int) -> None:
    @settings(max_examples=40, deadline=None)
    @given(fetch_bodies)
    def check(body: dict[str, Any]) -> None:
        raw = request_codec(ApiKey.FETCH, version).encode(body)
        got = decode_fetch_request(raw, version)
        expected = _in_version(body, version, True)
        expected.pop("cluster_id", None)  # a KRaft tag, skipped
        for t in expected["topics"]:
            for p in t["partitions"]:
                p.pop("log_start_offset", None)  # a follower's field, unused
                p.pop("last_fetched_epoch", None)
                p.setdefault("current_leader_epoch", -1)
        # What a version lacks is Kafka's default.
        defaults = {"max_bytes": 0x7FFFFFFF, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "forgotten_topics_data": [], "rack_id": ""}
        assert got == {**defaults, **expected}
        for cut in range(0, len(raw), 5):
            with pytest.raises(ProtocolError):
                decode_fetch_request(raw[:cut], version)
    check()


@settings(max_examples=100, deadline=None)
@given(fetch_bodies)
def test_replica_fetchers_v3_request_encoder_writes_the_schemas_bytes(body: dict[str, Any]) -> None:
    body = _in_version(body, 3, True)
    raw = encode_fetch_request_v3(body)
    assert raw == request_codec(ApiKey.FETCH, 3).encode(body)
    assert decode_fetch_request(raw, 3)["topics"] == [
        {"topic": t["topic"], "partitions": [{**p, "current_leader_epoch": -1} for p in t["partitions"]]}
        for t in body["topics"]]


@pytest.mark.parametrize("version", VERSIONS)
def test_response_encoder_and_decoder_agree_with_the_schema(version: int) -> None:
    @settings(max_examples=40, deadline=None)
    @given(responses, st.integers(0, 1000), st.integers(0, 80), int32)
    def check(resp: list[dict[str, Any]], throttle: int, error: int, session: int) -> None:
        raw = b"".join(encode_fetch_response(version, throttle, resp, error, session))
        body = {"responses": resp, "throttle_time_ms": throttle, "error_code": error, "session_id": session}
        expected = _in_version(body, version, False)
        assert response_codec(ApiKey.FETCH, version).decode(raw) == expected
        got = _as_bytes(decode_fetch_response(raw, version))
        for t in expected["responses"]:
            for p in t["partitions"]:
                for tag in ("diverging_epoch", "current_leader", "snapshot_id"):
                    p.pop(tag, None)
        assert got == expected
        for cut in range(0, len(raw) - 1, 11):
            try:
                decode_fetch_response(raw[:cut], version)
            except ProtocolError:
                pass
    check()


@settings(max_examples=200, deadline=None)
@given(responses, st.integers(0, 1000))
def test_replica_fetchers_v3_partitions_decoder_reads_what_the_schema_reads(resp: list[dict[str, Any]],
                                                                           throttle: int) -> None:
    raw = b"".join(encode_fetch_response(3, throttle, resp))
    expected = response_codec(ApiKey.FETCH, 3).decode(raw)
    got = decode_fetch_response_v3_partitions(raw)
    assert [(name, index, error, hw, None if records is None else bytes(records))
            for name, index, error, hw, records in got] == [
        (t["topic"], p["partition_index"], p["error_code"], p["high_watermark"], p["records"])
        for t in expected["responses"] for p in t["partitions"]]
    for cut in range(0, len(raw), 3):
        with pytest.raises(ProtocolError):
            decode_fetch_response_v3_partitions(raw[:cut])


def test_v12_tagged_sections_are_one_byte_and_unknown_request_tags_are_skipped() -> None:
    raw = b"".join(encode_fetch_response(12, 0, [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 5, "records": b""}]}]))
    # throttle, error, session, [topics, name, [partitions, index, error, hw, lso, log start, aborted null,
    # preferred replica, records, tags], tags], tags
    assert raw == (b"\0\0\0\0" + b"\0\0" + b"\0\0\0\0" + b"\x02" + b"\x02t" + b"\x02" + b"\0\0\0\0" + b"\0\0"
                   + (5).to_bytes(8, "big") + b"\xff" * 16 + b"\0" + b"\xff" * 4 + b"\x01" + b"\0" + b"\0" + b"\0")
    body = {"cluster_id": "kraft-cluster", "replica_id": -1, "max_wait_ms": 1, "min_bytes": 1, "topics": []}
    got = decode_fetch_request(request_codec(ApiKey.FETCH, 12).encode(body), 12)
    assert got["topics"] == [] and got["session_epoch"] == -1


@pytest.mark.parametrize("version", range(4, 12))
def test_golden_against_kafka_python_hand_written_classes(version: int) -> None:
    partition: tuple[int, ...] = (0, 123, 1 << 20)
    if version >= 5:
        partition = (0, 123, -1, 1 << 20)
    if version >= 9:
        partition = (0, 7, 123, -1, 1 << 20)
    fields: list[Any] = [1, 500, 1, 10 << 20, 1]
    if version >= 7:
        fields += [0, -1]
    fields.append([("t", [partition])])
    if version >= 7:
        fields.append([("gone", [3])])
    if version >= 11:
        fields.append("rack-a")
    got = decode_fetch_request(FetchRequest[version](*fields).encode(), version)
    assert got["isolation_level"] == 1 and got["max_bytes"] == 10 << 20
    assert got["topics"] == [{"topic": "t", "partitions": [{
        "partition": 0, "current_leader_epoch": 7 if version >= 9 else -1, "fetch_offset": 123,
        "partition_max_bytes": 1 << 20}]}]
    if version >= 7:
        assert got["forgotten_topics_data"] == [{"topic": "gone", "partitions": [3]}]
    if version >= 11:
        assert got["rack_id"] == "rack-a"
    body = b"".join(encode_fetch_response(version, 7, [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 99, "last_stable_offset": 99,
         "log_start_offset": 4, "aborted_transactions": [], "records": b"x" * 5000}]}], 0, 0))
    kp = FetchResponse[version].decode(body).to_object()
    assert kp["throttle_time_ms"] == 7
    part = kp["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 99 and part["last_stable_offset"] == 99 and part["records"] == b"x" * 5000
    assert part["aborted_transactions"] == []
    if version >= 5:
        assert part["log_start_offset"] == 4
    if version >= 11:
        assert part["preferred_read_replica"] == -1


def test_golden_v12_against_kafka_pythons_json_classes() -> None:
    req = JsonFetchRequest[12](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=100, isolation_level=1, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="r",
        topics=[JsonFetchRequest.FetchTopic(topic="t", partitions=[JsonFetchRequest.FetchTopic.FetchPartition(
            partition=2, current_leader_epoch=3, fetch_offset=5, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=99)])])
    got = decode_fetch_request(bytes(req.encode()), 12)
    assert got == {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 100, "isolation_level": 1,
                   "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "r",
                   "topics": [{"topic": "t", "partitions": [{"partition": 2, "current_leader_epoch": 3,
                                                             "fetch_offset": 5, "partition_max_bytes": 99}]}]}
    body = b"".join(encode_fetch_response(12, 7, [{"topic": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 9, "last_stable_offset": 9,
         "log_start_offset": 0, "aborted_transactions": None, "records": b"r" * 5000}]}], 0, 0))
    kp = JsonFetchResponse[12].decode(body)
    assert (kp.throttle_time_ms, kp.error_code, kp.session_id) == (7, 0, 0)
    p = kp.responses[0].partitions[0]
    assert (p.high_watermark, p.last_stable_offset, p.log_start_offset, p.preferred_read_replica) == (9, 9, 0, -1)
    assert p.aborted_transactions is None and p.records == b"r" * 5000
    assert p.diverging_epoch is None and p.current_leader is None and p.snapshot_id is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.sampled_from(list(VERSIONS)))
def test_fuzz_raises_only_protocol_errors(data: bytes, version: int) -> None:
    for fn in (decode_fetch_request, decode_fetch_response):
        try:
            fn(data, version)
        except ProtocolError:
            pass
    try:
        decode_fetch_response_v3_partitions(data)
    except ProtocolError:
        pass
