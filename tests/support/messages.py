"""The messages the client-compatibility tests write with each client and read back."""

from __future__ import annotations

import asyncio

N_MESSAGES = 10_000


def expected_messages(tag: str, n: int = N_MESSAGES) -> list[tuple[bytes, bytes]]:
    """Keyed values of varied size, so compression and offset assignment are exercised for real.

    Printable, tab- and newline-free, so kcat's line-oriented input and output carry them unchanged.
    """
    return [(f"{tag}-key-{i % 97}".encode(), f"{tag}-value-{i}-".encode() + b"x" * (i % 50)) for i in range(n)]


def read_back_with_kafka_python(bootstrap: str, topic: str, n: int = N_MESSAGES,
                                seek_to: int | None = None, timeout_ms: int = 10_000,
                                **config: object) -> tuple[list[tuple[int, bytes, bytes]], list]:
    """assign + seek_to_beginning, every message of partition 0; then optionally seek and poll once.
    `config`: more KafkaConsumer settings (security_protocol, ssl_*, sasl_*)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(**{"bootstrap_servers": bootstrap, **config}, group_id=None, enable_auto_commit=False,
                      consumer_timeout_ms=timeout_ms)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for m in c:
            got.append((m.offset, m.key, m.value))
            if len(got) == n:
                break
        tail = []
        if seek_to is not None:
            c.seek(tp, seek_to)
            tail = [(m.offset, m.key, m.value) for _, batch in c.poll(10_000).items() for m in batch]
        return got, tail
    finally:
        c.close()



async def round_trip_with_aiokafka(topic: str, msgs: list[tuple[bytes, bytes]], producer: dict[str, object],
                                   consumer: dict[str, object] | None = None) -> list[tuple[int, bytes, bytes]]:
    """aiokafka writes `msgs` to partition 0 with acks=all, then reads the partition back from the
    start: (offset, key, value) of each. `producer`/`consumer`: the client settings (bootstrap,
    security); the consumer's default to the producer's."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    p = AIOKafkaProducer(**producer, acks="all")
    await p.start()
    try:
        for k, v in msgs:
            await p.send(topic, v, key=k, partition=0)
        await p.flush()
    finally:
        await p.stop()
    c = AIOKafkaConsumer(**(consumer if consumer is not None else producer), group_id=None,
                         enable_auto_commit=False)
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        got: list[tuple[int, bytes, bytes]] = []
        while len(got) < len(msgs):
            batch = await asyncio.wait_for(c.getmany(tp, timeout_ms=1000), 60)
            got += [(m.offset, m.key, m.value) for m in batch.get(tp, [])]
        return got
    finally:
        await c.stop()

# ---- records with headers and timestamps (message format v2) -------------------------------------

T0_MS = 1_700_000_000_000
HeaderedMessage = tuple[bytes, bytes, list[tuple[str, bytes]], int]  # key, value, headers, timestamp


def headered_messages(tag: str, n: int = 2_000) -> list[HeaderedMessage]:
    """Keyed values with three headers each (text, binary, empty) and explicit CreateTime timestamps.

    Header keys are distinct within a message, so clients that take headers as a mapping (KafkaJS)
    keep their order; binary header values exercise byte-exactness.
    """
    return [(f"{tag}-key-{i % 97}".encode(), f"{tag}-value-{i}-".encode() + b"x" * (i % 50),
             [("h-text", f"{tag}-h-{i}".encode()), ("h-bin", bytes([i % 256, 0, 255, 10, 9])), ("h-empty", b"")],
             T0_MS + 7 * i) for i in range(n)]


def read_headered_with_kafka_python(bootstrap: str, topic: str, n: int,
                                    **consumer_config: object) -> list[tuple[int, bytes, bytes, list, int]]:
    """(offset, key, value, headers, timestamp) of the first n messages of partition 0, read with
    assign + seek_to_beginning; consumer_config pins, e.g., api_version=(0, 10, 1)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      consumer_timeout_ms=10_000, **consumer_config)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        for m in c:
            got.append((m.offset, m.key, m.value, [(k, bytes(v)) for k, v in (m.headers or [])], m.timestamp))
            if len(got) == n:
                break
        return got
    finally:
        c.close()
