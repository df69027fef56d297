"""The keys and values of `__consumer_offsets`, in Kafka's own formats (pure: bytes in, bytes out).

Written from Kafka's internal-topic schemas (OffsetCommitKey, GroupMetadataKey,
OffsetCommitValue, GroupMetadataValue JSON) and Kafka 2.8's GroupMetadataManager, which picks
the versions: every key starts with an int16 version that says what it is (0 and 1: an offset
commit, `group, topic, partition`; 2: group metadata, `group`), every value with an int16
version of its own. Kafka 2.8 writes offset keys v1, group keys v2, offset values v3 (v1 when
the commit carries an expire timestamp, which v3 cannot hold) and group values v3; these are
what `encode_*` write. `decode_*` read every version Kafka 2.8 reads (offset values 0-3, group
values 0-3), filling what an older version lacks as Kafka does (no leader epoch: -1; group v0's
rebalance timeout: the session timeout; before v2 no state timestamp: -1; before v3 no group
instance id). Bytes after the fields are ignored, as Kafka's Schema.read ignores them. A value
of an unknown version, or bytes that do not parse, raise GroupMetadataError; so does a key of an unknown version (Kafka 2.8 fails the whole load on one;
the replay in broker.group skips it).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ProtocolError
from protocol.primitives import Reader, Writer

OFFSET_KEY_VERSIONS = (0, 1)
GROUP_KEY_VERSION = 2
OFFSET_KEY_WRITTEN = 1
OFFSET_VALUE_WRITTEN = 3
OFFSET_VALUE_WITH_EXPIRY = 1
GROUP_VALUE_WRITTEN = 3
NO_TIMESTAMP = -1  # Kafka's default for expireTimestamp and currentStateTimestamp
NO_LEADER_EPOCH = -1


class GroupMetadataError(ValueError):
    """A key or value that is not one of Kafka's formats (unknown version, truncated)."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1: none (v0-2 have none)
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = NO_TIMESTAMP  # v1 only; -1: none


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None  # v3+
    client_id: str
    client_host: str
    rebalance_timeout: int  # v1+ (v0: the session timeout)
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # v2+; -1: none
    members: tuple[MemberMetadata, ...]


# ---- keys ---------------------------------------------------------------------------------------

def encode_offset_key(key: OffsetCommitKey) -> bytes:
    w = Writer()
    w.int16(OFFSET_KEY_WRITTEN)
    w.string(key.group)
    w.string(key.topic)
    w.int32(key.partition)
    return w.getvalue()


def encode_group_key(key: GroupMetadataKey) -> bytes:
    w = Writer()
    w.int16(GROUP_KEY_VERSION)
    w.string(key.group)
    return w.getvalue()


def decode_key(data: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey:
    """Kafka's GroupMetadataManager.readMessageKey."""
    try:
        r = Reader(data)
        version = r.int16()
        if version in OFFSET_KEY_VERSIONS:
            key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(_string(r), _string(r), r.int32())
        elif version == GROUP_KEY_VERSION:
            key = GroupMetadataKey(_string(r))
        else:
            raise GroupMetadataError(f"unknown group metadata key version {version}")
    except ProtocolError as e:
        raise GroupMetadataError(f"malformed key: {e}") from None
    return key


# ---- offset commit values -----------------------------------------------------------------------

def encode_offset_value(value: OffsetCommitValue) -> bytes:
    """v3, or v1 when the commit has an expire timestamp (Kafka 2.8's offsetCommitValue)."""
    w = Writer()
    if value.expire_timestamp != NO_TIMESTAMP:
        w.int16(OFFSET_VALUE_WITH_EXPIRY)
        w.int64(value.offset)
        w.string(value.metadata)
        w.int64(value.commit_timestamp)
        w.int64(value.expire_timestamp)
    else:
        w.int16(OFFSET_VALUE_WRITTEN)
        w.int64(value.offset)
        w.int32(value.leader_epoch)
        w.string(value.metadata)
        w.int64(value.commit_timestamp)
    return w.getvalue()


def decode_offset_value(data: bytes | memoryview) -> OffsetCommitValue:
    """Kafka's readOffsetMessageValue, versions 0-3."""
    try:
        r = Reader(data)
        version = r.int16()
        if not 0 <= version <= 3:
            raise GroupMetadataError(f"unknown offset commit value version {version}")
        offset = r.int64()
        epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
        metadata = _string(r)
        commit_timestamp = r.int64()
        expire = r.int64() if version == 1 else NO_TIMESTAMP
    except ProtocolError as e:
        raise GroupMetadataError(f"malformed offset commit value: {e}") from None
    return OffsetCommitValue(offset, epoch, metadata, commit_timestamp, expire)


# ---- group metadata values ----------------------------------------------------------------------

def encode_group_value(value: GroupMetadataValue) -> bytes:
    """v3 (Kafka 2.8's groupMetadataValue from inter.broker.protocol.version 2.3 on)."""
    w = Writer()
    w.int16(GROUP_VALUE_WRITTEN)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.int64(value.current_state_timestamp)
    w.array_length(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes(m.subscription)
        w.bytes(m.assignment)
    return w.getvalue()


def decode_group_value(data: bytes | memoryview) -> GroupMetadataValue:
    """Kafka's readGroupMessageValue, versions 0-3."""
    try:
        r = Reader(data)
        version = r.int16()
        if not 0 <= version <= 3:
            raise GroupMetadataError(f"unknown group metadata value version {version}")
        protocol_type = _string(r)
        generation = r.int32()
        protocol = r.string(nullable=True)
        leader = r.string(nullable=True)
        state_timestamp = r.int64() if version >= 2 else NO_TIMESTAMP
        count = r.array_length(min_item_size=22)  # four empty strings, a timeout, two empty byte arrays
        members = []
        for _ in range(count or 0):
            member_id = _string(r)
            instance_id = r.string(nullable=True) if version >= 3 else None
            client_id = _string(r)
            client_host = _string(r)
            rebalance_timeout = r.int32() if version >= 1 else None
            session_timeout = r.int32()
            subscription = _bytes(r)
            assignment = _bytes(r)
            members.append(MemberMetadata(member_id, instance_id, client_id, client_host,
                                          session_timeout if rebalance_timeout is None else rebalance_timeout,
                                          session_timeout, subscription, assignment))
    except ProtocolError as e:
        raise GroupMetadataError(f"malformed group metadata value: {e}") from None
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


# ---- helpers -----------------------------------------------------------------------------------

def _string(r: Reader) -> str:
    s = r.string()
    assert s is not None  # not nullable: a -1 length raised
    return s


def _bytes(r: Reader) -> bytes:
    b = r.bytes()
    assert b is not None
    return b


__all__ = ["GroupMetadataError", "GroupMetadataKey", "GroupMetadataValue", "MemberMetadata", "OffsetCommitKey",
           "OffsetCommitValue", "decode_group_value", "decode_key", "decode_offset_value", "encode_group_key",
           "encode_group_value", "encode_offset_key", "encode_offset_value"]
