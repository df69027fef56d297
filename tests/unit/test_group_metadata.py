"""protocol.group_metadata: `__consumer_offsets` keys and values in Kafka's formats.

Golden bytes are laid out by hand with struct, field by field from Kafka's internal-topic JSON
schemas (OffsetCommitKey, GroupMetadataKey, OffsetCommitValue, GroupMetadataValue), as an
independent second implementation; round trips are property tests over every field.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.group_metadata import (
    GroupMetadataError,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)


def s16(text: str | None) -> bytes:
    """Kafka's STRING / NULLABLE_STRING: int16 length, UTF-8 bytes (-1: null)."""
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b32(data: bytes) -> bytes:
    """Kafka's BYTES: int32 length, the bytes."""
    return struct.pack(">i", len(data)) + data


# ---- golden bytes ------------------------------------------------------------------------------

def test_offset_key_is_v1_as_kafka_writes_it() -> None:
    expected = struct.pack(">h", 1) + s16("my-group") + s16("orders") + struct.pack(">i", 7)
    assert encode_offset_key(OffsetCommitKey("my-group", "orders", 7)) == expected
    assert decode_key(expected) == OffsetCommitKey("my-group", "orders", 7)


def test_offset_key_v0_reads_the_same() -> None:
    v0 = struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 0)
    assert decode_key(v0) == OffsetCommitKey("g", "t", 0)


def test_group_key_is_v2() -> None:
    expected = struct.pack(">h", 2) + s16("my-group")
    assert encode_group_key(GroupMetadataKey("my-group")) == expected
    assert decode_key(expected) == GroupMetadataKey("my-group")


def test_offset_value_v3() -> None:
    expected = struct.pack(">hqi", 3, 1234, 5) + s16("meta") + struct.pack(">q", 1_700_000_000_123)
    value = OffsetCommitValue(1234, 5, "meta", 1_700_000_000_123)
    assert encode_offset_value(value) == expected
    assert decode_offset_value(expected) == value


def test_offset_value_with_expiry_is_v1() -> None:
    expected = struct.pack(">hq", 1, 99) + s16("") + struct.pack(">qq", 1000, 2000)
    value = OffsetCommitValue(99, -1, "", 1000, 2000)
    assert encode_offset_value(value) == expected
    assert decode_offset_value(expected) == value


@pytest.mark.parametrize("version", [0, 2])
def test_offset_value_v0_and_v2(version: int) -> None:
    data = struct.pack(">hq", version, 42) + s16("m") + struct.pack(">q", 777)
    assert decode_offset_value(data) == OffsetCommitValue(42, -1, "m", 777, -1)


def test_offset_value_v1_without_expiry_has_none() -> None:
    data = struct.pack(">hq", 1, 42) + s16("m") + struct.pack(">qq", 777, -1)
    assert decode_offset_value(data).expire_timestamp == -1


MEMBER = MemberMetadata("consumer-1-abc", "instance-1", "consumer-1", "/127.0.0.1", 300000, 10000,
                        b"\x00\x01sub", b"\x00\x01assign")


def _member_bytes(version: int, m: MemberMetadata) -> bytes:
    out = s16(m.member_id)
    if version >= 3:
        out += s16(m.group_instance_id)
    out += s16(m.client_id) + s16(m.client_host)
    if version >= 1:
        out += struct.pack(">i", m.rebalance_timeout)
    return out + struct.pack(">i", m.session_timeout) + b32(m.subscription) + b32(m.assignment)


def _group_bytes(version: int, members: list[MemberMetadata], protocol: str | None = "range",
                 leader: str | None = "consumer-1-abc") -> bytes:
    out = struct.pack(">h", version) + s16("consumer") + struct.pack(">i", 4) + s16(protocol) + s16(leader)
    if version >= 2:
        out += struct.pack(">q", 1_700_000_000_000)
    out += struct.pack(">i", len(members))
    return out + b"".join(_member_bytes(version, m) for m in members)


def test_group_value_v3() -> None:
    expected = _group_bytes(3, [MEMBER])
    value = GroupMetadataValue("consumer", 4, "range", "consumer-1-abc", 1_700_000_000_000, (MEMBER,))
    assert encode_group_value(value) == expected
    assert decode_group_value(expected) == value


def test_empty_group_value_v3() -> None:
    expected = _group_bytes(3, [], protocol=None, leader=None)
    value = GroupMetadataValue("consumer", 4, None, None, 1_700_000_000_000, ())
    assert encode_group_value(value) == expected
    assert decode_group_value(expected) == value


@pytest.mark.parametrize("version", [0, 1, 2])
def test_older_group_values(version: int) -> None:
    got = decode_group_value(_group_bytes(version, [MEMBER]))
    member = got.members[0]
    assert member.group_instance_id is None
    assert member.rebalance_timeout == (MEMBER.session_timeout if version == 0 else MEMBER.rebalance_timeout)
    assert (member.member_id, member.client_id, member.client_host, member.session_timeout, member.subscription,
            member.assignment) == (MEMBER.member_id, MEMBER.client_id, MEMBER.client_host, MEMBER.session_timeout,
                                   MEMBER.subscription, MEMBER.assignment)
    assert got.current_state_timestamp == (1_700_000_000_000 if version >= 2 else -1)
    assert (got.protocol_type, got.generation, got.protocol, got.leader) == ("consumer", 4, "range", "consumer-1-abc")


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    b"", b"\x00", struct.pack(">h", 3) + s16("g"), struct.pack(">h", 1) + b"\x00\x05ab",
    struct.pack(">h", -1) + s16("g"),
])
def test_malformed_keys(data: bytes) -> None:
    with pytest.raises(GroupMetadataError):
        decode_key(data)


def test_unknown_versions_and_truncation() -> None:
    good_offset = encode_offset_value(OffsetCommitValue(1, 2, "x", 3))
    good_group = encode_group_value(GroupMetadataValue("consumer", 1, "range", "m", 5, (MEMBER,)))
    with pytest.raises(GroupMetadataError):
        decode_offset_value(struct.pack(">h", 4) + good_offset[2:])
    with pytest.raises(GroupMetadataError):
        decode_group_value(struct.pack(">h", 5) + good_group[2:])
    for cut in range(len(good_offset)):
        with pytest.raises(GroupMetadataError):
            decode_offset_value(good_offset[:cut])
    for cut in range(len(good_group)):
        with pytest.raises(GroupMetadataError):
            decode_group_value(good_group[:cut])
    # A member count no bytes could hold is refused before any loop.
    with pytest.raises(GroupMetadataError):
        decode_group_value(good_group[:-len(_member_bytes(3, MEMBER)) - 4] + struct.pack(">i", 1 << 30))


def test_bytes_after_the_fields_are_ignored_as_kafka_does() -> None:
    value = OffsetCommitValue(1, 2, "x", 3)
    assert decode_offset_value(encode_offset_value(value) + b"\x00\x00") == value


# ---- round trips -------------------------------------------------------------------------------

text = st.text(max_size=20)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
members = st.builds(MemberMetadata, text, st.none() | text, text, text, i32, i32, st.binary(max_size=30),
                    st.binary(max_size=30))


@given(text, text, i32)
def test_offset_key_round_trip(group: str, topic: str, partition: int) -> None:
    key = OffsetCommitKey(group, topic, partition)
    assert decode_key(encode_offset_key(key)) == key


@given(text)
def test_group_key_round_trip(group: str) -> None:
    assert decode_key(encode_group_key(GroupMetadataKey(group))) == GroupMetadataKey(group)


@given(i64, i32, text, i64, st.one_of(st.just(-1), i64))
def test_offset_value_round_trip(offset: int, epoch: int, metadata: str, committed: int, expire: int) -> None:
    value = OffsetCommitValue(offset, epoch, metadata, committed, expire)
    got = decode_offset_value(encode_offset_value(value))
    # v1 (written when an expire timestamp is set) has no leader epoch: Kafka reads it as none.
    assert got == (value if expire == -1 else OffsetCommitValue(offset, -1, metadata, committed, expire))


@given(text, i32, st.none() | text, st.none() | text, i64, st.lists(members, max_size=4))
def test_group_value_round_trip(protocol_type: str, generation: int, protocol: str | None, leader: str | None,
                                timestamp: int, group_members: list[MemberMetadata]) -> None:
    value = GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, tuple(group_members))
    assert decode_group_value(encode_group_value(value)) == value
