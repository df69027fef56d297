"""The consumer protocol's embedded messages: what a "consumer" group carries in its opaque bytes.

JoinGroup's protocol metadata (a member's subscription) and SyncGroup's / DescribeGroups'
member assignment are bytes to the coordinator; consumers fill them with Kafka's
ConsumerProtocolSubscription and ConsumerProtocolAssignment (clients' resources, versions 0-1),
each preceded by an int16 version. Declared from Kafka 2.8.2's JSON:

- Subscription: topics []string, user_data nullable bytes, owned_partitions (v1+)
  [](topic string, partitions []int32).
- Assignment: assigned_partitions [](topic string, partitions []int32), user_data nullable bytes.

As Kafka's ConsumerProtocol does, a version above the newest known one is read with the newest
layout (new versions may only append fields), and a negative version is an error. Readers of
other clients' bytes (the `minibroker groups` tool) also accept an empty assignment, which a
member has before its first SyncGroup, as no partitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import ProtocolError
from protocol.primitives import Reader, Writer

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partitions) in the order sent


@dataclass(frozen=True)
class Assignment:
    partitions: TopicPartitions = ()
    user_data: bytes | None = None
    version: int = 0

    def topic_partitions(self) -> list[tuple[str, int]]:
        """Every assigned (topic, partition), flattened in the order sent."""
        return [(topic, p) for topic, parts in self.partitions for p in parts]


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...] = ()
    user_data: bytes | None = None
    owned_partitions: TopicPartitions = field(default=())
    version: int = 0


def _topic_partitions(r: Reader) -> TopicPartitions:
    n = r.array_length(min_item_size=6)
    out = []
    for _ in range(n or 0):
        topic = r.string() or ""
        count = r.array_length(min_item_size=4)
        out.append((topic, tuple(r.int32() for _ in range(count or 0))))
    return tuple(out)


def _write_topic_partitions(w: Writer, parts: TopicPartitions) -> None:
    w.array_length(len(parts))
    for topic, partitions in parts:
        w.string(topic)
        w.array_length(len(partitions))
        for p in partitions:
            w.int32(p)


def _version(r: Reader, what: str) -> int:
    version = r.int16()
    if version < 0:
        raise ProtocolError(f"{what} version {version} is negative")
    return version


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    """A member's assignment bytes; empty bytes are the empty assignment. Raises ProtocolError."""
    if len(data) == 0:
        return Assignment()
    try:
        r = Reader(data)
        version = _version(r, "assignment")
        parts = _topic_partitions(r)
        # Some clients end the message after the partitions; a missing user_data is null.
        user_data = r.bytes(nullable=True) if r.remaining() else None
    except (ValueError, IndexError) as e:
        raise ProtocolError(f"malformed consumer assignment: {e}") from e
    return Assignment(parts, user_data, version)


def encode_assignment(assignment: Assignment) -> bytes:
    w = Writer()
    w.int16(assignment.version)
    _write_topic_partitions(w, assignment.partitions)
    w.bytes(assignment.user_data)
    return w.getvalue()


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """A member's subscription (JoinGroup protocol metadata of protocol type "consumer")."""
    try:
        r = Reader(data)
        version = _version(r, "subscription")
        n = r.array_length(min_item_size=2)
        topics = tuple(r.string() or "" for _ in range(n or 0))
        user_data = r.bytes(nullable=True) if r.remaining() else None
        owned = _topic_partitions(r) if version >= 1 and r.remaining() else ()
    except (ValueError, IndexError) as e:
        raise ProtocolError(f"malformed consumer subscription: {e}") from e
    return Subscription(topics, user_data, owned, version)


def encode_subscription(subscription: Subscription) -> bytes:
    w = Writer()
    w.int16(subscription.version)
    w.array_length(len(subscription.topics))
    for topic in subscription.topics:
        w.string(topic)
    w.bytes(subscription.user_data)
    if subscription.version >= 1:
        _write_topic_partitions(w, subscription.owned_partitions)
    return w.getvalue()
