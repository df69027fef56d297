"""aiokafka: its producer sends RecordBatch v2 (inside Produce v2), stored as sent. Read back byte-exact."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.support.messages import N_MESSAGES, expected_messages
from tests.support.topics import create_topic

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("acks", [1, "all"])
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
async def test_aiokafka_round_trip(client_broker, acks, codec) -> None:  # noqa: ANN001
    topic = f"aio-{codec or 'none'}-{acks}"
    await create_topic(client_broker, topic)
    msgs = expected_messages(topic)
    p = AIOKafkaProducer(bootstrap_servers=client_broker.bootstrap, acks=acks, compression_type=codec,
                         linger_ms=5, enable_idempotence=False)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v, partition=0) for k, v in msgs]
        metas = [await f for f in futures]
    finally:
        await p.stop()
    assert sorted(m.offset for m in metas) == list(range(N_MESSAGES))

    c = AIOKafkaConsumer(bootstrap_servers=client_broker.bootstrap, group_id=None, enable_auto_commit=False)
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got = []
        while len(got) < N_MESSAGES:
            batch = await c.getmany(tp, timeout_ms=10_000)
            assert batch, f"stalled after {len(got)} messages"
            got.extend((m.offset, m.key, m.value) for m in batch[tp])
        assert [o for o, _, _ in got] == list(range(N_MESSAGES))
        assert [(k, v) for _, k, v in got] == msgs
        c.seek(tp, 5_000)
        m = await c.getone()
        assert (m.offset, m.key, m.value) == (5_000, *msgs[5_000])
    finally:
        await c.stop()
