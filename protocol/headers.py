"""Request header v1/v2 and response header v0/v1, both sides (broker and client).

The header is decoded before anything is known about the API, so an unknown key or version
never fails here: such a header is read as v1 and the dispatcher answers or closes. Request
header v2 keeps client_id a classic nullable string (as Kafka does) and adds a tagged section.
ApiVersions responses always use header v0, even at flexible versions, because a client
must be able to read the answer before it knows what the broker speaks. The layouts are
declared in protocol.layouts; the struct formats used here are derived from them.
"""

from __future__ import annotations

from typing import NamedTuple

from protocol.api_keys import ApiKey
from protocol.layouts import EMPTY_TAGGED_FIELDS, REQUEST_HEADER_FIXED, RESPONSE_HEADER
from protocol.primitives import Reader
from protocol.schema import declared_versions, flexible

_DECLARED = declared_versions()


def _declared(key: int, version: int) -> bool:
    rng = _DECLARED.get(key)
    return rng is not None and rng[0] <= version <= rng[1]


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


# Whether each declared (api key, version)'s request header has a tagged section: at most one
# entry per declared version, so clients cannot grow it.
_FLEXIBLE_HEADER: dict[tuple[int, int], bool] = {}
_FIXED_SIZE = REQUEST_HEADER_FIXED.size


def decode_request_header(buf: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """(header, where the body starts). A header without a tagged section (every non-flexible
    request) or with an empty one (a flexible request's, nearly always: librdkafka's Produce v9
    and Fetch v12) is read with one unpack; others, and anything truncated, by the general
    reader below (which raises its ProtocolError)."""
    if len(buf) >= _FIXED_SIZE:
        key, version, correlation_id, n = REQUEST_HEADER_FIXED.unpack_from(buf, 0)
        end = _FIXED_SIZE + max(n, 0)
        if end <= len(buf):
            flex = _FLEXIBLE_HEADER.get((key, version))
            if flex is None:
                flex = _declared(key, version) and flexible(key, version, request=True)
                if _declared(key, version):
                    _FLEXIBLE_HEADER[(key, version)] = flex
            # A flexible header's tagged section is almost always empty: one zero byte (the
            # count). Anything else (tags, a truncated header) is the general reader's.
            if not flex or (end < len(buf) and buf[end] == 0):
                # Lenient on bad UTF-8: a client id is only ever logged and used as a quota key.
                client_id = None if n < 0 else str(buf[_FIXED_SIZE:end], "utf-8", "replace")
                return RequestHeader(key, version, correlation_id, client_id), end + 1 if flex else end
    return _decode_request_header(buf)


def _decode_request_header(buf: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    r = Reader(buf)
    key, version, correlation_id, n = REQUEST_HEADER_FIXED.unpack(r.raw(REQUEST_HEADER_FIXED.size))
    if n < 0:
        client_id = None
    else:
        # Lenient on bad UTF-8: a client id is only ever logged and used as a quota key.
        client_id = bytes(r.raw(n)).decode("utf-8", "replace")
    # Tags are read only for versions we declare: for any other version the body is never
    # parsed (ApiVersions answers with a v0 body, others close), so the header may end anywhere.
    if _declared(key, version) and flexible(key, version, request=True):
        r.tagged_fields()
    return RequestHeader(key, version, correlation_id, client_id), r.pos


def _flexible_response(api_key: int, version: int) -> bool:
    return api_key != ApiKey.API_VERSIONS and flexible(api_key, version, request=False)


def encode_response_header(correlation_id: int, api_key: int, version: int) -> bytes:
    if _flexible_response(api_key, version):
        return RESPONSE_HEADER.pack(correlation_id) + EMPTY_TAGGED_FIELDS
    return RESPONSE_HEADER.pack(correlation_id)


# ---- the client side -------------------------------------------------------------------------


def encode_request_header(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    """Request header v1, or v2 (an empty tagged section) at the API's flexible versions."""
    cid = client_id.encode()
    head = REQUEST_HEADER_FIXED.pack(api_key, version, correlation_id, len(cid)) + cid
    if flexible(api_key, version, request=True):
        head += EMPTY_TAGGED_FIELDS
    return head


def response_header_size(api_key: int, version: int, data: bytes | bytearray | memoryview) -> int:
    """Bytes of the response header at the start of `data` (a frame without its size prefix)."""
    if not _flexible_response(api_key, version):
        return RESPONSE_HEADER.size
    r = Reader(data)
    r.pos = RESPONSE_HEADER.size
    r.tagged_fields()
    return r.pos
