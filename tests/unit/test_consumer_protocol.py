"""protocol/consumer_protocol.py against kafka-python's consumer protocol classes (an independent codec)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.consumer_protocol import (
    assignment_partitions,
    encode_assignment,
    encode_subscription,
    subscription_topics,
)

names = st.text(min_size=1, max_size=12)


@given(st.lists(names, max_size=5, unique=True), st.binary(max_size=8))
def test_subscription_matches_kafka_python(topics: list[str], user_data: bytes) -> None:
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    theirs = bytes(ConsumerProtocolSubscription(version=0, topics=topics, user_data=user_data).encode())
    assert encode_subscription(topics, user_data) == theirs
    assert subscription_topics(theirs) == set(topics)


@given(st.dictionaries(names, st.lists(st.integers(0, 1000), max_size=4), max_size=4))
def test_assignment_matches_kafka_python(partitions: dict[str, list[int]]) -> None:
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    theirs = bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=list(partitions.items()),
                                              user_data=b'').encode())
    assert encode_assignment(partitions, b'') == theirs
    assert assignment_partitions(theirs) == partitions


def test_later_versions_parse_by_their_version_0_prefix_and_garbage_is_none() -> None:
    v1 = b'\x00\x01' + encode_subscription(['t'])[2:] + b'\x00\x00\x00\x00'  # v1 adds owned partitions
    assert subscription_topics(v1) == {'t'}
    assert subscription_topics(b'\x00') is None
    assert subscription_topics(b'\xff\xff') is None
    assert subscription_topics(b'\x00\x00\x7f\xff\xff\xff') is None
    assert assignment_partitions(b'') == {}
    assert assignment_partitions(b'\x00\x00\x00\x00\x00\x01\x00') is None
