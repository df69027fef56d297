"""The struct fast paths against the construct declarations of protocol.layouts, byte for byte.

protocol.layouts declares each fixed wire layout once, with construct, and derives the struct
formats the hot paths run. These properties hold the two together both ways: what the struct
path writes, construct reads back field for field and would have written identically; what
construct writes, the struct path reads the same. Kafka's own offset constants and
kafka-python's encoders pin the declarations themselves.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol import layouts as L
from protocol.framing import frame
from protocol.headers import decode_request_header, encode_response_header
from protocol.primitives import Writer
from protocol.records import message_set, record_batch
from protocol.schema import declared_versions, flexible

INT = {"b": (-(1 << 7), (1 << 7) - 1), "h": (-(1 << 15), (1 << 15) - 1), "l": (-(1 << 31), (1 << 31) - 1),
       "q": (-(1 << 63), (1 << 63) - 1), "L": (0, (1 << 32) - 1)}
FIXED_LAYOUTS = {
    "FrameHead": L.FrameHead, "RequestHeaderV0": L.RequestHeaderV0, "ResponseHeaderV0": L.ResponseHeaderV0,
    "LogEntryHead": L.LogEntryHead, "MessageV0Head": L.MessageV0Head, "MessageV1Head": L.MessageV1Head,
    "RecordBatchHeader": L.RecordBatchHeader, "TimeIndexEntry": L.TimeIndexEntry,
}
DECLARED = declared_versions()
FLEXIBLE_REQUESTS = sorted((k, v) for k, (lo, hi) in DECLARED.items() for v in range(lo, hi + 1)
                           if flexible(k, v, request=True))
FLEXIBLE_SET = set(FLEXIBLE_REQUESTS)
CLASSIC_REQUESTS = sorted((k, v) for k, (lo, hi) in DECLARED.items() for v in range(lo, hi + 1)
                          if not flexible(k, v, request=True))
RESPONSES = sorted((k, v) for k, (lo, hi) in DECLARED.items() for v in range(lo, hi + 1))

int8, int16, int32, int64 = (st.integers(*INT[c]) for c in "bhlq")
nullable_bytes = st.none() | st.binary(max_size=64)
tagged = st.dictionaries(st.integers(0, 300), st.binary(max_size=8), max_size=3).map(
    lambda d: [{"tag": t, "data": d[t]} for t in sorted(d)])


def values_for(layout: Any, first: str | None = None, last: str | None = None) -> st.SearchStrategy[dict[str, int]]:
    names = [n for n, _ in L.fields(layout)]
    lo = 0 if first is None else names.index(first)
    hi = len(names) if last is None else names.index(last) + 1
    return st.fixed_dictionaries({n: st.integers(*INT[code]) for n, code in L.fields(layout)[lo:hi]})


# ---- the derivation itself ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FIXED_LAYOUTS))
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_derived_struct_agrees_with_the_declaration(name: str, data: st.DataObject) -> None:
    layout = FIXED_LAYOUTS[name]
    names = [n for n, _ in L.fields(layout)]
    assert L.size_of(layout) == layout.sizeof()  # every one of these is fixed all through
    first, last = sorted(data.draw(st.lists(st.sampled_from(names), min_size=2, max_size=2)), key=names.index)
    whole = data.draw(values_for(layout))
    raw = layout.build(whole)
    assert L.fixed(layout).pack(*(whole[n] for n in names)) == raw
    assert dict(zip(names, L.fixed(layout).unpack(raw), strict=True)) == whole
    # A run of fields, read in one unpack at its derived offset, as the hot paths do.
    part = L.fixed(layout, first, last)
    at = L.offset_of(layout, first)
    picked = names[names.index(first):names.index(last) + 1]
    assert part.unpack_from(raw, at) == tuple(whole[n] for n in picked)
    assert raw[at:at + part.size] == part.pack(*(whole[n] for n in picked))


def test_layouts_match_kafkas_constants() -> None:
    """Offsets as Kafka's sources spell them (Records, LegacyRecord, DefaultRecordBatch)."""
    assert L.LOG_OVERHEAD == 12 and L.MAGIC_OFFSET == 16
    assert [L.offset_of(L.MessageV1Head, n) for n in ("crc", "magic", "attributes", "timestamp")] == [12, 16, 17, 18]
    assert L.size_of(L.MessageV0Head) == 12 + 6 and L.size_of(L.MessageV1Head) == 12 + 14  # KeySizeOffset_V0/_V1
    batch = {"base_offset": 0, "batch_length": 8, "partition_leader_epoch": 12, "magic": 16, "crc": 17,
             "attributes": 21, "last_offset_delta": 23, "first_timestamp": 27, "max_timestamp": 35,
             "producer_id": 43, "producer_epoch": 51, "base_sequence": 53, "records_count": 57}
    assert {n: L.offset_of(L.RecordBatchHeader, n) for n in batch} == batch
    assert L.RECORD_BATCH_HEADER_SIZE == 61 and L.RECORD_BATCH_CRC_FROM == 21
    assert message_set.MIN_MESSAGE == {0: 14, 1: 22}
    assert L.size_of(L.TimeIndexEntry) == 12 and L.offset_of(L.TimeIndexEntry, "relative_offset") == 8  # TimeIndex
    # The same bytes as the hand-written formats the hot paths used before the derivation.
    for derived, literal in [(L.RECORD_BATCH_HEADER, ">qiibIhiqqqhii"), (L.fixed(L.LogEntryHead), ">qi"),
                             (L.REQUEST_HEADER_FIXED, ">hhih"), (L.RESPONSE_HEADER, ">i"), (L.FRAME_SIZE, ">i"),
                             (L.fixed(L.MessageV0Head, "crc", "attributes"), ">Ibb")]:
        assert derived.size == struct.calcsize(literal)
        values = [1, -2, 3, 4, 5, -6, 7, 8, 9, 10, -11, 12, 13][:len(derived.unpack(bytes(derived.size)))]
        assert derived.pack(*values) == struct.pack(literal, *values)


def test_only_fixed_big_endian_fields_derive() -> None:
    import construct as c

    with pytest.raises(TypeError):
        L.fields(c.Struct("x" / c.Int32sl))
    with pytest.raises(KeyError):
        L.offset_of(L.RequestHeaderV1, "client_id")  # behind the variable part: not derivable
    assert [n for n, _ in L.fields(L.MessageV1)] == [n for n, _ in L.fields(L.MessageV1Head)]


# ---- request and response headers --------------------------------------------------------------------

def struct_request_header(key: int, version: int, corr: int, client_id: bytes | None,
                          tags: list[dict[str, Any]] | None) -> bytes:
    """The request header written the struct way: derived fixed part, client id, tagged fields."""
    out = L.REQUEST_HEADER_FIXED.pack(key, version, corr, -1 if client_id is None else len(client_id))
    out += client_id or b""
    if tags is not None:
        w = Writer()
        w.tagged_fields([(t["tag"], t["data"]) for t in tags])
        out += w.getvalue()
    return out


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CLASSIC_REQUESTS) | st.tuples(st.integers(-5, 2000), int16), int32, nullable_bytes,
       st.binary(max_size=8))
def test_request_header_v1(kv: tuple[int, int], corr: int, client_id: bytes | None, body: bytes) -> None:
    key, version = kv
    if (key, version) in FLEXIBLE_SET:
        return  # header v2: below. Any other header, even an undeclared version's, is read as v1.
    fields = {"request_api_key": key, "request_api_version": version, "correlation_id": corr, "client_id": client_id}
    raw = L.RequestHeaderV1.build(fields)
    assert struct_request_header(key, version, corr, client_id, None) == raw
    parsed = L.RequestHeaderV1.parse(raw)
    assert {k: parsed[k] for k in fields} == fields
    hdr, at = decode_request_header(raw + body)
    assert at == len(raw)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id) == (key, version, corr)
    assert hdr.client_id == (None if client_id is None else client_id.decode("utf-8", "replace"))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FLEXIBLE_REQUESTS), int32, nullable_bytes, tagged, st.binary(max_size=8))
def test_request_header_v2(kv: tuple[int, int], corr: int, client_id: bytes | None, tags: list[dict[str, Any]],
                           body: bytes) -> None:
    key, version = kv
    fields = {"request_api_key": key, "request_api_version": version, "correlation_id": corr,
              "client_id": client_id, "tagged_fields": tags}
    raw = L.RequestHeaderV2.build(fields)
    assert struct_request_header(key, version, corr, client_id, tags) == raw
    parsed = L.RequestHeaderV2.parse(raw)
    assert {k: parsed[k] for k in fields if k != "tagged_fields"} == {k: fields[k] for k in fields
                                                                       if k != "tagged_fields"}
    assert [(t.tag, t.data) for t in parsed.tagged_fields] == [(t["tag"], t["data"]) for t in tags]
    hdr, at = decode_request_header(raw + body)
    assert at == len(raw)
    assert (hdr.api_key, hdr.api_version, hdr.correlation_id) == (key, version, corr)
    assert hdr.client_id == (None if client_id is None else client_id.decode("utf-8", "replace"))


def test_request_header_v0_is_the_v1_prefix() -> None:
    fields = {"request_api_key": 7, "request_api_version": 0, "correlation_id": 9}
    assert L.RequestHeaderV1.build({**fields, "client_id": b"c"}).startswith(L.RequestHeaderV0.build(fields))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(RESPONSES) | st.tuples(st.integers(-5, 2000), int16), int32)
def test_response_header(kv: tuple[int, int], corr: int) -> None:
    key, version = kv
    raw = encode_response_header(corr, key, version)
    v1 = key != 18 and flexible(key, version, request=False)
    if v1:
        assert raw == L.ResponseHeaderV1.build({"correlation_id": corr, "tagged_fields": []})
        assert L.ResponseHeaderV1.parse(raw).correlation_id == corr
    else:
        assert raw == L.ResponseHeaderV0.build({"correlation_id": corr})
    assert L.ResponseHeaderV0.parse(raw).correlation_id == corr


@given(st.lists(st.binary(max_size=20), max_size=4))
def test_frame_size(parts: list[bytes]) -> None:
    head, *rest = frame(*parts)
    assert rest == parts
    assert head == L.FrameHead.build({"size": sum(map(len, parts))})
    assert L.FrameHead.parse(head).size == len(b"".join(parts))


# ---- message format v0/v1 ----------------------------------------------------------------------------

def construct_entry(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                    value: bytes | None) -> bytes:
    """A log entry built by construct alone, its size and CRC (zlib's) filled in from its own bytes."""
    layout = L.MessageV1 if magic == 1 else L.MessageV0
    fields: dict[str, Any] = {"offset": offset, "size": 0, "crc": 0, "magic": magic, "attributes": attributes,
                              "timestamp": timestamp, "key": key, "value": value}
    draft = layout.build(fields)
    fields["size"] = len(draft) - L.LOG_OVERHEAD
    fields["crc"] = zlib.crc32(draft[L.MAGIC_OFFSET:])
    return bytes(layout.build(fields))


message = st.tuples(st.integers(0, INT["q"][1]), st.sampled_from([0, 1]), int8, int64, nullable_bytes,
                    nullable_bytes)


@settings(max_examples=300, deadline=None)
@given(message)
def test_message_encoding_agrees(m: tuple[int, int, int, int, bytes | None, bytes | None]) -> None:
    offset, magic, attributes, timestamp, key, value = m
    raw = message_set.encode_entry(offset, magic, attributes, timestamp, key, value)
    assert raw == construct_entry(offset, magic, attributes, timestamp, key, value)
    parsed = (L.MessageV1 if magic == 1 else L.MessageV0).parse(raw)
    assert (parsed.offset, parsed.size, parsed.magic, parsed.attributes, parsed.key, parsed.value) == (
        offset, len(raw) - 12, magic, attributes, key, value)
    assert parsed.crc == zlib.crc32(raw[16:])
    if magic == 1:
        assert parsed.timestamp == timestamp


@settings(max_examples=300, deadline=None)
@given(st.lists(message, min_size=1, max_size=5))
def test_message_decoding_agrees(ms: list[tuple[int, int, int, int, bytes | None, bytes | None]]) -> None:
    # Uncompressed (codec bits clear), increasing offsets: what the struct readers accept.
    ms = sorted({m[0]: (m[0], m[1], m[2] & ~message_set.CODEC_MASK, *m[3:]) for m in ms}.values())
    raw = b"".join(construct_entry(*m) for m in ms)
    assert [(pos, off) for pos, off, _ in message_set.scan_entries(raw)] == [
        (sum(len(construct_entry(*p)) for p in ms[:i]), m[0]) for i, m in enumerate(ms)]
    assert message_set.shallow_validate(raw) == (len(raw), ms[-1][0])
    got = message_set.decode_records(raw)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == [
        (o, t if magic == 1 else message_set.NO_TIMESTAMP, k, v) for o, magic, _, t, k, v in ms]
    info = message_set.validate_and_assign(raw, None, 0)
    assert (info.buffer, info.first_offset, info.last_offset, info.count) == (raw, ms[0][0], ms[-1][0], len(ms))


@pytest.mark.parametrize("magic", [0, 1])
def test_kafka_python_messages_parse_with_the_declarations(magic: int) -> None:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=1000 + i if magic else None, key=None if i == 1 else b"k", value=b"v%d" % i)
    raw = bytes(b.build())
    layout = L.MessageV1 if magic == 1 else L.MessageV0
    pos = 0
    for i in range(3):
        m = layout.parse(raw[pos:])
        assert (m.offset, m.magic, m.value) == (i, magic, b"v%d" % i)
        assert m.crc == zlib.crc32(raw[pos + 16:pos + 12 + m.size])
        pos += 12 + m.size
    assert pos == len(raw)


# ---- RecordBatch v2 ----------------------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(st.integers(0, 1 << 40), st.lists(st.tuples(nullable_bytes, nullable_bytes), min_size=1, max_size=5),
       st.integers(0, 1 << 41), st.sampled_from([0, 1, 2, 3]))
def test_record_batch_header_agrees(base: int, kvs: list[tuple[bytes | None, bytes | None]], ts: int,
                                    codec: int) -> None:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (k, v) in enumerate(kvs):
        b.append(i, timestamp=ts + i, key=k, value=v, headers=[])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base)
    h = L.RecordBatchHeader.parse(raw)
    assert L.RECORD_BATCH_HEADER.unpack_from(raw) == tuple(h[n] for n, _ in L.fields(L.RecordBatchHeader))
    assert L.RecordBatchHeader.build(h) == raw[:61]
    assert (h.base_offset, h.batch_length, h.magic, h.records_count) == (base, len(raw) - 12, 2, len(kvs))
    assert (h.first_timestamp, h.max_timestamp, h.last_offset_delta) == (ts, ts + len(kvs) - 1, len(kvs) - 1)
    assert h.crc == crc32c.crc32c(raw[21:])
    assert h.attributes & 0x07 in (0, codec)  # kafka-python stores a batch plain when compressing does not pay
    parsed = record_batch.parse_batch(memoryview(raw), 0, strict=True)
    assert parsed is not None
    records, end = parsed
    assert end == len(raw)
    assert records == [(base + i, ts + i, k, v) for i, (k, v) in enumerate(kvs)]
