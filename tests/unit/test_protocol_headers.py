"""Request and response headers: v1/v2 requests, v0/v1 responses, ApiVersions' exception."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.headers import (
    decode_request_header,
    encode_request_header,
    encode_response_header,
    response_header_size,
)
from protocol.layouts import RequestHeaderV1, RequestHeaderV2


def v1(key: int, version: int, corr: int, client: bytes | None) -> bytes:
    cid = struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
    return struct.pack(">hhi", key, version, corr) + cid


def test_v1_header() -> None:
    raw = v1(ApiKey.METADATA, 1, 77, b"kcat") + b"BODY"
    hdr, at = decode_request_header(raw)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (ApiKey.METADATA, 1, 77, "kcat")
    assert raw[at:] == b"BODY"
    parsed = RequestHeaderV1.parse(raw)
    assert (parsed.request_api_key, parsed.correlation_id, parsed.client_id) == (ApiKey.METADATA, 77, b"kcat")


def test_v2_header_skips_tagged_fields() -> None:
    raw = v1(ApiKey.API_VERSIONS, 3, 5, None) + b"\x01\x00\x02ab" + b"BODY"
    hdr, at = decode_request_header(raw)
    assert hdr.client_id is None and hdr.api_version == 3
    assert raw[at:] == b"BODY"


def test_unknown_key_and_version_still_decode() -> None:
    hdr, at = decode_request_header(v1(999, 42, 1, b"x"))
    assert (hdr.api_key, hdr.api_version) == (999, 42)
    hdr, _ = decode_request_header(v1(ApiKey.API_VERSIONS, 99, 1, b"x") + b"\x00")
    assert hdr.api_version == 99


def test_truncated_header_is_a_protocol_error() -> None:
    raw = v1(ApiKey.PRODUCE, 2, 1, b"client")
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            decode_request_header(raw[:cut])


@given(st.binary(max_size=40))
def test_fuzzed_headers_raise_only_protocol_errors(data: bytes) -> None:
    try:
        decode_request_header(data)
    except ProtocolError:
        pass


def test_response_headers() -> None:
    assert encode_response_header(7, ApiKey.API_VERSIONS, 3) == struct.pack(">i", 7)  # ApiVersions: always v0
    assert encode_response_header(7, ApiKey.CREATE_TOPICS, 5) == struct.pack(">i", 7) + b"\x00"
    assert encode_response_header(7, ApiKey.CREATE_TOPICS, 4) == struct.pack(">i", 7)
    assert encode_response_header(-1, 999, 0) == struct.pack(">i", -1)


@given(st.integers(0, 0x7FFFFFFF), st.text(max_size=40))
def test_client_request_header_is_the_declared_layout(corr: int, client_id: str) -> None:

    classic = encode_request_header(ApiKey.METADATA, 1, corr, client_id)
    parsed = RequestHeaderV1.parse(classic)
    assert (parsed.request_api_key, parsed.request_api_version, parsed.correlation_id,
            parsed.client_id) == (ApiKey.METADATA, 1, corr, client_id.encode())
    assert len(RequestHeaderV1.build(parsed)) == len(classic)
    flexible = encode_request_header(ApiKey.CREATE_TOPICS, 5, corr, client_id)
    assert RequestHeaderV2.build(RequestHeaderV2.parse(flexible)) == flexible
    hdr, at = decode_request_header(flexible)
    assert (hdr.api_key, hdr.correlation_id, hdr.client_id, at) == (ApiKey.CREATE_TOPICS, corr, client_id,
                                                                     len(flexible))


def test_client_skips_the_response_header_it_is_sent() -> None:

    for key, version in ((ApiKey.METADATA, 1), (ApiKey.API_VERSIONS, 3), (ApiKey.CREATE_TOPICS, 5)):
        assert response_header_size(key, version, encode_response_header(7, key, version) + b"BODY") == \
            len(encode_response_header(7, key, version))
    # A flexible response header with a tagged field the client does not know is skipped whole.
    tagged = struct.pack(">i", 7) + b"\x01\x05\x03abc" + b"BODY"
    assert response_header_size(ApiKey.CREATE_TOPICS, 5, tagged) == len(tagged) - 4


@given(st.integers(0, 70), st.integers(-1, 14), st.integers(-(1 << 31), (1 << 31) - 1),
       st.one_of(st.none(), st.binary(max_size=12)),
       st.one_of(st.binary(max_size=8), st.binary(max_size=8).map(lambda b: b"\x00" + b),
                 st.binary(max_size=8).map(lambda b: b"\x01\x00\x02ab" + b)), st.integers(0, 20))
def test_the_one_unpack_path_reads_headers_as_the_general_reader(key: int, version: int, corr: int,
                                                                 client: bytes | None, rest: bytes,
                                                                 cut: int) -> None:
    """decode_request_header's fast path (no tagged section, or an empty one) answers exactly as
    the general reader, and anything it does not take (tags, truncated) is the general reader's,
    errors included."""
    from protocol.headers import _decode_request_header

    raw = v1(key, version, corr, client) + rest
    for data in (raw, raw[:cut]):
        try:
            want = _decode_request_header(data)
        except ProtocolError:
            with pytest.raises(ProtocolError):
                decode_request_header(data)
            continue
        assert decode_request_header(data) == want
        assert decode_request_header(memoryview(data)) == want


@pytest.mark.parametrize(("key", "version"), [(ApiKey.PRODUCE, 9), (ApiKey.FETCH, 12), (ApiKey.METADATA, 9)])
def test_a_flexible_header_with_an_empty_tagged_section_ends_after_it(key: int, version: int) -> None:
    raw = v1(key, version, 42, b"rdkafka") + b"\x00" + b"BODY"
    hdr, at = decode_request_header(raw)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id) == (key, version, 42, "rdkafka")
    assert raw[at:] == b"BODY"
    tagged = v1(key, version, 42, None) + b"\x01\x05\x02ab" + b"BODY"  # one tag: the general reader skips it
    hdr, at = decode_request_header(tagged)
    assert hdr.client_id is None and tagged[at:] == b"BODY"
