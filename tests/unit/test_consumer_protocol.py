"""protocol.consumer_protocol against kafka-python's classes generated from Kafka's JSON (an
independent implementation), both ways, and its tolerance of what other clients send."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from protocol.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from protocol.errors import ProtocolError

topic_names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=20)
topic_partitions = st.lists(st.tuples(topic_names, st.lists(st.integers(0, 2**31 - 1), max_size=8).map(tuple)),
                            max_size=6).map(tuple)
user_data = st.none() | st.binary(max_size=20)


@given(topic_partitions, user_data, st.sampled_from([0, 1]))
def test_assignment_matches_kafka_python_both_ways(parts, data, version):
    theirs = ConsumerProtocolAssignment(version=version, assigned_partitions=[(t, list(ps)) for t, ps in parts],
                                        user_data=data).encode(version=version)
    assert encode_assignment(Assignment(parts, data, version)) == theirs
    assert decode_assignment(theirs) == Assignment(parts, data, version)


@given(st.lists(topic_names, max_size=5).map(tuple), user_data, topic_partitions, st.sampled_from([0, 1]))
def test_subscription_matches_kafka_python_both_ways(topics, data, owned, version):
    owned = owned if version >= 1 else ()
    fields = {"topics": list(topics), "user_data": data}
    if version >= 1:
        fields["owned_partitions"] = [(t, list(ps)) for t, ps in owned]
    theirs = ConsumerProtocolSubscription(version=version, **fields).encode(version=version)
    assert encode_subscription(Subscription(topics, data, owned, version)) == theirs
    assert decode_subscription(theirs) == Subscription(topics, data, owned, version)


def test_empty_bytes_are_the_empty_assignment():
    # A member between JoinGroup and SyncGroup has no assignment bytes yet.
    assert decode_assignment(b"") == Assignment()
    assert decode_assignment(b"").topic_partitions() == []


def test_assignment_without_user_data_field_and_newer_version():
    # Version 3 (unknown) is read with the newest layout, as Kafka's ConsumerProtocol does;
    # some clients stop after the partitions.
    body = encode_assignment(Assignment((("t", (1, 0)), ("u", (4,))), None, 3))[:-4]
    got = decode_assignment(body)
    assert got.version == 3 and got.user_data is None
    assert got.topic_partitions() == [("t", 1), ("t", 0), ("u", 4)]


@pytest.mark.parametrize("data", [b"\xff\xff\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05\x00\x01t",
                                  b"\x00", b"\x00\x00\x00\x00\x00\x01\x00\x05t"])
def test_malformed_assignment_is_a_protocol_error(data):
    with pytest.raises(ProtocolError):
        decode_assignment(data)
