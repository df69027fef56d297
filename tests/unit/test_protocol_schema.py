"""Body codecs: property round trips for every declared (API, version), golden bytes, fuzzing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.api_keys import ApiKey
from protocol.declare import F
from protocol.errors import ProtocolError
from protocol.messages import MODULES
from protocol.primitives import CompactString, Reader, TaggedFields, Writer, uvarint
from protocol.schema import flexible, request_codec, response_codec

INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def value_strategy(f: F, version: int) -> st.SearchStrategy:
    t = f.type
    if t == "struct":
        return struct_strategy(f.fields, version)
    if t.startswith("[]"):
        elem_t = t[2:]
        elem = struct_strategy(f.fields, version) if elem_t == "struct" else scalar(elem_t, False)
        arr = st.lists(elem, max_size=3)
        return st.one_of(st.none(), arr) if f.nullable_in(version) else arr
    return scalar(t, f.nullable_in(version))


def scalar(t: str, nullable: bool) -> st.SearchStrategy:
    if t in INT_BITS:
        s = st.integers(-(1 << (INT_BITS[t] - 1)), (1 << (INT_BITS[t] - 1)) - 1)
    elif t == "uint16":
        s = st.integers(0, 0xFFFF)
    elif t == "bool":
        s = st.booleans()
    elif t == "float64":
        s = st.floats(allow_nan=False)
    elif t == "string":
        s = st.text(max_size=20)
    elif t in ("bytes", "records"):
        s = st.binary(max_size=40)
    elif t == "uuid":
        s = st.uuids()
    else:
        raise AssertionError(t)
    return st.one_of(st.none(), s) if nullable else s


def struct_strategy(fields: tuple[F, ...], version: int) -> st.SearchStrategy:
    return st.fixed_dictionaries({f.name: value_strategy(f, version) for f in fields if f.present(version)})


CASES = [(key, v, req) for key, m in sorted(MODULES.items()) for v in range(m.VERSIONS[0], m.VERSIONS[1] + 1)
         for req in (True, False)]


@pytest.mark.parametrize(("key", "version", "request_side"), CASES,
                         ids=[f"{MODULES[k].NAME}-v{v}-{'req' if r else 'resp'}" for k, v, r in CASES])
def test_round_trip_every_api_and_version(key: int, version: int, request_side: bool) -> None:
    codec = (request_codec if request_side else response_codec)(key, version)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(struct_strategy(codec.fields, version))
    def check(body: dict) -> None:
        assert codec.decode(codec.encode(body)) == body

    check()


@pytest.mark.parametrize(("key", "version", "request_side"), CASES[::3])
def test_fuzzed_bodies_raise_only_protocol_errors(key: int, version: int, request_side: bool) -> None:
    codec = (request_codec if request_side else response_codec)(key, version)

    @settings(max_examples=60, deadline=None)
    @given(st.binary(max_size=80))
    def check(data: bytes) -> None:
        try:
            codec.decode(data)
        except ProtocolError:
            pass

    check()


def test_truncation_of_a_valid_body_is_a_protocol_error() -> None:
    codec = request_codec(ApiKey.CREATE_TOPICS, 5)
    body = codec.encode({"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 2,
                                     "configs": [{"name": "a", "value": "b"}]}], "timeout_ms": 5})
    for cut in range(len(body) - 1):
        with pytest.raises(ProtocolError):
            codec.decode(body[:cut])


def test_api_versions_v3_golden_bytes_have_empty_tags() -> None:
    body = response_codec(ApiKey.API_VERSIONS, 3).encode(
        {"error_code": 0, "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 3}],
         "throttle_time_ms": 0})
    # error, compact array (1 entry + 1), entry, entry tags, throttle, top-level tags: nothing else.
    assert body == bytes.fromhex("0000" "02" "0012" "0000" "0003" "00" "00000000" "00")


def test_create_topics_v5_request_golden_bytes() -> None:
    body = request_codec(ApiKey.CREATE_TOPICS, 5).encode({
        "topics": [{"name": "ab", "num_partitions": 3, "replication_factor": -1,
                    "assignments": [], "configs": [{"name": "k", "value": None}]}],
        "timeout_ms": 30000, "validate_only": True})
    expected = (b"\x02" + b"\x03ab" + struct.pack(">ih", 3, -1) + b"\x01" + b"\x02" + b"\x02k" + b"\x00" + b"\x00"
                + b"\x00" + struct.pack(">i", 30000) + b"\x01" + b"\x00")
    assert body == expected


def test_unknown_tagged_fields_are_skipped() -> None:
    codec = request_codec(ApiKey.API_VERSIONS, 3)
    w = Writer()
    w.string("kcat", True)
    w.string("1.7", True)
    w.tagged_fields([(7, b"junk!")])
    assert codec.decode(w.getvalue()) == {"client_software_name": "kcat", "client_software_version": "1.7"}


def test_flexible_versions_follow_the_definitions() -> None:
    assert flexible(ApiKey.API_VERSIONS, 3) and not flexible(ApiKey.API_VERSIONS, 2)
    assert flexible(ApiKey.CREATE_TOPICS, 5) and not flexible(ApiKey.CREATE_TOPICS, 4)
    assert flexible(ApiKey.DELETE_TOPICS, 4)
    assert flexible(ApiKey.CREATE_PARTITIONS, 2) and not flexible(ApiKey.CREATE_PARTITIONS, 1)
    data_path = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA)
    assert not any(flexible(k, v) for k in data_path for v in range(4))
    assert not flexible(999, 0)


def test_primitives_match_the_construct_declarations() -> None:
    assert CompactString.build("héllo") == uvarint(len("héllo".encode()) + 1) + "héllo".encode()
    w = Writer()
    w.tagged_fields([(1, b"ab"), (0, b"")])
    assert TaggedFields.parse(w.getvalue()) == [{"tag": 0, "data": b""}, {"tag": 1, "data": b"ab"}]
    for n in (0, 1, 127, 128, 300, 1 << 31, (1 << 63) - 1):
        assert Reader(uvarint(n)).uvarint() == n


# ---- golden bytes against kafka-python's independent implementation ----------------------------

def test_kafka_python_requests_decode_identically() -> None:
    from kafka.protocol.old.admin import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest
    from kafka.protocol.old.list_offsets import ListOffsetsRequest
    from kafka.protocol.old.metadata import MetadataRequest

    assert request_codec(ApiKey.METADATA, 2).decode(MetadataRequest[2](topics=None).encode()) == {"topics": None}
    assert request_codec(ApiKey.METADATA, 0).decode(MetadataRequest[0](topics=["x"]).encode()) == {
        "topics": [{"name": "x"}]}
    kp = CreateTopicsRequest[1](create_topic_requests=[("t", 4, 2, [(0, [1, 2])], [("retention.ms", "1")])],
                                timeout=1000, validate_only=False).encode()
    assert request_codec(ApiKey.CREATE_TOPICS, 1).decode(kp) == {
        "topics": [{"name": "t", "num_partitions": 4, "replication_factor": 2,
                    "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}],
                    "configs": [{"name": "retention.ms", "value": "1"}]}],
        "timeout_ms": 1000, "validate_only": False}
    dt = DeleteTopicsRequest[1](topics=["a", "b"], timeout=5).encode()
    assert request_codec(ApiKey.DELETE_TOPICS, 1).decode(dt) == {
        "topic_names": ["a", "b"], "timeout_ms": 5}
    cp = CreatePartitionsRequest[0](topic_partitions=[("t", (6, None))], timeout=10, validate_only=True).encode()
    assert request_codec(ApiKey.CREATE_PARTITIONS, 0).decode(cp) == {
        "topics": [{"name": "t", "count": 6, "assignments": None}], "timeout_ms": 10, "validate_only": True}
    lo = ListOffsetsRequest[1](replica_id=-1, topics=[("t", [(0, -2)])]).encode()
    assert request_codec(ApiKey.LIST_OFFSETS, 1).decode(lo) == {
        "replica_id": -1, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -2}]}]}


def test_our_responses_decode_with_kafka_python() -> None:
    from kafka.protocol.old.metadata import MetadataResponse
    from kafka.protocol.old.produce import ProduceResponse

    body = response_codec(ApiKey.METADATA, 2).encode({
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}], "cluster_id": "c",
        "controller_id": 1, "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}]}]})
    md = MetadataResponse[2].decode(body)
    assert md.to_object()["brokers"][0]["host"] == "h"
    assert md.to_object()["topics"][0]["partitions"][0]["isr_nodes"] == [1]
    body = response_codec(ApiKey.PRODUCE, 2).encode({"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 42, "log_append_time_ms": -1}]}], "throttle_time_ms": 0})
    pr = ProduceResponse[2].decode(body).to_object()
    assert pr["responses"][0]["partition_responses"][0]["base_offset"] == 42
    assert ProduceResponse[2].decode(body).encode() == body


# ---- flexible versions against kafka-python's JSON-driven classes ------------------------------
# kafka-python 3.x generates its ApiMessage classes from Kafka's own JSON definitions, a second
# implementation of every version (compact fields, tagged fields) of the admin half of the table.

def _kafka_python_class(key: ApiKey, request_side: bool) -> type:
    import importlib

    for module in ("kafka.protocol.admin", "kafka.protocol.metadata", "kafka.protocol.consumer"):
        name = MODULES[key].NAME + ("Request" if request_side else "Response")
        cls = getattr(importlib.import_module(module), name, None)
        if cls is not None:
            return cls
    raise AssertionError(f"kafka-python has no class for {MODULES[key].NAME}")


ADMIN_TABLE = (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS,
               ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS,
               ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DESCRIBE_CLUSTER,
               # the group APIs (issue 18), client and broker side alike: `minibroker groups` encodes
               # their requests and decodes their responses with the same declarations
               ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
               ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS,
               ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE, ApiKey.FIND_COORDINATOR,
               ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS)
KP_CASES = [(k, v, req) for k in ADMIN_TABLE for v in range(MODULES[k].VERSIONS[0], MODULES[k].VERSIONS[1] + 1)
            for req in (True, False)]


@pytest.mark.parametrize(("key", "version", "request_side"), KP_CASES,
                         ids=[f"{MODULES[k].NAME}-v{v}-{'req' if r else 'resp'}" for k, v, r in KP_CASES])
def test_admin_table_bytes_match_kafka_python(key: ApiKey, version: int, request_side: bool) -> None:
    import warnings

    codec = (request_codec if request_side else response_codec)(key, version)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        cls = _kafka_python_class(key, request_side)[version]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(struct_strategy(codec.fields, version))
    def check(body: dict) -> None:
        if key == ApiKey.API_VERSIONS and not request_side:
            body = {**body, "error_code": 0}  # kafka-python reads a body with an error as v0 (UNSUPPORTED_VERSION's)
        ours = codec.encode(body)
        decoded = cls.decode(ours)  # kafka-python reads every byte we wrote ...
        decoded._header = None  # (a decoded body has no header; its version setter reads the attribute)
        theirs = bytes(decoded.encode(version=version))
        assert theirs == ours  # ... and writes the same bytes back
        assert codec.decode(theirs) == body

    check()
