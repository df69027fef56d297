"""The consumer protocol's embedded payloads (ConsumerProtocolSubscription/Assignment), version-0 prefix.

A consumer group's JoinGroup metadata is a Subscription and its SyncGroup assignment an
Assignment, both opaque to the coordinator except here: Kafka 2.8's GroupMetadata reads the
version-0 prefix of every member's subscription (every later version extends it) to know the
topics a group subscribes to (OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC, offset expiry of a
stable group). Undecodable bytes are None, as Kafka treats a SchemaException: the coordinator
then assumes every topic is subscribed.
"""

from __future__ import annotations

from protocol.errors import ProtocolError
from protocol.primitives import Reader, Writer


def subscription_topics(data: bytes | memoryview) -> set[str] | None:
    """The topics of a Subscription (int16 version, [string] topics, ...), or None if it does not parse."""
    try:
        r = Reader(data)
        if r.int16() < 0:
            return None
        count = r.array_length()
        topics = set()
        for _ in range(count or 0):
            name = r.string()
            if name is None:
                return None
            topics.add(name)
        return topics
    except ProtocolError:
        return None


def assignment_partitions(data: bytes | memoryview) -> dict[str, list[int]] | None:
    """An Assignment's partitions by topic (int16 version, [topic, [int32]], ...), or None."""
    if len(data) == 0:
        return {}
    try:
        r = Reader(data)
        if r.int16() < 0:
            return None
        out: dict[str, list[int]] = {}
        for _ in range(r.array_length() or 0):
            topic = r.string()
            if topic is None:
                return None
            out[topic] = [r.int32() for _ in range(r.array_length(min_item_size=4) or 0)]
        return out
    except ProtocolError:
        return None


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """A version-0 Subscription (tests and tools)."""
    w = Writer()
    w.int16(0)
    w.array_length(len(topics))
    for topic in topics:
        w.string(topic)
    w.bytes(user_data)
    return w.getvalue()


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    """A version-0 Assignment (tests and tools)."""
    w = Writer()
    w.int16(0)
    w.array_length(len(partitions))
    for topic, indexes in partitions.items():
        w.string(topic)
        w.array_length(len(indexes))
        for index in indexes:
            w.int32(index)
    w.bytes(user_data)
    return w.getvalue()
