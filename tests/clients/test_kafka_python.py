"""kafka-python: keyed produce with every codec it offers, assign + seek_to_beginning, byte-exact."""

from __future__ import annotations

import asyncio

import pytest
from kafka import KafkaProducer

from tests.support.messages import N_MESSAGES, expected_messages, read_back_with_kafka_python
from tests.support.topics import create_topic

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("acks", [1, "all"])
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
def test_kafka_python_round_trip(client_broker, acks, codec) -> None:  # noqa: ANN001
    topic = f"kp-{codec or 'none'}-{acks}"
    asyncio.run(create_topic(client_broker, topic))
    msgs = expected_messages(topic)
    p = KafkaProducer(bootstrap_servers=client_broker.bootstrap, acks=acks, compression_type=codec,
                      linger_ms=5, request_timeout_ms=30_000)
    try:
        futures = [p.send(topic, key=k, value=v, partition=0) for k, v in msgs]
        p.flush(60)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        p.close(10)
    assert sorted(m.offset for m in metas) == list(range(N_MESSAGES))

    got, tail = read_back_with_kafka_python(client_broker.bootstrap, topic, seek_to=9_990)
    assert [o for o, _, _ in got] == list(range(N_MESSAGES))
    assert [(k, v) for _, k, v in got] == msgs
    assert tail[0] == (9_990, *msgs[9_990])
